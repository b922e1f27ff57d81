//! opkit against a real API server (devcluster) and real HTTP. One test binary, one module per
//! opkit module; every test starts its own cluster.

mod apply;
mod checkpoint;
mod events;
mod health;
mod leader;

use std::time::Duration;

/// Start a devcluster, with test logs on.
pub async fn cluster() -> anyhow::Result<devcluster::DevCluster> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    devcluster::DevCluster::start().await
}

/// Poll `f` every 10 ms until it returns `Some`, for at most `within`.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("timed out after {within:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
