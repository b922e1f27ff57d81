//! The operators' clock: the system time, plus an offset tests can move forward (to make a TTL
//! or a grace period pass without waiting for it). Clones share the offset, so a test holds one
//! clone and the operator another.

use jiff::{SignedDuration, Timestamp};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct Clock {
    offset_ms: Arc<AtomicI64>,
}

impl Clock {
    /// The time now, as this clock tells it.
    pub fn now(&self) -> Timestamp {
        let now = Timestamp::now();
        now.checked_add(SignedDuration::from_millis(self.offset_ms.load(Ordering::Relaxed))).unwrap_or(now)
    }

    /// Move this clock (and every clone of it) forward.
    pub fn advance(&self, by: Duration) {
        self.offset_ms.fetch_add(i64::try_from(by.as_millis()).unwrap_or(i64::MAX), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_move_together() {
        let a = Clock::default();
        let b = a.clone();
        let before = b.now();
        a.advance(Duration::from_secs(3600));
        assert!(b.now().duration_since(before).as_secs() >= 3600);
    }
}
