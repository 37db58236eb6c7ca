//! A [`ModelSpec`] compiled for the per-example engine: every layer checked against the shape
//! it receives (with overflow-checked sizes) and given its offset into one flat parameter
//! vector θ.

use rand::RngExt;

use super::layers::{Alloc, Init, Layer};
use crate::arch::ModelSpec;
pub use crate::arch::{MAX_VALUES, ShapeError};
pub(crate) use crate::arch::{Shape, walk};

/// A compiled sequential model.
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    spec: ModelSpec,
    layers: Vec<Layer>,
    inputs: Vec<Shape>,
    /// For each layer, the earlier layer whose output the network adds to its output (a
    /// residual connection, [`crate::arch::Kind::joins`]).
    joins: Vec<Option<usize>>,
    num_params: usize,
}

impl Network {
    /// Compiles `spec`, checking that every layer fits the shape it receives and that every
    /// size is representable (checked arithmetic: a width of 2⁶² is an error, not a wrap).
    ///
    /// # Errors
    /// A [`ShapeError`] naming the layer.
    pub fn new(spec: &ModelSpec) -> Result<Self, ShapeError> {
        let (mut layers, mut inputs) = (Vec::with_capacity(spec.layers.len()), Vec::with_capacity(spec.layers.len()));
        let mut alloc = Alloc::default();
        walk(spec, |layer, input, i| {
            let output = layer.out_shape(input, i)?;
            layers.push(Layer::compile(*layer, input, output, i, &mut alloc)?);
            inputs.push(input);
            Ok(output)
        })?;
        if alloc.used() == 0 {
            return Err(ShapeError { layer: None, reason: "the model has no trainable parameters".into() });
        }
        // The per-example squared norm the clip charges is added up over the layers' parameter
        // ranges (`Network::backward_with_norms`): they must tile θ exactly, each value once.
        let mut ranges: Vec<(usize, usize)> = layers
            .iter()
            .filter_map(|l| l.params())
            .flat_map(|q| {
                [(q.weight, q.weight_len), (q.bias.unwrap_or(0), if q.bias.is_some() { q.bias_len } else { 0 })]
            })
            .filter(|&(_, len)| len > 0)
            .collect();
        ranges.sort_unstable();
        let tiled =
            ranges.iter().try_fold(0, |at, &(start, len)| (start == at).then_some(at + len)) == Some(alloc.used());
        if !tiled {
            return Err(ShapeError { layer: None, reason: "internal: the layers' parameters do not tile θ".into() });
        }
        let joins = spec.layers.iter().map(crate::arch::LayerSpec::joins).collect();
        Ok(Self { spec: spec.clone(), layers, inputs, joins, num_params: alloc.used() })
    }

