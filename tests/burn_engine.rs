//! The burn engine against burn's own autodiff, one backward per example: per-example
//! gradients (hence norms, charges and the clipped sum) of every `dpgd::nn` layer and of whole
//! models — strides, "same" (asymmetric) padding, dilation, groups, a residual add, a layer used
//! twice — within 1e-4 relative; its refusals; and the trainer on both engines.

mod common;

use std::collections::HashMap;

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::nn::PaddingConfig2d;
use burn::tensor::activation::{log_softmax, relu};
use burn::tensor::{Device, Gradients, Int, Tensor, TensorData};
use common::devices;
use dpgd::nn::{
    Classifier, Conv2d, Conv2dConfig, Embedding, EmbeddingConfig, GroupNorm, GroupNormConfig, LayerNorm,
    LayerNormConfig, Linear, LinearConfig,
};
use dpgd::per_example::{Backprop, BurnEngine, PerExample};
use proptest::prelude::*;
use rand::{RngExt, SeedableRng};

/// The default device (flex).
fn device() -> Device {
    Device::flex()
}

/// Per-example gradients through burn's autodiff, one example and one backward at a time, in
/// the engine's θ layout: the reference.
fn autodiff_rows<M: Classifier>(
    engine: &BurnEngine<M>,
    theta: &[f32],
    shape: [usize; 3],
    x: &[f32],
    y: &[u8],
) -> Vec<f32> {
    struct Grads<'a>(&'a Gradients, HashMap<ParamId, Vec<f32>>);
    impl ModuleVisitor for Grads<'_> {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            if let Some(g) = p.val().grad(self.0) {
                self.1.insert(p.id, g.into_data().convert::<f32>().try_into_vec::<f32>().unwrap());
            }
        }
    }
    let model = engine.model_with(theta).unwrap();
    let [c, h, w] = shape;
    let mut rows = Vec::new();
    for (i, &label) in y.iter().enumerate() {
        let xi = Tensor::<4>::from_data(
            TensorData::new(x[i * c * h * w..(i + 1) * c * h * w].to_vec(), [1, c, h, w]),
            engine.device(),
        );
        let yi = Tensor::<2, Int>::from_data(TensorData::new(vec![i64::from(label)], [1, 1]), engine.device());
        let loss = -log_softmax(model.forward(xi), 1).gather(1, yi).sum();
        let g = loss.backward();
        let mut grads = Grads(&g, HashMap::new());
        model.visit(&mut grads);
        for p in engine.params() {
            let n: usize = p.shape.iter().product();
            rows.extend(grads.1.remove(&p.id).unwrap_or_else(|| vec![0.0; n]));
        }
    }
    rows
}

/// Checks the engine's rows against the reference: every parameter's per-example gradient
/// within 1e-4 of its own norm (so a small layer's error is not hidden by a large one's norm),
/// hence the per-example norms within 1e-4 relative.
fn check<M: Classifier>(model: impl Fn(&Device) -> M, shape: [usize; 3], classes: usize, x: &[f32], y: &[u8]) {
    for d in devices() {
        check_on(model(&d), &d, shape, classes, x, y);
    }
}

fn check_on<M: Classifier>(model: M, d: &Device, shape: [usize; 3], classes: usize, x: &[f32], y: &[u8]) {
    check_engine(&BurnEngine::new(model, d, shape, classes).unwrap(), d, shape, x, y);
}

fn check_engine<M: Classifier>(engine: &BurnEngine<M>, d: &Device, shape: [usize; 3], x: &[f32], y: &[u8]) {
    let theta = engine.current_params().unwrap();
    let p = engine.num_params();
    let mut scratch = engine.scratch(y.len());
    let (mut rows, mut losses) = (vec![0.0f32; y.len() * p], vec![0.0f32; y.len()]);
    engine.gradients(&theta, x, y, &mut scratch, &mut rows, &mut losses);
    let reference = autodiff_rows(engine, &theta, shape, x, y);
    let norm = |r: &[f32]| r.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
    for (i, (got, want)) in rows.chunks(p).zip(reference.chunks(p)).enumerate() {
        let (ng, nw) = (norm(got), norm(want));
        assert!(nw > 0.0, "example {i} has a zero reference gradient: the test would not test");
        assert!((ng - nw).abs() <= 1e-4 * nw, "example {i}: norm {ng} vs autodiff {nw}");
        for param in engine.params() {
            let at = param.offset..param.offset + param.shape.iter().product::<usize>();
            let (g, w) = (&got[at.clone()], &want[at]);
            let worst = g.iter().zip(w).map(|(a, b)| f64::from((a - b).abs())).fold(0.0, f64::max);
            assert!(
                worst <= 1e-4 * norm(w) + 1e-7,
                "{d:?}: example {i}, {}: off by {worst} (norm {})",
                param.path,
                norm(w)
            );
        }
        assert!(losses[i].is_finite() && losses[i] > 0.0);
    }
}

