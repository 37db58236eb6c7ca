//! End to end on a synthetic MNIST-format fixture: plain and filtered GD learn, the ledger stays within
//! budget, checkpoints survive kills, resume continues exactly, and bad configs and data
//! fail with messages that name the problem.

mod common;

use common::{fixture_dir, train};
use dpgd::data::Dataset;
use dpgd::train::{RunOptions, TrainConfig, checkpoint, run};

fn config(method: &str, extra: &str) -> String {
    let privacy = format!("method = \"{method}\"\nepsilon = 8.0\ndelta = 1e-5\nclip = 1.0\nsteps = 30");
    let train = format!("lr = 2.0\nseed = 3\neval_every = 4\ncheckpoint_every = 4\nchunk = 8\n{extra}");
    common::fixture_config(&format!("test-{method}"), "opacus-cnn", (2000, 1000), &privacy, &train)
}

#[test]
fn plain_and_filtered_gd_learn_and_respect_the_budget() {
    for (method, extra) in [("plain", ""), ("filtered", "max_steps = 40")] {
        let dir = tempfile::tempdir().unwrap();
        let s = train(&config(method, extra), dir.path(), None);
        assert!(s.test_accuracy > 0.6, "{method}: test accuracy {} is not well above chance", s.test_accuracy);
        let state = checkpoint::read(&checkpoint::state_path(dir.path())).unwrap().unwrap();
        let budget = 30.0;
        assert!(state.spent.iter().all(|&s| s <= budget), "{method}: an example exceeded B_norm");
        if method == "filtered" {
            let exhausted = state.spent.iter().filter(|&&s| s >= budget).count();
            assert!(exhausted > 0, "filtered GD ran past B_norm/C^2 steps, so some examples must be exhausted");
            assert_eq!(s.steps, 40);
        }
        let privacy = &s.privacy;
        assert!(privacy["epsilon"].as_f64().unwrap() <= 8.0 + 1e-9);
        assert_eq!(privacy["fixed_seed"], true);
        for f in ["metrics.csv", "privacy.json", "config.toml", "model.bpk", "accuracy.png"] {
            assert!(dir.path().join(f).exists(), "{method}: {f} missing");
        }
    }
}

#[test]
fn stopping_and_resuming_continues_the_same_run() {
    let text = config("filtered", "max_steps = 36");
    let whole = tempfile::tempdir().unwrap();
    train(&text, whole.path(), None);
    let parts = tempfile::tempdir().unwrap();
    let first = train(&text, parts.path(), Some(32));
    assert_eq!(first.steps, 32);
    let second = train(&text, parts.path(), None);
    assert_eq!(second.steps, 36);
    let a = checkpoint::read(&checkpoint::state_path(whole.path())).unwrap().unwrap();
    let b = checkpoint::read(&checkpoint::state_path(parts.path())).unwrap().unwrap();
    // A fixed seed and a deterministic reduction: the resumed run is bit-for-bit the same.
    assert_eq!(a.theta, b.theta, "resumed θ differs from the uninterrupted run");
    assert_eq!(a.spent, b.spent, "resumed ledger differs from the uninterrupted run");
    // Resuming with a different privacy configuration is refused.
    let changed = text.replace("clip = 1.0", "clip = 2.0");
    let cfg = TrainConfig::from_toml(&changed, &[]).unwrap().validate().unwrap();
    let data = Dataset::load(&cfg.config.data.dir, 10).unwrap();
    let e = run(&cfg, &data, parts.path(), &RunOptions::default()).unwrap_err().to_string();
    assert!(e.contains("privacy-relevant configuration"), "{e}");
}

#[test]
fn bad_configs_name_the_field() {
    let base = config("plain", "");
    let cases = [
        (base.replace("epsilon = 8.0", "epsilonn = 8.0"), "epsilonn"),
        (base.replace("epsilon = 8.0", "sigma = -1.0"), "privacy.sigma"),
        (base.replace("delta = 1e-5", "delta = 1.0"), "privacy.delta"),
        (base.replace("epsilon = 8.0", "epsilon = 0.0"), "privacy.epsilon"),
        (base.replace("lr = 2.0", "lr = nan"), "train.lr"),
        (
            base.replace("preset = \"opacus-cnn\"", "layers = [{ kind = \"batch_norm\" }]"),
            "no per-example gradient rule",
        ),
        (base.replace("preset = \"opacus-cnn\"", "preset = \"resnet\""), "model.preset"),
        (base.replace("seed = 3", "seed = 3\nmax_steps = 50"), "train.max_steps"),
    ];
    for (text, want) in cases {
        let e = TrainConfig::from_toml(&text, &[]).and_then(|c| c.validate().map(|_| ())).unwrap_err().to_string();
        assert!(e.contains(want), "expected `{want}` in: {e}");
    }
    let e = TrainConfig::from_toml(&base, &["privacy.clip=0".into()]).unwrap().validate().unwrap_err().to_string();
    assert!(e.contains("privacy.clip"), "{e}");
}

#[test]
fn bad_dataset_files_name_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(fixture_dir()).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "gz") {
            std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
        }
    }
    assert!(Dataset::load(dir.path(), 10).is_ok());
    let labels = dir.path().join("t10k-labels-idx1-ubyte.gz");
    let bytes = std::fs::read(&labels).unwrap();
    std::fs::write(&labels, &bytes[..bytes.len() / 2]).unwrap();
    let e = Dataset::load(dir.path(), 10).unwrap_err().to_string();
    assert!(e.contains("t10k-labels") && e.contains("truncated"), "{e}");
    // A labels file where an images file should be: wrong magic.
    std::fs::write(&labels, &bytes).unwrap();
    std::fs::copy(&labels, dir.path().join("t10k-images-idx3-ubyte.gz")).unwrap();
    let e = Dataset::load(dir.path(), 10).unwrap_err().to_string();
    assert!(e.contains("t10k-images") && e.contains("magic"), "{e}");
    // Too few classes for the labels: mislabelled.
    std::fs::remove_file(dir.path().join("t10k-images-idx3-ubyte.gz")).unwrap();
    let e = Dataset::load(dir.path(), 10).unwrap_err().to_string();
    assert!(e.contains("not found") && e.contains("dpgd data fetch"), "{e}");
    for f in std::fs::read_dir(fixture_dir()).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "gz") {
            std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
        }
    }
    let e = Dataset::load(dir.path(), 5).unwrap_err().to_string();
    assert!(e.contains("label") && e.contains("mislabelled"), "{e}");
}
