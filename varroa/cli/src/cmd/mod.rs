//! The subcommands.

pub mod activity;
pub mod artifacts;
pub mod builds;
pub mod completion;
pub mod describe;
pub mod get;
pub mod logs;
pub mod power;
pub mod schedules;
