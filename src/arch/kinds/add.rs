//! `add`: a residual connection (He, Zhang, Ren & Sun 2016) — the layer's input plus the output
//! of the earlier layer `from` (its index in `model.layers`, counted from 0), which must have
//! the same shape: `y = x + h_from`. No parameters, and element-wise within each example, so it
//! mixes no examples. The model adds the earlier output ([`Kind::joins`]); the layer itself is
//! the identity. On both engines: the fast one by
//! [`crate::per_example::layers::Add`]'s rule and its network's joins.

use burn::module::Module;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::{Activation, Kind};
use crate::arch::Shape;

/// A residual connection from layer `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Add {
    /// The earlier layer whose output is added (an index into the model's layers).
    pub from: usize,
}

/// The burn form: the identity, remembering which layer's output the model adds.
#[derive(Module, Debug)]
pub struct AddModule {
    /// As [`Add::from`].
    pub from: usize,
}

impl Kind for Add {
    type Module = AddModule;

    fn out_shape(&self, input: Shape) -> std::result::Result<Shape, String> {
        Ok(input)
    }
    fn joins(&self) -> Option<usize> {
        Some(self.from)
    }
    fn init(&self, _: Shape, _: &Device) -> AddModule {
        AddModule { from: self.from }
    }
    fn forward(_: &AddModule, x: Activation) -> Activation {
        x
    }
    fn module_joins(module: &AddModule) -> Option<usize> {
        Some(module.from)
    }
}
