//! clikit: what the command lines of Vesper (`vesperctl`) and Varroa (`varroa`) share, so that
//! both read and print like kubectl and like each other.
//!
//! - [`cli`]: the global `--kubeconfig`, `--context`, `-n` flags and the `completion` command;
//! - [`client`]: connecting to the API server the way kubectl does;
//! - [`apierror`]: the API server's refusals as a person reads them (a 422's causes per field);
//! - [`table`]: columns aligned as kubectl aligns them;
//! - [`timefmt`]: durations as people type them, ages as kubectl prints them;
//! - [`events`]: the Events section of `describe`;
//! - [`output`]: `-o json` and `-o yaml` (the objects as stored, several in a `v1` List);
//! - `testing` (feature `testing`): running a built CLI binary from integration tests.
//!
//! What is particular to one CLI (its errors and exit codes, its resources and their columns)
//! stays in that CLI's crate.

pub mod apierror;
pub mod cli;
pub mod client;
pub mod events;
pub mod output;
pub mod table;
#[cfg(feature = "testing")]
pub mod testing;
pub mod timefmt;
