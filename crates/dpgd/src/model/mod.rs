//! The burn form of a model ([`BurnModel`]): records, evaluation on any burn device, and
//! autodiff reference gradients. Architectures themselves are plain data in [`crate::arch`].

mod burn_model;

pub use burn_model::BurnModel;
