//! The operator's clock: the system time, plus an offset tests can move forward to make a TTL
//! pass without waiting for it.

use jiff::{SignedDuration, Timestamp};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct Clock {
    offset_ms: Arc<AtomicI64>,
}

impl Clock {
    pub fn now(&self) -> Timestamp {
        let now = Timestamp::now();
        now.checked_add(SignedDuration::from_millis(self.offset_ms.load(Ordering::Relaxed))).unwrap_or(now)
    }

    /// Move this clock (and every clone of it) forward.
    pub fn advance(&self, by: Duration) {
        self.offset_ms.fetch_add(by.as_millis().min(i64::MAX as u128) as i64, Ordering::Relaxed);
    }
}
