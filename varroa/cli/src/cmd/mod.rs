//! The subcommands.

pub mod completion;
pub mod describe;
pub mod get;
pub mod power;
