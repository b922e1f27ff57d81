//! What the real apiserver knows about its built-in kinds: schemas, defaults, validation,
//! patch metadata and printers.

pub mod defaults;
pub mod patchmeta;
pub mod printers;
pub mod quantity;
pub mod schemas;
pub mod validate;
pub mod zero;
