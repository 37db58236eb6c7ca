//! Helpers shared by the end-to-end tests: real MNIST from `../shared` and run configs of one
//! shape on small subsets of it.
#![allow(dead_code)] // each test binary uses its own subset of these helpers

use std::path::{Path, PathBuf};

use dpgd::data::Dataset;
use dpgd::train::{RunOptions, RunSummary, TrainConfig, run};

/// The real MNIST files (CI provides `../shared` beside the clone).
pub fn mnist_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets/mnist");
    assert!(d.exists(), "these tests read real MNIST from {} (CI provides ../shared)", d.display());
    d
}

/// A run config on the first `subsets.0` training and `subsets.1` test examples of MNIST with
/// model `preset`; `privacy` and `train` are the bodies of those sections (`train` may go on
/// with later sections such as `[stopping]`).
pub fn mnist_config(name: &str, preset: &str, subsets: (usize, usize), privacy: &str, train: &str) -> String {
    format!(
        "name = \"{name}\"\n[data]\ndir = \"{dir}\"\ntrain_subset = {}\ntest_subset = {}\n[model]\npreset = \
         \"{preset}\"\n[privacy]\n{privacy}\n[train]\n{train}\n",
        subsets.0,
        subsets.1,
        dir = mnist_dir().display()
    )
}

/// Validates `text` and trains it into `dir`, stopping after `stop_after` steps if given.
pub fn train(text: &str, dir: &Path, stop_after: Option<usize>) -> RunSummary {
    let cfg = TrainConfig::from_toml(text, &[]).unwrap().validate().unwrap();
    let data = Dataset::load(&cfg.config.data.dir, 10).unwrap();
    run(&cfg, &data, dir, &RunOptions { stop_after, ..Default::default() }).unwrap()
}
