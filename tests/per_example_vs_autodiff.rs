//! The fast per-example engine against burn's autodiff, one backward pass per example:
//! every supported layer and the Opacus CNN agree to ≤ 1e-4 relative error.

use burn::tensor::{Tensor, TensorData};
use dpgd::arch::{LayerSpec, ModelSpec};
use dpgd::model::BurnModel;
use dpgd::per_example::{Network, PerExample};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn check(spec: ModelSpec, n: usize) {
    let net = Network::new(&spec).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut theta = net.init_params(&mut rng);
    // A normalisation starts at γ = 1, β = 0: drawn instead, so that each term of its rule counts.
    use dpgd::per_example::Layer;
    for l in net.layers().iter().filter(|l| matches!(l, Layer::GroupNorm(_) | Layer::LayerNorm(_))) {
        let q = l.params().unwrap();
        theta[q.weight..q.weight + q.weight_len].iter_mut().for_each(|t| *t = rng.random_range(0.5f32..1.5));
        if let Some(beta) = q.bias {
            theta[beta..beta + q.bias_len].iter_mut().for_each(|t| *t = rng.random_range(-0.5f32..0.5));
        }
    }
    let x: Vec<f32> = (0..n * net.input_len()).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let labels: Vec<u8> = (0..n).map(|i| (i % spec.classes) as u8).collect();

    let mut ws = net.workspace(n);
    net.forward(&theta, &mut ws, &x, n);
    let p = net.num_params();
    let mut fast = vec![f32::NAN; n * p];
    let mut losses = vec![0.0; n];
    net.backward(&theta, &mut ws, &labels, &mut fast, &mut losses);

    // burn's autodiff on ndarray where the build has it (a backend of its own), else on flex.
    let kind = dpgd::device::DeviceKind::Ndarray.device().or_else(|_| dpgd::device::DeviceKind::Flex.device());
    let device = kind.unwrap().autodiff();
    let model = BurnModel::from_params(&net, &theta, &device).unwrap();
    let reference = model.per_example_gradients_autodiff(&net, &x, &labels).unwrap();

    for i in 0..n {
        let (f, r) = (&fast[i * p..(i + 1) * p], &reference[i * p..(i + 1) * p]);
        let diff: f64 = f.iter().zip(r).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>().sqrt();
        let norm: f64 = r.iter().map(|b| f64::from(*b).powi(2)).sum::<f64>().sqrt();
        assert!(norm > 0.0, "example {i}: zero reference gradient");
        assert!(diff / norm <= 1e-4, "example {i}: relative error {} (norm {norm})", diff / norm);
    }
    // The logits agree with burn's forward pass too.
    let xs =
        Tensor::<4>::from_data(TensorData::new(x.clone(), [n, spec.input[0], spec.input[1], spec.input[2]]), &device);
    let burn_logits: Vec<f32> = model.forward(xs).into_data().try_into_vec().unwrap();
    let ours = net.forward(&theta, &mut ws, &x, n);
    for (a, b) in ours.iter().zip(&burn_logits) {
        assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "logit {a} vs {b}");
    }
    // Each layer's per-example squared norm adds up to the row's.
    for i in 0..n {
        let row = &fast[i * p..(i + 1) * p];
        let total: f64 = net.layer_squared_norms(row).iter().sum();
        let want = dpgd::clip::squared_norm(row);
        assert!((total - want).abs() <= 1e-9 * want.max(1.0), "layer norms {total} vs row {want}");
    }
    // The norms the engine adds up while it writes the rows (what the clip charges) are the
    // rows' own, and the rows are the same.
    net.forward(&theta, &mut ws, &x, n);
    let (mut again, mut norms) = (vec![f32::NAN; n * p], vec![f64::NAN; n]);
    net.backward_with_norms(&theta, &mut ws, &labels, &mut again, &mut losses, &mut norms);
    assert_eq!(again, fast);
    for (i, &sq) in norms.iter().enumerate() {
        let want = dpgd::clip::squared_norm(&fast[i * p..(i + 1) * p]);
        // two orders of the same sum of p exact squares: within (p − 1)·2⁻⁵² of each other
        assert!((sq - want).abs() <= p as f64 * f64::EPSILON * want, "example {i}: norm {sq} vs row {want}");
    }
    // For the clip, the linear layers' weight blocks are left as their factors: the exact
    // products round to the values written above, and the norms are the rows'.
    let (mut unwritten, mut clip_norms) = (vec![f32::NAN; n * p], vec![f64::NAN; n]);
    let outer = PerExample::gradients_with_norms(
        &net,
        &theta,
        &x,
        &labels,
        &mut ws,
        &mut unwritten,
        &mut losses,
        &mut clip_norms,
    )
    .host()
    .expect("the fast engine writes its rows on the host");
    let linear = spec.layers.iter().filter(|l| matches!(l, LayerSpec::Linear(_))).count();
    assert_eq!(outer.len(), linear, "one outer block per linear layer");
    let rows = dpgd::clip::Rows::with_outer(&unwritten, p, outer);
    for i in 0..n {
        for j in 0..p {
            assert_eq!(rows.value(i, j) as f32, fast[i * p + j], "example {i}, parameter {j}");
        }
        let want = rows.squared_norm(i);
        assert!(
            (clip_norms[i] - want).abs() <= p as f64 * f64::EPSILON * want,
            "example {i}: {} vs {want}",
            clip_norms[i]
        );
    }
    // And the round trip through burn modules preserves θ exactly.
    assert_eq!(model.to_params(&net).unwrap(), theta);
}