fn inputs(n: usize, len: usize, seed: u64) -> (Vec<f32>, Vec<u8>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let x = (0..n * len).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let y = (0..n).map(|i| (i % 3) as u8).collect();
    (x, y)
}

/// Conv (stride 2, "same" padding, asymmetric on an odd map) → GroupNorm → ReLU → a grouped,
/// dilated conv applied twice with a residual add → Linear.
#[derive(Module, Debug)]
struct ConvNet {
    conv1: Conv2d,
    norm: GroupNorm,
    conv2: Conv2d,
    fc: Linear,
}

impl Classifier for ConvNet {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let h = relu(self.norm.forward(self.conv1.forward(x)));
        let h = self.conv2.forward(h.clone()) + h;
        let h = relu(self.conv2.forward(h));
        self.fc.forward(h.flatten(1, 3))
    }
}

fn conv_net(d: &Device, k: usize, stride: usize, dilation: usize, groups: usize) -> ConvNet {
    let pad = dilation * (k - 1) / 2;
    ConvNet {
        conv1: Conv2dConfig::new([2, 4], [k, k])
            .with_stride([stride, stride])
            .with_padding(PaddingConfig2d::Same)
            .init(d),
        norm: GroupNormConfig::new(2, 4).init(d),
        conv2: Conv2dConfig::new([4, 4], [k, k])
            .with_dilation([dilation, dilation])
            .with_groups(groups)
            .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
            .init(d),
        fc: LinearConfig::new(4 * 7_usize.div_ceil(stride).pow(2), 3).init(d),
    }
}

#[test]
fn conv_groupnorm_residual_and_a_layer_used_twice_match_autodiff() {
    let (x, y) = inputs(5, 2 * 7 * 7, 1);
    check(|d| conv_net(d, 3, 2, 2, 2), [2, 7, 7], 3, &x, &y);
}

/// GroupNorm on the input itself, which needs no gradient: its backward does not run, so its
/// rule forms the rows itself (after a convolution, as above, the backward leaves them).
#[derive(Module, Debug)]
struct NormFirst {
    norm: GroupNorm,
    head: Linear,
}

impl Classifier for NormFirst {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        self.head.forward(relu(self.norm.forward(x)).flatten(1, 3))
    }
}

#[test]
fn groupnorm_on_the_input_matches_autodiff() {
    let net = |d: &Device| NormFirst {
        norm: GroupNormConfig::new(2, 4).init(d),
        head: LinearConfig::new(4 * 5 * 5, 3).init(d),
    };
    let (x, y) = inputs(5, 4 * 5 * 5, 4);
    check(net, [4, 5, 5], 3, &x, &y);
}

/// LayerNorm over the rows of an image taken as tokens, a Linear applied to every token (the
/// 3-D case, a sum over tokens), then a Linear on the flattened result.
#[derive(Module, Debug)]
struct TokenNet {
    norm: LayerNorm,
    token: Linear,
    head: Linear,
}

impl Classifier for TokenNet {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let [b, _, h, w] = x.dims();
        let t = self.token.forward(self.norm.forward(x.reshape([b, h, w])));
        self.head.forward(relu(t).flatten(1, 2))
    }
}

#[test]
fn layer_norm_and_a_linear_over_tokens_match_autodiff() {
    let net = |d: &Device| TokenNet {
        norm: LayerNormConfig::new(6).init(d),
        token: LinearConfig::new(6, 4).init(d),
        head: LinearConfig::new(5 * 4, 3).with_bias(false).init(d),
    };
    let (x, y) = inputs(4, 5 * 6, 2);
    check(net, [1, 5, 6], 3, &x, &y);
}

/// An embedding of pixel values taken as token ids (one id repeated within an example adds up).
#[derive(Module, Debug)]
struct EmbedNet {
    embed: Embedding,
    head: Linear,
}

impl Classifier for EmbedNet {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let [b, _, h, w] = x.dims();
        let ids: Tensor<2, Int> = x.reshape([b, h * w]).int();
        self.head.forward(self.embed.forward(ids).flatten(1, 2))
    }
}

