//! The returned model in other forms: burn modules ([`BurnModel`]) for records, evaluation on
//! any burn device and autodiff reference gradients (and, for a sequence of the fast engine's
//! kinds, training at its speed: [`FastModel`]), and a portable safetensors file
//! ([`export`]) that carries its own architecture. Architectures themselves are plain data in
//! [`crate::arch`].

mod burn_model;
pub mod export;
mod fast_model;

pub(crate) use burn_model::spec_params;
pub use burn_model::{BurnModel, ConfigModel, save_module};
pub use fast_model::FastModel;
