//! `group_norm`: group normalisation within each example (Wu & He 2018) with a per-channel
//! scale γ and shift β, by [`crate::nn::GroupNorm`]: the private alternative to batch norm.
//! Trained on both engines (the fast one by [`crate::per_example::layers::GroupNorm`]'s rule).

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::{Activation, Kind, Read, param};
use crate::arch::Shape;
use crate::error::Result;
use crate::nn;

/// Group normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupNorm {
    /// Groups (the channel count must be divisible by it).
    pub groups: usize,
}

impl Kind for GroupNorm {
    type Module = nn::GroupNorm;

    fn out_shape(&self, input: Shape) -> std::result::Result<Shape, String> {
        let Shape::Spatial { c, .. } = input else {
            return Err("needs a spatial input [c, h, w]: put it before flatten".into());
        };
        if self.groups == 0 || !c.is_multiple_of(self.groups) {
            return Err(format!("{c} channels do not split into {} groups", self.groups));
        }
        Ok(input)
    }

    fn param_shapes(&self, input: Shape) -> Vec<Vec<usize>> {
        let c = super::channels(input);
        vec![vec![c], vec![c]]
    }

    fn init(&self, input: Shape, device: &Device) -> nn::GroupNorm {
        nn::GroupNormConfig::new(self.groups, super::channels(input)).init(device)
    }

    fn forward(module: &nn::GroupNorm, x: Activation) -> Activation {
        Activation::Spatial(module.forward(x.spatial()))
    }

    fn read(module: &nn::GroupNorm, read: Read<'_>) -> Result<Vec<Vec<f32>>> {
        [&module.gamma, &module.beta].into_iter().flatten().map(|p| read.flat(p)).collect()
    }

    fn write(module: &mut nn::GroupNorm, values: &[&[f32]], device: &Device) -> Result<()> {
        let ([gamma, beta], Some(g), Some(b)) = (values, &module.gamma, &module.beta) else {
            return Err(super::mismatch(values.len()));
        };
        let (gd, bd) = (g.dims(), b.dims());
        module.gamma = Some(param(gamma, gd, device)?);
        module.beta = Some(param(beta, bd, device)?);
        Ok(())
    }
}
