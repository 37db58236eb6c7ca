//! Helpers shared by the end-to-end tests: a synthetic MNIST-format fixture (the tests never
//! need the real MNIST files) and run configs of one shape on subsets of it.
#![allow(dead_code)] // each test binary uses its own subset of these helpers

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use dpgd::per_example::Network;
use dpgd::train::outputs::RunResult;
use dpgd::train::state::{self, Expect, Snapshot};
use dpgd::train::{RunFolder, RunOptions, RunSummary, Silent, TrainConfig, run};

/// A folder with the synthetic fixture (2,000 training and 500 test images of 28 × 28 pixels,
/// 10 classes; see `dpgd::data::synthetic`), written once per test process.
pub fn fixture_dir() -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        dpgd::data::synthetic::Synthetic::default().write(dir.path()).unwrap();
        dir
    })
    .path()
    .to_path_buf()
}

/// A run config on the first `subsets.0` training and `subsets.1` test examples of the fixture with
/// model `preset`; `privacy` and `train` are the bodies of those sections (`train` may go on
/// with later sections such as `[stopping]`). With `DPGD_TEST_ENGINE` set (`burn`, `fast`),
/// `train.engine` is that engine, and with `DPGD_TEST_DEVICE` set (`flex`, `ndarray`),
/// `train.device` that device: CI runs the trainer's tests once per engine, and the burn
/// engine's on both CPU backends.
pub fn fixture_config(name: &str, preset: &str, subsets: (usize, usize), privacy: &str, train: &str) -> String {
    let setting = |var: &str, key: &str| std::env::var(var).map(|v| format!("{key} = \"{v}\"\n")).unwrap_or_default();
    let engine = setting("DPGD_TEST_ENGINE", "engine") + &setting("DPGD_TEST_DEVICE", "device");
    format!(
        "name = \"{name}\"\n[data]\ndir = \"{dir}\"\ntrain_subset = {}\ntest_subset = {}\n[model]\npreset = \
         \"{preset}\"\n[privacy]\n{privacy}\n[train]\n{engine}{train}\n",
        subsets.0,
        subsets.1,
        dir = fixture_dir().display()
    )
}

/// Validates `text` and trains it into `dir`, stopping after `stop_after` steps if given.
pub fn train(text: &str, dir: &Path, stop_after: Option<usize>) -> RunSummary {
    try_train(text, dir, stop_after).unwrap()
}

/// As [`train`], returning the error.
pub fn try_train(text: &str, dir: &Path, stop_after: Option<usize>) -> dpgd::Result<RunSummary> {
    let cfg = TrainConfig::from_toml(text, &[])?.validate()?;
    let data = cfg.config().data.load()?;
    run(&cfg, &data, dir, &RunOptions { stop_after, ..Default::default() }, &mut Silent)
}

/// The result of a finished run.
pub fn result(s: &RunSummary) -> &RunResult {
    s.result.as_ref().expect("the run finished")
}

/// The training state of the run of config `text` in `dir`.
pub fn snapshot(text: &str, dir: &Path) -> Snapshot {
    let cfg = TrainConfig::from_toml(text, &[]).unwrap().validate().unwrap();
    let data = cfg.config().data.load().unwrap();
    let examples = data.train.head(cfg.config().data.train_subset).len();
    let params = Network::new(cfg.model().unwrap()).unwrap().num_params();
    let expect = Expect { params, examples, max_steps: cfg.max_steps() };
    state::read(&RunFolder::new(dir).state(), expect).unwrap().expect("a saved state")
}

/// The released metrics rows of the run in `dir`.
pub fn metrics(dir: &Path) -> Vec<dpgd::train::outputs::MetricsRow> {
    let text = std::fs::read_to_string(RunFolder::new(dir).metrics_jsonl()).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Every backend the build has: the exactness tests run on each (flex always; ndarray and wgpu
/// with their features — wgpu on a GPU, or on Mesa's lavapipe where there is none).
pub fn devices() -> Vec<burn::tensor::Device> {
    let cpu = dpgd::device::cpu_devices();
    let wgpu = cfg!(feature = "wgpu").then(|| dpgd::device::DeviceKind::Wgpu.device().unwrap());
    cpu.into_iter().chain(wgpu).collect()
}
