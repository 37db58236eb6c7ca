//! Per-example gradients: a model compiled to a [`Network`] of layers with exact per-example
//! rules (one file each in [`layers`]: linear, conv2d via im2col + GEMM, ReLU, tanh, max-pool,
//! flatten), evaluated on contiguous buffers, parallel over micro-batches of examples.
//!
//! The rules are tested against one-backward-per-example gradients from burn's autodiff
//! (`tests/per_example_vs_autodiff.rs`).

mod engine;
pub mod layers;
mod loss;
mod matrix;
mod network;

pub use engine::Workspace;
pub use layers::{Layer, Params};
pub use network::{MAX_VALUES, Network, ShapeError};