#[test]
fn embedding_with_repeated_tokens_matches_autodiff() {
    let net =
        |d: &Device| EmbedNet { embed: EmbeddingConfig::new(5, 3).init(d), head: LinearConfig::new(6 * 3, 3).init(d) };
    let x: Vec<f32> = (0..4 * 6).map(|i| ((i * 7 + i / 6) % 5) as f32).collect();
    check(net, [1, 2, 3], 3, &x, &[0, 1, 2, 1]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    /// Random odd kernels, strides, dilations and groups.
    #[test]
    fn conv_shapes_match_autodiff(k in prop::sample::select(vec![1usize, 3, 5]), stride in 1usize..=3,
                                  dilation in 1usize..=2, groups in prop::sample::select(vec![1usize, 2, 4]), seed in 0u64..1000) {
        let (x, y) = inputs(3, 2 * 7 * 7, seed);
        check(|d| conv_net(d, k, stride, dilation, groups), [2, 7, 7], 3, &x, &y);
    }
}

#[derive(Module, Debug)]
struct WithBurnLinear {
    conv: Conv2d,
    fc: burn::nn::Linear,
}

impl Classifier for WithBurnLinear {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        self.fc.forward(self.conv.forward(x).flatten(1, 3))
    }
}

#[derive(Module, Debug)]
struct WithBatchNorm {
    conv: Conv2d,
    bn: burn::nn::BatchNorm,
    fc: Linear,
}

impl Classifier for WithBatchNorm {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        self.fc.forward(self.bn.forward(self.conv.forward(x)).flatten(1, 3))
    }
}

/// A forward that centres its logits on the batch mean: every example's output depends on the
/// others.
#[derive(Module, Debug)]
struct BatchCentred {
    fc: Linear,
}

impl Classifier for BatchCentred {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let z = self.fc.forward(x.flatten(1, 3));
        z.clone() - z.mean_dim(0)
    }
}

#[test]
fn a_forward_that_mixes_the_examples_of_a_batch_is_refused() {
    for d in devices() {
        let net = BatchCentred { fc: LinearConfig::new(36, 3).init(&d) };
        let e = BurnEngine::new(net, &d, [1, 6, 6], 3).unwrap_err().to_string();
        assert!(e.contains("mixes the examples") && e.contains("depending on the other examples"), "{d:?}: {e}");
    }
}

/// The ways of mixing a batch that a check of the logits alone (on two fixed inputs, in
/// validation mode, within 1e-4) could not see; each is refused by the check of the gradient
/// rows, and each was accepted before.
#[derive(Module, Debug)]
struct Sneaky {
    fc1: Linear,
    fc2: Linear,
    how: usize,
}

const SNEAKY: [&str; 5] = [
    "a batch mean behind a stop-gradient (mixes only the backward)",
    "a batch mean only with autodiff on (training)",
    "a batch mean scaled far below the old tolerance",
    "a batch mean of values the old fixed pattern never held",
    "the batch reversed around a dpgd layer and back",
];

impl Classifier for Sneaky {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let flat = x.clone().flatten::<2>(1, 3);
        let h = match self.how {
            4 => self.fc1.forward(flat.flip([0])).flip([0]),
            _ => self.fc1.forward(flat),
        };
        let z = self.fc2.forward(relu(h));
        match self.how {
            0 => {
                let m = z.clone().mean_dim(0);
                z + m.clone() - m.detach()
            }
            1 if x.device().is_autodiff() => z.clone() - z.mean_dim(0),
            2 => z.clone() + z.mean_dim(0) * 1e-6,
            3 => {
                // Pixels above 0.9975 (the old pattern's largest value was 262/263 ≈ 0.9962).
                let hot = x.greater_elem(0.9975).float().flatten::<2>(1, 3).sum_dim(1);
                z + hot.mean_dim(0)
            }
            5 if x.dims()[0] > 4 => z.clone() - z.mean_dim(0),
            _ => z,
        }
    }
}

/// A model that mixes only in batches above 4 passes the engine's own check (at 4) but not the
/// trainer's, which checks at the run's micro-batch size before reading any training example.
#[test]
fn the_trainer_checks_the_rows_at_the_runs_own_micro_batch_size() {
    use dpgd::train::{Run, TrainConfig};
    let d = device();
    let net = Sneaky { fc1: LinearConfig::new(784, 8).init(&d), fc2: LinearConfig::new(8, 10).init(&d), how: 5 };
    let engine = BurnEngine::new(net, &d, [1, 28, 28], 10).unwrap();
    let privacy = "method = \"filtered\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 3";
    let text = common::fixture_config("batch8", "logistic", (100, 50), privacy, "lr = 1.0\nchunk = 8");
    let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
    let data = cfg.config().data.load().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let e = Run::new(&cfg, &data, dir.path()).train_model(engine).map(|_| ()).unwrap_err();
    let e = e.to_string();
    assert!(e.contains("mixes the examples") && e.contains("micro-batch of 8"), "{e}");
}

