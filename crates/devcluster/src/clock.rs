//! The clock of the cluster's time-driven controllers (CronJob schedules, Job deadlines,
//! TTL after finished): the wall clock plus an offset a test can move forward, so a test of an
//! hourly CronJob advances the clock by an hour instead of waiting one
//! (`Options::clock`, `DevCluster::advance_clock`). Object timestamps these controllers write
//! (`status.lastScheduleTime`, a Job's `startTime`/`completionTime`) come from this clock;
//! everything else (creation timestamps, events, pods) keeps the wall clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// The wall clock shifted by an offset that only grows. Clones share the offset.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    offset_ms: Arc<AtomicI64>,
}

impl Clock {
    /// Now, as the controllers see it.
    pub fn now(&self) -> jiff::Timestamp {
        let now = jiff::Timestamp::now();
        let off = self.offset_ms.load(Ordering::SeqCst);
        now.checked_add(jiff::SignedDuration::from_millis(off)).unwrap_or(now)
    }

    /// Unix milliseconds of [`Clock::now`].
    pub fn now_ms(&self) -> i64 {
        self.now().as_millisecond()
    }

    /// `metav1.Time` of now: RFC 3339 UTC, whole seconds.
    pub fn now_rfc3339(&self) -> String {
        format_rfc3339(self.now().as_second())
    }

    /// Move the clock forward.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.offset_ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// How far the clock is ahead of the wall clock.
    pub fn offset(&self) -> Duration {
        Duration::from_millis(self.offset_ms.load(Ordering::SeqCst).max(0) as u64)
    }
}

/// Unix seconds as `metav1.Time` (`2026-01-02T03:04:05Z`).
pub fn format_rfc3339(unix: i64) -> String {
    jiff::Timestamp::from_second(unix)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_and_shares_the_offset() {
        let c = Clock::default();
        let d = c.clone();
        let before = c.now_ms();
        d.advance(Duration::from_secs(3600));
        assert!(c.now_ms() >= before + 3_600_000);
        assert_eq!(c.offset(), Duration::from_secs(3600));
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
    }
}
