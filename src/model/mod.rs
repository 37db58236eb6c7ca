//! The returned model in other forms: burn modules ([`BurnModel`]) for records, evaluation on
//! any burn device and autodiff reference gradients, and a portable safetensors file
//! ([`export`]) that carries its own architecture. Architectures themselves are plain data in
//! [`crate::arch`].

mod burn_model;
pub mod export;

pub(crate) use burn_model::spec_params;
pub use burn_model::{BurnModel, ConfigModel, save_module};