    /// The architecture this network was compiled from.
    #[must_use]
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }
    /// The compiled layers.
    #[must_use]
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }
    /// For each layer, the earlier layer whose output is added to its output, if any (the
    /// walk checked that it is earlier and of the same shape).
    pub(crate) fn joins(&self) -> &[Option<usize>] {
        &self.joins
    }
    /// Whether layer `l`'s output is added to a later layer's.
    pub(crate) fn is_joined(&self, l: usize) -> bool {
        self.joins.contains(&Some(l))
    }
    /// The shape each layer receives, per example.
    #[must_use]
    pub fn inputs(&self) -> &[Shape] {
        &self.inputs
    }
    /// The number of trainable parameters P (the length of θ and of a per-example gradient).
    #[must_use]
    pub fn num_params(&self) -> usize {
        self.num_params
    }
    /// Values per input example (`c·h·w`).
    #[must_use]
    pub fn input_len(&self) -> usize {
        self.spec.input.iter().product()
    }
    /// Number of classes.
    #[must_use]
    pub fn classes(&self) -> usize {
        self.spec.classes
    }

    /// PyTorch's default initialisation (U(−1/√fan_in, 1/√fan_in) for weights and biases,
    /// γ = 1 and β = 0 for a normalisation), from a seeded generator.
    #[must_use]
    pub fn init_params(&self, rng: &mut impl rand::Rng) -> Vec<f32> {
        let mut theta = vec![0.0f32; self.num_params];
        for p in self.layers.iter().filter_map(Layer::params) {
            let ranges = [Some((p.weight, p.weight_len)), p.bias.map(|b| (b, p.bias_len))];
            match p.init {
                Init::Uniform { fan_in } => {
                    let bound = 1.0 / (fan_in as f32).sqrt();
                    for (start, len) in ranges.into_iter().flatten() {
                        for t in &mut theta[start..start + len] {
                            *t = rng.random_range(-bound..bound);
                        }
                    }
                }
                Init::ScaleOneShiftZero => theta[p.weight..p.weight + p.weight_len].fill(1.0),
            }
        }
        theta
    }

    /// Floating-point operations of the products of one example's forward pass, per-example
    /// gradient and input gradients (a multiply-add counts two; element-wise work is not
    /// counted): the work a full private step does per example, for a %-of-peak figure.
    /// 2.1 MFLOP for the Opacus CNN (a unit test).
    #[must_use]
    pub fn flops_per_example(&self) -> u64 {
        let first = self.first_with_params();
        self.layers.iter().enumerate().map(|(l, layer)| layer.flops(l > first)).sum()
    }

    /// The index of the first layer with parameters (0 if none): the backward pass stops there,
    /// as neither it nor a layer before it needs an input gradient.
    pub(crate) fn first_with_params(&self) -> usize {
        self.layers.iter().position(|l| l.params().is_some()).unwrap_or(0)
    }

    /// The per-example squared gradient norm of each layer with parameters, from one
    /// example's gradient row (for layer-wise clipping and diagnostics).
    #[must_use]
    pub fn layer_squared_norms(&self, grad_row: &[f32]) -> Vec<f64> {
        self.layers.iter().filter(|l| l.params().is_some()).map(|l| l.squared_norm(grad_row)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::{LayerSpec, kinds};

    #[test]
    fn opacus_cnn_has_26010_parameters() {
        let net = Network::new(&ModelSpec::opacus_cnn()).unwrap();
        assert_eq!(net.num_params(), 26_010);
        assert_eq!(net.layers()[0].out_len(), 16 * 14 * 14);
        assert_eq!(net.layers()[6].out_len(), 512);
        assert_eq!(Network::new(&ModelSpec::logistic()).unwrap().num_params(), 7850);
    }

    /// The Opacus CNN's work per example, counted by hand: conv1 (T 196, K 64, 16 channels)
    /// forward and weight gradient; conv2 (T 25, K 256, 32 channels) forward, weight and
    /// input gradients; fc1 (512 → 32) and fc2 (32 → 10) forward, weight and input gradients.
    #[test]
    fn opacus_cnn_flops_are_counted_by_hand() {
        let net = Network::new(&ModelSpec::opacus_cnn()).unwrap();
        let conv1 = 2 * 2 * 196 * 64 * 16;
        let conv2 = 3 * 2 * 25 * 256 * 32;
        let fc = |i: u64, o: u64| 5 * i * o;
        assert_eq!(net.flops_per_example(), conv1 + conv2 + fc(512, 32) + fc(32, 10));
        assert!((2.0e6..2.2e6).contains(&(net.flops_per_example() as f64)));
    }

    #[test]
    fn shape_errors_name_the_layer() {
        let mut spec = ModelSpec::logistic();
        spec.layers.remove(0);
        let e = Network::new(&spec).unwrap_err();
        assert_eq!(e.layer, Some(0));
        assert!(e.reason.contains("flatten"), "{e}");
        let mut spec = ModelSpec::logistic();
        spec.classes = 7;
        assert!(Network::new(&spec).unwrap_err().reason.contains("7 logits"));
    }

    /// A residual connection must name an earlier layer of the same shape.
    #[test]
    fn joins_name_an_earlier_layer_of_the_same_shape() {
        let join = |from| {
            ModelSpec::sequential([1, 4, 4], 3)
                .then(kinds::Flatten)
                .then(kinds::Linear { out_features: 3, bias: true })
                .then(kinds::Add { from })
        };
        assert!(Network::new(&join(1)).is_ok());
        let e = Network::new(&join(0)).unwrap_err();
        assert_eq!(e.layer, Some(2));
        assert!(e.reason.contains("add") && e.reason.contains("layer 0's output Flat(16)"), "{e}");
        for from in [2, 7] {
            let e = Network::new(&join(from)).unwrap_err();
            assert!(e.layer == Some(2) && e.reason.contains("earlier layer (0 to 1)"), "{e}");
        }
        let first = ModelSpec::sequential([1, 4, 4], 3).then(kinds::Add { from: 0 });
        assert!(Network::new(&first).unwrap_err().reason.contains("(there is none)"));
    }

    #[test]
    fn huge_widths_are_errors_not_wraps() {
        let mut spec = ModelSpec::logistic();
        spec.layers[1] = LayerSpec::Linear(kinds::Linear { out_features: 1 << 62, bias: true });
        spec.classes = 1 << 62;
        let e = Network::new(&spec).unwrap_err();
        assert_eq!(e.layer, Some(1));
        assert!(e.reason.contains("too large"), "{e}");
        let spec =
            ModelSpec { input: [usize::MAX, 2, 2], classes: 2, layers: vec![LayerSpec::Flatten(kinds::Flatten)] };
        assert!(Network::new(&spec).is_err());
    }
}
