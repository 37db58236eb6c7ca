//! `flatten`: `[c, h, w]` → `[c·h·w]` in channel-major order (as PyTorch and burn do).

use burn::module::Module;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::{Activation, Kind};
use crate::arch::Shape;

/// Flattens each example.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flatten;

/// The burn module of [`Flatten`]: `[batch, c, h, w]` → `[batch, c·h·w]`.
#[derive(Module, Debug, Default)]
pub struct FlattenModule;

impl Kind for Flatten {
    type Module = FlattenModule;

    fn out_shape(&self, input: Shape) -> std::result::Result<Shape, String> {
        Ok(Shape::Flat(input.len()))
    }
    fn init(&self, _: Shape, _: &Device) -> FlattenModule {
        FlattenModule
    }
    fn forward(_: &FlattenModule, x: Activation) -> Activation {
        Activation::Flat(x.flat())
    }
}
