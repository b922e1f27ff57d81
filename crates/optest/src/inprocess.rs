//! An operator running in a task of the test's runtime (its `run(client, ..., shutdown)`), so that
//! the test reads its in-process state (metrics, counters) directly; stopped when dropped. And
//! the [`Fixture`] it runs in: the cluster, the admin, the operator's ServiceAccount.

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

/// What an end-to-end test of an operator holds: a devcluster prepared for the operator, the
/// admin's client, the operator's ServiceAccount's client and configuration, and the operator
/// when it runs in-process (with `T`, what the test reads of it). Each operator's `Env` wraps
/// one and adds what is its own.
pub struct Fixture<T> {
    /// First, so that it is dropped (stopped) before the cluster it talks to.
    pub op: Option<InProcess<T>>,
    pub dc: devcluster::DevCluster,
    /// The cluster admin (the test's own hands).
    pub admin: kube::Client,
    /// The operator's ServiceAccount, with exactly the shipped RBAC.
    pub sa: kube::Client,
    /// The ServiceAccount's client configuration, for clients of the operator's own (one
    /// counting its requests, as the binary's does).
    pub sa_config: kube::Config,
}

impl<T> Fixture<T> {
    /// A devcluster with `options`, prepared by `install` (as the admin: CRDs, RBAC, namespaces),
    /// and the credentials of the operator's ServiceAccount `namespace/name`; no operator yet.
    pub async fn start(
        options: devcluster::Options,
        (namespace, name): (&str, &str),
        install: impl AsyncFnOnce(&kube::Client),
    ) -> Fixture<T> {
        let dc = crate::cluster::start(options).await;
        let admin = dc.client();
        install(&admin).await;
        let sa_config = crate::service_account::config(&dc, namespace, name).await;
        let sa = kube::Client::try_from(sa_config.clone())
            .unwrap_or_else(|e| panic!("a client for {namespace}/{name}: {e}"));
        Fixture { op: None, dc, admin, sa, sa_config }
    }

    /// Start the operator: `run(shutdown)` in a task, with `state`.
    pub fn start_operator<Fut, E>(&mut self, state: T, run: impl FnOnce(Shutdown) -> Fut)
    where
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Debug + Send + 'static,
    {
        assert!(self.op.is_none(), "an operator is already running");
        self.op = Some(InProcess::spawn(state, run));
    }

    /// Stop the running operator and wait until it has stopped.
    pub async fn stop_operator(&mut self) {
        self.op.take().expect("an operator runs").stop().await;
    }

    /// What the test reads of the running operator.
    pub fn operator(&self) -> &T {
        &self.op.as_ref().expect("an operator runs").state
    }

    /// Whether an operator was started and has not ended (it should not, until stopped).
    pub fn operator_running(&self) -> bool {
        self.op.as_ref().is_some_and(|o| !o.finished())
    }
}

/// `Deref` and `DerefMut` from an operator's `Env` to the [`Fixture`] in one of its fields, so
/// that its tests write `env.dc`, `env.admin`, `env.sa`, `env.op`:
/// `optest::deref_to_fixture!(Env, fixture, Arc<Metrics>);`.
#[macro_export]
macro_rules! deref_to_fixture {
    ($env:ty, $field:ident, $state:ty) => {
        impl ::std::ops::Deref for $env {
            type Target = $crate::Fixture<$state>;

            fn deref(&self) -> &Self::Target {
                &self.$field
            }
        }

        impl ::std::ops::DerefMut for $env {
            fn deref_mut(&mut self) -> &mut Self::Target {
                &mut self.$field
            }
        }
    };
}