fn small(input: [usize; 3], layers: Vec<LayerSpec>) -> ModelSpec {
    ModelSpec { input, classes: 3, layers }
}

#[test]
fn linear_and_relu() {
    use LayerSpec as L;
    use dpgd::arch::kinds::*;
    check(
        small(
            [1, 2, 3],
            vec![
                L::Flatten(Flatten),
                L::Linear(Linear { out_features: 5, bias: true }),
                L::Relu(Relu),
                L::Linear(Linear { out_features: 3, bias: false }),
            ],
        ),
        4,
    );
}

#[test]
fn tanh() {
    use LayerSpec as L;
    use dpgd::arch::kinds::*;
    check(
        small(
            [2, 2, 2],
            vec![
                L::Flatten(Flatten),
                L::Linear(Linear { out_features: 4, bias: true }),
                L::Tanh(Tanh),
                L::Linear(Linear { out_features: 3, bias: true }),
            ],
        ),
        3,
    );
}

#[test]
fn conv_with_padding_stride_and_channels() {
    use LayerSpec as L;
    use dpgd::arch::kinds::*;
    check(
        small(
            [3, 9, 8],
            vec![
                L::Conv2d(Conv2d { out_channels: 4, kernel: 3, stride: 2, padding: 1, bias: true }),
                L::Relu(Relu),
                L::Conv2d(Conv2d { out_channels: 2, kernel: 2, stride: 1, padding: 0, bias: false }),
                L::Flatten(Flatten),
                L::Linear(Linear { out_features: 3, bias: true }),
            ],
        ),
        3,
    );
}

#[test]
fn max_pool_multi_channel() {
    use LayerSpec as L;
    use dpgd::arch::kinds::*;
    check(
        small(
            [2, 7, 7],
            vec![
                L::Conv2d(Conv2d { out_channels: 3, kernel: 2, stride: 1, padding: 0, bias: true }),
                L::MaxPool2d(MaxPool2d { kernel: 3, stride: 2 }),
                L::Flatten(Flatten),
                L::Linear(Linear { out_features: 3, bias: true }),
            ],
        ),
        3,
    );
}