#[test]
fn mixing_only_in_the_backward_in_training_below_tolerance_off_pattern_or_by_reordering_is_refused() {
    for d in devices() {
        for (how, what) in SNEAKY.iter().enumerate() {
            // Rows must be bit-identical on every device (a GPU was once allowed 2⁻¹⁶ of a row's
            // largest value, which let the mean scaled by 10⁻⁶ through, and the mean of hot
            // pixels, which adds one constant to all of an example's logits: the loss ignores it
            // but for rounding).
            let net = Sneaky { fc1: LinearConfig::new(784, 8).init(&d), fc2: LinearConfig::new(8, 3).init(&d), how };
            let e = match BurnEngine::new(net, &d, [1, 28, 28], 3) {
                Ok(_) => panic!("{d:?}: {what}: accepted"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains("mixes the examples"), "{d:?}: {what}: {e}");
        }
        // The same model without any of it trains.
        let net = Sneaky { fc1: LinearConfig::new(784, 8).init(&d), fc2: LinearConfig::new(8, 3).init(&d), how: 9 };
        assert!(BurnEngine::new(net, &d, [1, 28, 28], 3).is_ok(), "{d:?}");
    }
}

/// A class embedding looked up once with a constant index and broadcast over the batch: its
/// gradient is the whole batch's, not any one example's.
#[derive(Module, Debug)]
struct BroadcastEmbedding {
    cls: Embedding,
    fc: Linear,
}

impl Classifier for BroadcastEmbedding {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let ids = Tensor::<2, Int>::zeros([1, 1], &x.device());
        let cls: Tensor<2> = self.cls.forward(ids).reshape([1, 3]);
        self.fc.forward(x.flatten(1, 3)) + cls
    }
}

#[test]
fn a_layer_on_a_tensor_shared_by_the_batch_and_a_frozen_batch_norm_are_refused() {
    let d = device();
    let net = BroadcastEmbedding { cls: EmbeddingConfig::new(2, 3).init(&d), fc: LinearConfig::new(36, 3).init(&d) };
    let e = BurnEngine::new(net, &d, [1, 6, 6], 3).unwrap_err().to_string();
    assert!(e.contains("cls.weight") && e.contains("first axis is not the batch"), "{e}");
    let net = WithBatchNorm {
        conv: Conv2dConfig::new([1, 2], [3, 3]).init(&d),
        bn: burn::nn::BatchNormConfig::new(2).init(&d).no_grad(),
        fc: LinearConfig::new(32, 3).init(&d),
    };
    let e = BurnEngine::new(net, &d, [1, 6, 6], 3).unwrap_err().to_string();
    assert!(e.contains("BatchNorm") && e.contains("frozen or not"), "{e}");
}

#[test]
fn parameters_outside_dpgd_layers_are_refused_by_path_with_the_fix() {
    let d = device();
    let conv = || Conv2dConfig::new([1, 2], [3, 3]).init(&d);
    let net = WithBurnLinear { conv: conv(), fc: burn::nn::LinearConfig::new(2 * 4 * 4, 3).init(&d) };
    let e = BurnEngine::new(net, &d, [1, 6, 6], 3).unwrap_err().to_string();
    assert!(e.contains("fc.weight") && e.contains("dpgd::nn::Linear"), "{e}");
    let net = WithBatchNorm {
        conv: conv(),
        bn: burn::nn::BatchNormConfig::new(2).init(&d),
        fc: LinearConfig::new(32, 3).init(&d),
    };
    let e = BurnEngine::new(net, &d, [1, 6, 6], 3).unwrap_err().to_string();
    assert!(e.contains("bn.gamma") && e.contains("GroupNorm"), "{e}");
    let net = BatchCentred { fc: LinearConfig::new(36, 3).init(&d) };
    let e = BurnEngine::new(net, &d, [1, 6, 6], 4).unwrap_err().to_string();
    assert!(e.contains("[2, 4]"), "the wrong class count is named: {e}");
    // A model built for 6 × 6 images, given 8 × 8 ones: burn's shape assertion becomes an error.
    let net = WithBurnLinear { conv: conv(), fc: burn::nn::LinearConfig::new(2 * 4 * 4, 3).init(&d) };
    let e = BurnEngine::new(net, &d, [1, 8, 8], 3).unwrap_err().to_string();
    assert!(e.contains("[1, 8, 8]") && e.contains("build the model for that shape"), "{e}");
}

