//! Models: architectures as data ([`ModelSpec`]) and their burn form ([`BurnModel`]) for
//! records, evaluation on any burn device, and autodiff reference gradients.

mod burn_model;
mod spec;

pub use burn_model::BurnModel;
pub use spec::{LayerSpec, ModelSpec};