/// GroupNorm (two groups of two channels; γ and β drawn, not 1 and 0, so that every term of its
/// rule counts) and average pooling, with overlapping windows (stride 1) and without.
#[test]
fn group_norm_and_average_pooling() {
    use LayerSpec as L;
    use dpgd::arch::kinds::*;
    check(
        small(
            [2, 8, 8],
            vec![
                L::Conv2d(Conv2d { out_channels: 4, kernel: 3, stride: 1, padding: 1, bias: true }),
                L::GroupNorm(GroupNorm { groups: 2 }),
                L::Relu(Relu),
                L::AvgPool2d(AvgPool2d { kernel: 3, stride: 1 }),
                L::GroupNorm(GroupNorm { groups: 1 }),
                L::AvgPool2d(AvgPool2d { kernel: 2, stride: 2 }),
                L::Flatten(Flatten),
                L::Linear(Linear { out_features: 3, bias: true }),
            ],
        ),
        3,
    );
}

/// LayerNorm over a flat activation, with its shift and without (γ and β drawn), between
/// linear layers: a layer that is not the first, so its input gradient is used.
#[test]
fn layer_norm_with_and_without_shift() {
    use LayerSpec as L;
    use dpgd::arch::kinds::*;
    check(
        small(
            [1, 5, 5],
            vec![
                L::Flatten(Flatten),
                L::Linear(Linear { out_features: 19, bias: true }),
                L::LayerNorm(LayerNorm { bias: true }),
                L::Tanh(Tanh),
                L::Linear(Linear { out_features: 7, bias: false }),
                L::LayerNorm(LayerNorm { bias: false }),
                L::Linear(Linear { out_features: 3, bias: true }),
            ],
        ),
        4,
    );
}

/// Residual connections: examples/custom_model.rs's network (a block of conv, GroupNorm and
/// ReLU added to its input) as a sequential spec with `add`, and a join of flat activations
/// that a later join reads again (two gradients flowing back into one layer).
#[test]
fn residual_connections() {
    use LayerSpec as L;
    use dpgd::arch::kinds::*;
    let conv = |stride| L::Conv2d(Conv2d { out_channels: 4, kernel: 3, stride, padding: 1, bias: true });
    check(
        small(
            [1, 8, 8],
            vec![
                conv(2),
                L::GroupNorm(GroupNorm { groups: 2 }),
                L::Relu(Relu),
                conv(1),
                L::GroupNorm(GroupNorm { groups: 2 }),
                L::Relu(Relu),
                L::Add(Add { from: 2 }),
                L::AvgPool2d(AvgPool2d { kernel: 2, stride: 2 }),
                L::Flatten(Flatten),
                L::Linear(Linear { out_features: 5, bias: true }),
                L::Tanh(Tanh),
                L::Linear(Linear { out_features: 5, bias: true }),
                L::Add(Add { from: 10 }),
                L::Add(Add { from: 10 }),
                L::Linear(Linear { out_features: 3, bias: true }),
            ],
        ),
        3,
    );
}

#[test]
fn opacus_cnn() {
    check(ModelSpec::opacus_cnn(), 3);
}

#[test]
fn mlp_and_logistic_presets() {
    check(ModelSpec::mlp(16), 2);
    check(ModelSpec::logistic(), 2);
}

/// The per-example gradient rows of a micro-batch, for examples `keep` of `x`, as the clip
/// reads them (the written values and the exact products of the outer blocks' factors) and
/// as written in full.
fn rows_of(net: &Network, theta: &[f32], x: &[f32], labels: &[u8], keep: &[usize]) -> Vec<(Vec<f64>, Vec<f32>)> {
    let (px, p, b) = (net.input_len(), net.num_params(), keep.len());
    let xs: Vec<f32> = keep.iter().flat_map(|&i| x[i * px..(i + 1) * px].iter().copied()).collect();
    let ys: Vec<u8> = keep.iter().map(|&i| labels[i]).collect();
    let mut ws = net.workspace(b);
    let (mut grads, mut losses, mut norms) = (vec![0.0f32; b * p], vec![0.0; b], vec![0.0; b]);
    let outer = net.gradients_with_norms(theta, &xs, &ys, &mut ws, &mut grads, &mut losses, &mut norms).host();
    let rows = dpgd::clip::Rows::with_outer(&grads, p, outer.expect("the fast engine writes its rows on the host"));
    let clipped: Vec<Vec<f64>> = (0..b).map(|r| (0..p).map(|j| rows.value(r, j)).collect()).collect();
    let mut ws = net.workspace(b);
    net.forward(theta, &mut ws, &xs, b);
    net.backward(theta, &mut ws, &ys, &mut grads, &mut losses);
    clipped.into_iter().zip(grads.chunks_exact(p).map(<[f32]>::to_vec)).collect()
}

