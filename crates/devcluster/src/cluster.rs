//! The shared state of one running cluster: registry, store, credentials, options.

use crate::registry::Registry;
use crate::store::{Store, StoreOptions};
use crate::tls::Credentials;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// How a cluster runs. `Default` is what tests want: a free loopback port, memory only.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address to listen on; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Keep state (objects, CA, admin token) here, surviving restarts and crashes.
    pub data_dir: Option<PathBuf>,
    /// Changes kept for watches that resume from an older resourceVersion.
    pub history: usize,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: None,
            history: 100_000,
            bookmark_interval: Duration::from_secs(60),
        }
    }
}

/// One cluster's state, shared by the HTTP server and the cluster's own controllers.
#[derive(Debug)]
pub struct Cluster {
    pub registry: Registry,
    pub store: Store,
    pub creds: Credentials,
    pub options: Options,
    /// `https://127.0.0.1:PORT`, once bound.
    pub server_url: OnceLock<String>,
}

impl Cluster {
    pub fn new(options: Options) -> anyhow::Result<Cluster> {
        let store = Store::open(StoreOptions { history: options.history, data_dir: options.data_dir.clone() })?;
        let creds = match &options.data_dir {
            Some(dir) => Credentials::load_or_generate(dir)?,
            None => Credentials::generate()?,
        };
        Ok(Cluster { registry: Registry::with_builtins(), store, creds, options, server_url: OnceLock::new() })
    }

    pub fn server_url(&self) -> &str {
        self.server_url.get().map(String::as_str).unwrap_or("")
    }
}
