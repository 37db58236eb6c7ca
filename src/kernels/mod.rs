//! The per-example kernels both engines run: the fast engine's layer rules
//! ([`crate::per_example::layers`]) and the burn engine's layers on flex ([`crate::nn`]) call the
//! same functions over host slices. Below both: no model, no burn.

pub(crate) mod conv;
pub(crate) mod matrix;
pub(crate) mod norm;
pub(crate) mod pool;