/// A neighbouring dataset changes which examples share a micro-batch (an exhausted example is
/// skipped, so the batch is one smaller). The sensitivity argument needs every other example's
/// gradient row to be bit-for-bit the same whatever the batch around it: else removing one
/// example would move the others' contributions too. Checked on the rows as the clip reads
/// them (outer blocks from their factors) and as written in full.
#[test]
fn an_example_gradient_row_does_not_depend_on_the_rest_of_its_micro_batch() {
    let spec = ModelSpec::opacus_cnn();
    let net = Network::new(&spec).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let theta = net.init_params(&mut rng);
    let n = 17;
    let x: Vec<f32> = (0..n * net.input_len()).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let labels: Vec<u8> = (0..n).map(|i| (i % spec.classes) as u8).collect();
    let all: Vec<usize> = (0..n).collect();
    let whole = rows_of(&net, &theta, &x, &labels, &all);
    for removed in [0, 5, 16] {
        let keep: Vec<usize> = all.iter().copied().filter(|&i| i != removed).collect();
        for (row, &i) in rows_of(&net, &theta, &x, &labels, &keep).iter().zip(&keep) {
            assert!(row == &whole[i], "example {i}'s row changed when example {removed} left its batch");
        }
    }
    // A batch of another size may take another product path (`gemm`'s kernels, on a processor
    // without AVX-512, differ by size; on AVX-512 the linear forward's dot products do not): the
    // trainer therefore computes every micro-batch at one size (privacy_releases.rs tests the
    // sum it releases).
}

/// `Network::profile` (what `dpgd bench-step --layers` and the layer benchmarks time) runs the
/// same passes as training (`PerExample::gradients_with_norms`): the same gradient rows, left
/// unwritten in the same outer blocks, and losses bit for bit, a time for every layer's forward
/// pass, and a backward time exactly for the layers from the first with parameters on (none
/// before it runs a backward pass).
#[test]
fn profiling_computes_what_training_computes_and_times_every_pass() {
    let mut spec = ModelSpec::opacus_cnn();
    spec.layers.insert(0, LayerSpec::Relu(dpgd::arch::kinds::Relu)); // a layer before the first with parameters
    let net = Network::new(&spec).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let theta = net.init_params(&mut rng);
    let (b, p) = (6, net.num_params());
    let x: Vec<f32> = (0..b * net.input_len()).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let labels: Vec<u8> = (0..b).map(|i| (i % spec.classes) as u8).collect();
    let mut ws = net.workspace(b);
    let (mut want, mut want_losses, mut norms) = (vec![f32::NAN; b * p], vec![0.0f32; b], vec![0.0; b]);
    let outer = net.gradients_with_norms(&theta, &x, &labels, &mut ws, &mut want, &mut want_losses, &mut norms).host();
    assert_eq!(outer.map(|o| o.len()), Some(2), "the two linear layers' weight blocks are left to the clip");
    let (mut grads, mut losses) = (vec![f32::NAN; b * p], vec![0.0f32; b]);
    let times = net.profile(&theta, &mut ws, &x, &labels, &mut grads, &mut losses);
    assert!(grads.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits()), "profiling changed the gradient rows");
    assert_eq!(losses, want_losses);
    assert_eq!(times.len(), net.layers().len());
    assert!(times.iter().all(|t| !t.forward.is_zero()), "{times:?}");
    assert!(times[0].backward.is_zero(), "the relu before the first parameters runs no backward pass");
    assert!(times[1..].iter().all(|t| !t.backward.is_zero()), "{times:?}");
}
