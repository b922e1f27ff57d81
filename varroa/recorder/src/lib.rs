//! varroa-recorder: the build record store's writer.
//!
//! - [`migrate`]: the checked-in schema (`migrations/`), applied at start and by
//!   `varroa-recorder migrate`.
//! - [`db`]: connecting to PostgreSQL.
//! - `testing` (cargo feature `testing`): a real PostgreSQL in a temporary directory for tests.
//!
//! docs/varroa/data-plane.md describes the paths, the schema and the guarantees.

pub mod db;
pub mod migrate;
#[cfg(feature = "testing")]
pub mod testing;