/// The opt-in fallback (one backward per example) trains what the batched engine refuses —
/// burn's own `Linear` — and gives the same per-example gradients, losses and parameter order
/// as the batched engine on the same model built from `dpgd::nn::Linear`; on a model both
/// accept it matches the autodiff reference like the batched engine.
#[test]
fn the_fallback_trains_burns_own_layers_with_the_batched_engines_gradients() {
    #[derive(Module, Debug)]
    struct WithDpgdLinear {
        conv: Conv2d,
        fc: Linear,
    }
    impl Classifier for WithDpgdLinear {
        fn forward(&self, x: Tensor<4>) -> Tensor<2> {
            self.fc.forward(self.conv.forward(x).flatten(1, 3))
        }
    }
    let (x, y) = inputs(5, 36, 11);
    for d in devices() {
        let conv = Conv2dConfig::new([1, 2], [3, 3]).init(&d);
        let fc = burn::nn::LinearConfig::new(2 * 4 * 4, 3).init(&d);
        let twin = WithDpgdLinear { conv: conv.clone(), fc: fc.clone().into() };
        let fallback = BurnEngine::with_fallback(WithBurnLinear { conv, fc }, &d, [1, 6, 6], 3).unwrap();
        let batched = BurnEngine::new(twin, &d, [1, 6, 6], 3).unwrap();
        assert_eq!((fallback.backprop(), batched.backprop()), (Backprop::OneBackwardPerExample, Backprop::Batched));
        assert_eq!(fallback.params(), batched.params());
        let theta = batched.current_params().unwrap();
        assert_eq!(fallback.current_params().unwrap(), theta);
        let p = theta.len();
        let run = |e: &dyn Fn(&mut [f32], &mut [f32])| {
            let (mut rows, mut losses) = (vec![0.0f32; y.len() * p], vec![0.0f32; y.len()]);
            e(&mut rows, &mut losses);
            (rows, losses)
        };
        let (fb_rows, fb_losses) = run(&|r, l| fallback.gradients(&theta, &x, &y, &mut fallback.scratch(5), r, l));
        let (b_rows, b_losses) = run(&|r, l| batched.gradients(&theta, &x, &y, &mut batched.scratch(5), r, l));
        let scale = b_rows.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.0);
        for (i, (a, b)) in fb_rows.iter().zip(&b_rows).enumerate() {
            assert!((a - b).abs() <= 1e-4 * scale, "{d:?}: value {i}: fallback {a} vs batched {b}");
        }
        for (a, b) in fb_losses.iter().zip(&b_losses) {
            assert!((a - b).abs() <= 1e-4 * b.abs(), "{d:?}: loss {a} vs {b}");
        }
        let fallback = BurnEngine::with_fallback(conv_net(&d, 3, 2, 1, 1), &d, [2, 7, 7], 3).unwrap();
        let (x, y) = inputs(4, 2 * 7 * 7, 12);
        check_engine(&fallback, &d, [2, 7, 7], &x, &y);
    }
}

