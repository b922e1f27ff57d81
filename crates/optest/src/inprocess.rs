//! An operator running in a task of the test's runtime (its `run(client, ..., shutdown)`), so that
//! the test reads its in-process state (metrics, counters) directly; stopped when dropped.

use crate::WAIT;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::oneshot;

/// The shutdown signal handed to the operator: ready when the test stops it (or drops it).
pub struct Shutdown(oneshot::Receiver<()>);

impl Future for Shutdown {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx).map(|_| ())
    }
}

/// The running operator, with `state`: what the test reads of it (its metrics).
pub struct InProcess<T = ()> {
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), String>>>,
    pub state: T,
}

impl<T> InProcess<T> {
    /// Spawn `run(shutdown)` on the test's runtime.
    pub fn spawn<Fut, E>(state: T, run: impl FnOnce(Shutdown) -> Fut) -> InProcess<T>
    where
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Debug + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let running = run(Shutdown(rx));
        let task = tokio::spawn(async move { running.await.map_err(|e| format!("{e:?}")) });
        InProcess { stop: Some(tx), task: Some(task), state }
    }

    /// Ask it to stop (graceful shutdown: reconciles in flight finish) and wait until it did;
    /// fails the test if it does not within [`WAIT`] or ended with an error.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let ended = tokio::time::timeout(WAIT, t).await.expect("the operator stops in time");
            let result = ended.unwrap_or_else(|e| panic!("the operator's task: {e}"));
            result.unwrap_or_else(|e| panic!("the operator ended with an error: {e}"));
        }
    }

    /// Whether it has ended (it should not, until stopped).
    pub fn finished(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }
}

impl<T> Drop for InProcess<T> {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}
