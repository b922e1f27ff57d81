//! A time limit for every reconcile, as controller-runtime's `ReconcileTimeout` gives one: a
//! reconcile that does not finish in time is dropped (its requests cancelled) and counts as an
//! error, so the controller's error policy retries it with backoff. Without it, one request that
//! never completes holds that object's reconcile (and a slot of the controller) forever.

use std::future::Future;
use std::time::Duration;

/// How a reconcile with a time limit failed: its own error, or the limit.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError<E> {
    /// The reconcile ran longer than the limit and was stopped.
    #[error("the reconcile did not finish within {}s and was stopped; it is retried", .0.as_secs_f64())]
    TimedOut(Duration),
    /// The reconcile failed.
    #[error(transparent)]
    Failed(E),
}

impl<E> ReconcileError<E> {
    /// The reconcile's own error, if that is what ended it.
    pub fn failed(&self) -> Option<&E> {
        match self {
            ReconcileError::Failed(e) => Some(e),
            ReconcileError::TimedOut(_) => None,
        }
    }

    /// `timeout` for a time-out, `label(e)` for the reconcile's own error.
    pub fn metric_label(&self, label: impl FnOnce(&E) -> &'static str) -> &'static str {
        match self {
            ReconcileError::Failed(e) => label(e),
            ReconcileError::TimedOut(_) => "timeout",
        }
    }
}

/// Run `reconcile`, stopping it after `limit`.
pub async fn within<T, E>(
    limit: Duration,
    reconcile: impl Future<Output = Result<T, E>>,
) -> Result<T, ReconcileError<E>> {
    match tokio::time::timeout(limit, reconcile).await {
        Ok(r) => r.map_err(ReconcileError::Failed),
        Err(_) => Err(ReconcileError::TimedOut(limit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slow_reconcile_times_out_and_a_quick_one_does_not() {
        let slow = within(Duration::from_millis(50), async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, std::io::Error>(())
        })
        .await;
        assert!(matches!(slow, Err(ReconcileError::TimedOut(d)) if d == Duration::from_millis(50)));
        assert_eq!(slow.unwrap_err().metric_label(|_| "io"), "timeout");
        let failed = within(Duration::from_secs(60), async { Err::<(), _>(std::io::Error::other("boom")) }).await;
        let e = failed.unwrap_err();
        assert_eq!((e.metric_label(|_| "io"), e.to_string()), ("io", "boom".to_string()));
        assert!(within(Duration::from_secs(1), async { Ok::<_, std::io::Error>(7) }).await.is_ok_and(|v| v == 7));
    }
}