/// Both engines on the config's Opacus CNN (the burn engine running it as burn modules of
/// `dpgd::nn` layers) from the same θ: the same clipped sum and the same ledger charges in a
/// private step, and the same model after non-private training (whose noise-free updates make
/// the models comparable: a private run draws its noise in each engine's own θ layout).
#[test]
fn both_engines_give_the_same_clipped_sum_charges_and_model() {
    use dpgd::accounting::filter::IndividualFilter;
    use dpgd::clip::{NonFinitePolicy, SumGrid};
    use dpgd::train::step::{Aggregation, ClippedSum, GradientPlan};
    use dpgd::train::{Run, RunOptions, Silent, TrainConfig, TrainModel, Trainer};
    let text = common::fixture_config(
        "engines",
        "opacus-cnn",
        (150, 50),
        "method = \"non-private\"\ndelta = 1e-5\nclip = 1.0\nepsilon = 1.0\nworst_case_steps = 4",
        "lr = 0.5\nmax_steps = 4\nchunk = 16",
    );
    let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
    let data = cfg.config().data.load().unwrap();
    let net = dpgd::per_example::Network::new(&cfg.model_for(data.shape(), data.classes()).unwrap()).unwrap();
    let theta0 = net.initial_params(cfg.config().model.init_seed).unwrap();
    let d = device();
    let burn_engine = || {
        BurnEngine::new(dpgd::model::BurnModel::from_params(&net, &theta0, &d).unwrap(), &d, [1, 28, 28], 10).unwrap()
    };
    // In the fast engine's layout.
    let to_fast =
        |engine: &BurnEngine<dpgd::model::BurnModel>, v: &[f32]| engine.model_with(v).unwrap().to_params(&net).unwrap();
    let close = |a: &[f32], b: &[f32], what: &str| {
        let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let worst = a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(scale > 0.0 && worst <= 1e-4 * scale, "{what}: the engines differ by {worst} (scale {scale})");
    };
    // One private step's clipped sum and charges (clip 0.5: most examples are clipped).
    let train = data.train.head(150);
    let grid = SumGrid::fixed_point(0.5, train.len()).unwrap();
    let clip = Aggregation::Clip { clip: 0.5, on_nonfinite: NonFinitePolicy::Error, grid };
    let norm = data.default_normalize();
    let sum = |plan_sum: (ClippedSum, _)| plan_sum.0.to_f32();
    let (mut fast_ledger, mut burn_ledger) =
        (IndividualFilter::new(150, 1.0).unwrap(), IndividualFilter::new(150, 1.0).unwrap());
    let fast_sum = sum(GradientPlan::new(net.clone(), train, norm.clone(), clip, 16)
        .gradient_sum(&theta0, &mut fast_ledger, 1)
        .unwrap());
    let engine = burn_engine();
    let burn_theta = engine.current_params().unwrap();
    let plan = GradientPlan::new(engine, train, norm, clip, 16);
    let burn_sum = sum(plan.gradient_sum(&burn_theta, &mut burn_ledger, 1).unwrap());
    close(&fast_sum, &to_fast(plan.net(), &burn_sum), "the clipped sums");
    for (i, (x, y)) in fast_ledger.spent_all().iter().zip(burn_ledger.spent_all()).enumerate() {
        assert!(*x > 0.0 && (x - y).abs() <= 1e-4 * x, "example {i} was charged {x} and {y}");
    }
    // The clip on the device (a GPU's path, here on the CPU): the same sum within the device
    // grid's rounding, each charge at least the host's and within the bound's margin.
    let mut device_ledger = IndividualFilter::new(150, 1.0).unwrap();
    let device_plan = GradientPlan::new(burn_engine().with_rows_on_device(), train, data.default_normalize(), clip, 16);
    assert!(device_plan.net().rows_on_device());
    let device_sum = sum(device_plan.gradient_sum(&burn_theta, &mut device_ledger, 1).unwrap());
    close(&burn_sum, &device_sum, "the host's and the device's clipped sums");
    for (i, (x, y)) in burn_ledger.spent_all().iter().zip(device_ledger.spent_all()).enumerate() {
        assert!(y >= x && *y <= x * (1.0 + 1e-4), "example {i} was charged {x} on the host, {y} on the device");
    }
    // Training (non-private, so no noise): the same model.
    let (fast_dir, burn_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut silent = Silent;
    let mut trainer =
        Trainer::resume_or_init(&cfg, &data, fast_dir.path(), &RunOptions::default(), &mut silent).unwrap();
    while !trainer.is_done() {
        trainer.step().unwrap();
    }
    let fast = trainer.finish_returning().unwrap();
    let burned = Run::new(&cfg, &data, burn_dir.path()).train_model(burn_engine()).unwrap();
    assert!(fast.params != theta0, "training moved the model");
    close(&fast.params, &to_fast(&burned.engine, &burned.params), "the trained models");
    let (fa, fb) = (fast.summary.result.unwrap(), burned.summary.result.unwrap());
    assert_eq!((fa.steps_run, fa.test_accuracy), (fb.steps_run, fb.test_accuracy));
}

/// A private run whose clipped sums are computed on the device (the GPU's path, on the CPU
/// backends) trains under the same guarantee as the host's, every example charged at least as
/// much, and ends where the host's ends up to the device grid's rounding.
#[test]
fn a_private_run_with_the_clip_on_the_device_keeps_the_guarantee() {
    use dpgd::train::{Run, RunOptions, TrainConfig, TrainModel};
    let privacy = "method = \"filtered\"\nepsilon = 2.0\ndelta = 1e-5\nclip = 0.5\nworst_case_steps = 3";
    let text = common::fixture_config("device-clip", "logistic", (200, 50), privacy, "lr = 1.0\nchunk = 16\nseed = 7");
    let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
    let data = cfg.config().data.load().unwrap();
    for d in devices() {
        let net = dpgd::per_example::Network::new(&cfg.model_for(data.shape(), data.classes()).unwrap()).unwrap();
        let theta0 = net.initial_params(cfg.config().model.init_seed).unwrap();
        let engine = || {
            let model = dpgd::model::BurnModel::from_params(&net, &theta0, &d).unwrap();
            BurnEngine::new(model, &d, [1, 28, 28], 10).unwrap()
        };
        let (host_dir, device_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let opts = RunOptions::default();
        let host = Run::new(&cfg, &data, host_dir.path())
            .options(opts.clone())
            .train_model(engine().with_rows_on_host())
            .unwrap();
        let device = Run::new(&cfg, &data, device_dir.path())
            .options(opts.clone())
            .train_model(engine().with_rows_on_device())
            .unwrap();
        let (hp, dp) = (host.summary.privacy.unwrap(), device.summary.privacy.unwrap());
        assert_eq!(hp.summary, dp.summary, "{d:?}: the guarantee differs");
        let (hr, dr) = (host.summary.result.unwrap(), device.summary.result.unwrap());
        assert_eq!(hr.steps_run, dr.steps_run, "{d:?}");
        let scale = host.params.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let worst = host.params.iter().zip(&device.params).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(host.params != theta0 && worst <= 1e-3 * scale, "{d:?}: the models differ by {worst} (scale {scale})");
    }
}

/// A config's model with every layer kind of `model.layers` (built from its spec by each
/// kind's own file) matches autodiff on the burn engine; a new kind fails here until it is
/// added to the model.
#[test]
fn a_config_model_of_every_layer_kind_matches_autodiff() {
    use LayerSpec as L;
    use dpgd::arch::{LayerSpec, ModelSpec, kinds::*};
    let spec = ModelSpec {
        input: [2, 9, 9],
        classes: 3,
        layers: vec![
            L::Conv2d(Conv2d { out_channels: 4, kernel: 3, stride: 1, padding: 1, bias: true }),
            L::GroupNorm(GroupNorm { groups: 2 }),
            L::Relu(Relu),
            L::Add(Add { from: 0 }),
            L::MaxPool2d(MaxPool2d { kernel: 2, stride: 1 }),
            L::AvgPool2d(AvgPool2d { kernel: 2, stride: 2 }),
            L::Tanh(Tanh),
            L::Flatten(Flatten),
            L::Linear(Linear { out_features: 6, bias: true }),
            L::LayerNorm(LayerNorm { bias: true }),
            L::Linear(Linear { out_features: 3, bias: false }),
        ],
    };
    let used: Vec<&str> = spec.layers.iter().map(LayerSpec::name).collect();
    for kind in LayerSpec::KINDS {
        assert!(used.contains(kind), "add a `{kind}` layer to this test's model");
    }
    let (x, y) = inputs(5, 2 * 9 * 9, 11);
    check(|d| dpgd::model::BurnModel::from_spec(&spec, d).unwrap(), spec.input, spec.classes, &x, &y);
}

/// `train.engine = "burn"` trains the config's own model on the burn engine, from the model
/// the fast engine starts from: a filtered private run charges every example what the fast
/// engine charges it in the first step (both at θ₀; after it each engine draws its noise in
/// its own layout), and a non-private run ends at the same model, read back from its
/// `model.safetensors` (layout `burn`, against the fast engine's `pytorch`).
#[test]
fn train_engine_burn_trains_the_configs_model_as_the_fast_engine_does() {
    use dpgd::data::Examples;
    use dpgd::model::export;
    use dpgd::train::RunFolder;
    let config = |method: &str, engine: &str| {
        common::fixture_config(
            "engine",
            "opacus-cnn",
            (150, 50),
            &format!("method = \"{method}\"\ndelta = 1e-5\nclip = 0.5\nepsilon = 1.0\nworst_case_steps = 4"),
            &format!("lr = 0.5\nmax_steps = 4\nchunk = 16\nseed = 3\nengine = \"{engine}\""),
        )
    };
    // The charges of the first private step.
    let (fast_dir, burn_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    common::train(&config("filtered", "fast"), fast_dir.path(), Some(1));
    common::train(&config("filtered", "burn"), burn_dir.path(), Some(1));
    let spent = |dir: &tempfile::TempDir, engine: &str| {
        let cfg = dpgd::train::TrainConfig::from_toml(&config("filtered", engine), &[]).unwrap().validate().unwrap();
        let expect = dpgd::train::state::Expect { params: 26_010, examples: 150, max_steps: cfg.max_steps() };
        dpgd::train::state::read(&RunFolder::new(dir.path()).state(), expect).unwrap().unwrap().spent
    };
    let (fast, burned) = (spent(&fast_dir, "fast"), spent(&burn_dir, "burn"));
    for (i, (x, y)) in fast.iter().zip(&burned).enumerate() {
        assert!(*x > 0.0 && (x - y).abs() <= 1e-4 * x, "example {i} was charged {x} and {y}");
    }
    // Non-private: the same model at the end, whatever the layout of its file.
    let (fast_dir, burn_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = common::train(&config("non-private", "fast"), fast_dir.path(), None);
    let b = common::train(&config("non-private", "burn"), burn_dir.path(), None);
    let (a, b) = (common::result(&a), common::result(&b));
    assert_eq!((a.steps_run, a.test_accuracy), (b.steps_run, b.test_accuracy));
    let load = |dir: &tempfile::TempDir| export::load(&RunFolder::new(dir.path()).model_safetensors()).unwrap();
    let (fast, burned) = (load(&fast_dir), load(&burn_dir));
    assert!(matches!(fast.net, export::ExportedNet::Fast(_)) && matches!(burned.net, export::ExportedNet::Burn(_)));
    let cfg = dpgd::train::TrainConfig::from_toml(&config("non-private", "fast"), &[]).unwrap().validate().unwrap();
    let data = cfg.config().data.load().unwrap();
    let test: Examples<'_> = data.test.head(50);
    let (la, lb) = (fast.logits(test), burned.logits(test));
    let scale = la.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let worst = la.iter().zip(&lb).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(scale > 0.0 && worst <= 1e-4 * scale, "the trained models' logits differ by {worst} (scale {scale})");
}

/// The engine is part of a run's identity: a run started on the burn engine (here through
/// `Run::train_model` on a config whose `auto` engine is the fast one) is not resumed on the fast
/// engine, whose θ has the same length but another layout.
#[test]
fn a_run_is_not_resumed_on_another_engine() {
    use dpgd::train::{Run, RunOptions, Silent, TrainConfig, run};
    let text = common::fixture_config(
        "engine-resume",
        "logistic",
        (100, 20),
        "method = \"plain\"\nepsilon = 2.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 4",
        "lr = 1.0\nseed = 5",
    )
    .replace("engine = \"burn\"\n", "");
    let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
    let data = cfg.config().data.load().unwrap();
    let spec = cfg.model_for(data.shape(), data.classes()).unwrap();
    assert_eq!(cfg.engine_for(&spec), dpgd::train::Engine::Fast);
    let dir = tempfile::tempdir().unwrap();
    let model = dpgd::model::ConfigModel::new(&spec, &device(), 0).unwrap();
    let opts = RunOptions { stop_after: Some(1), ..Default::default() };
    Run::new(&cfg, &data, dir.path()).options(opts.clone()).train_model(model).unwrap();
    let e = run(&cfg, &data, dir.path(), &RunOptions::default(), &mut Silent).unwrap_err().to_string();
    assert!(e.contains("the burn engine") && e.contains("laid out differently"), "{e}");
}

/// Fine-tuning the README's way: the model a run returned (`model_with`), and the same weights
/// loaded from the run's `model.safetensors` into a fresh struct (`load_into`), each go back
/// into `BurnEngine::new` — no panic inside burn — and train on from the returned weights.
#[test]
fn a_returned_or_loaded_model_goes_back_into_an_engine_and_fine_tunes() {
    use dpgd::train::{Run, RunFolder, TrainConfig};
    let d = device();
    let net = || Sneaky { fc1: LinearConfig::new(784, 8).init(&d), fc2: LinearConfig::new(8, 10).init(&d), how: 9 };
    let privacy = "method = \"filtered\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 2";
    let text = common::fixture_config("tune", "logistic", (100, 50), privacy, "lr = 1.0\nchunk = 8");
    let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
    let data = cfg.config().data.load().unwrap();
    let first = tempfile::tempdir().unwrap();
    let engine = BurnEngine::new(net(), &d, [1, 28, 28], 10).unwrap();
    let trained = Run::new(&cfg, &data, first.path()).train_model(engine).unwrap();
    // The returned model, straight back into an engine.
    let returned = trained.engine.model_with(&trained.params).unwrap();
    let again = BurnEngine::new(returned, &d, [1, 28, 28], 10).unwrap();
    assert_eq!(again.current_params().unwrap(), trained.params);
    // The run's file, into a fresh struct.
    let file = RunFolder::new(first.path()).model_safetensors();
    let loaded = dpgd::model::export::load_into(net(), &file).unwrap();
    assert!(loaded.kept.is_empty());
    let engine = BurnEngine::new(loaded.model, &d, [1, 28, 28], 10).unwrap();
    assert_eq!(engine.current_params().unwrap(), trained.params);
    let second = tempfile::tempdir().unwrap();
    let tuned = Run::new(&cfg, &data, second.path()).train_model(engine).unwrap();
    assert!(tuned.summary.finished);
    let privacy = tuned.summary.privacy.unwrap();
    assert!(privacy.accounting.unwrap().rests_on["initial_weights"].contains("assumed public"));
}
