//! One module per command group.

pub mod completion;
pub mod create;
pub mod delete;
pub mod describe;
pub mod extend;
pub mod get;
pub mod url;
pub mod wait;
