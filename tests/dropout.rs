//! A user model with dropout on the burn engine: its rows are drawn afresh each call, yet each is
//! its example's own. (A test binary of its own: burn's CPU backends keep one random generator
//! per process, which the check reseeds, so no other test may draw from it meanwhile.)

use burn::module::Module;
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use dpgd::nn::{Classifier, Linear, LinearConfig};
use dpgd::per_example::{BurnEngine, PerExample};

mod common;

/// Dropout draws its masks per position: the rows differ from call to call, yet each is its
/// example's own, and the model is accepted — by the engine, by the check at other micro-batch
/// sizes, and by the trainer, which checks at the run's own before it trains.
#[derive(Module, Debug)]
struct WithDropout {
    fc1: Linear,
    drop: burn::nn::Dropout,
    fc2: Linear,
}

impl Classifier for WithDropout {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        self.fc2.forward(self.drop.forward(relu(self.fc1.forward(x.flatten(1, 3)))))
    }
}

#[test]
fn a_model_with_dropout_passes_the_row_check_and_trains() {
    let d = Device::flex();
    let net = WithDropout {
        fc1: LinearConfig::new(36, 16).init(&d),
        drop: burn::nn::DropoutConfig::new(0.5).init(),
        fc2: LinearConfig::new(16, 3).init(&d),
    };
    let engine = BurnEngine::new(net, &d, [1, 6, 6], 3).unwrap();
    let theta = engine.current_params().unwrap();
    for batch in [2, 5, 16] {
        dpgd::per_example::check_rows_are_own(&engine, &theta, batch).unwrap();
    }
    // The dropout is live: two calls on one batch give different rows.
    let x: Vec<f32> = (0..4 * 36).map(|i| (i % 17) as f32 / 17.0).collect();
    let y = [0u8, 1, 2, 1];
    let rows = |seed| {
        engine.reseed(seed);
        let (mut g, mut l) = (vec![0.0f32; 4 * theta.len()], vec![0.0f32; 4]);
        engine.gradients(&theta, &x, &y, &mut engine.scratch(4), &mut g, &mut l);
        g
    };
    assert_ne!(rows(1), rows(2), "the dropout draws masks");
    assert_eq!(rows(1), rows(1), "reseeding repeats them");
    // And it trains (in this test: a second one would draw from the generator meanwhile).
    trains_privately();
}

fn trains_privately() {
    use dpgd::train::{Run, TrainConfig};
    let d = Device::flex();
    let net = WithDropout {
        fc1: LinearConfig::new(784, 16).init(&d),
        drop: burn::nn::DropoutConfig::new(0.25).init(),
        fc2: LinearConfig::new(16, 10).init(&d),
    };
    let engine = BurnEngine::new(net, &d, [1, 28, 28], 10).unwrap();
    let privacy = "method = \"filtered\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 3";
    let text = common::fixture_config("dropout", "logistic", (200, 50), privacy, "lr = 1.0\nchunk = 16");
    let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
    let data = cfg.config().data.load().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trained = Run::new(&cfg, &data, dir.path()).train_model(engine).unwrap();
    assert!(trained.summary.finished && trained.summary.privacy.is_some_and(|p| p.private));
}
