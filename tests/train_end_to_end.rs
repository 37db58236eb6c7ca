//! End to end on a synthetic MNIST-format fixture: plain and filtered GD learn, the ledger stays
//! within budget, the run folder separates publishable from confidential files, resume continues
//! exactly, and bad configs and data fail with messages that name the problem.

mod common;

use common::{fixture_dir, result, snapshot, train, try_train};
use dpgd::data::Dataset;
use dpgd::train::{RunFolder, TrainConfig};

fn config(method: &str, extra: &str) -> String {
    let privacy = format!("method = \"{method}\"\nepsilon = 8.0\ndelta = 1e-5\nclip = 1.0\nsteps = 30");
    let train = format!("lr = 2.0\nseed = 3\neval_every = 4\ncheckpoint_every = 4\nchunk = 8\n{extra}");
    common::fixture_config(&format!("test-{method}"), "opacus-cnn", (2000, 1000), &privacy, &train)
}

#[test]
fn plain_and_filtered_gd_learn_and_respect_the_budget() {
    for (method, extra) in [("plain", ""), ("filtered", "max_steps = 40")] {
        let dir = tempfile::tempdir().unwrap();
        let text = config(method, extra);
        let s = train(&text, dir.path(), None);
        let r = result(&s);
        assert!(r.test_accuracy > 0.6, "{method}: test accuracy {} is not well above chance", r.test_accuracy);
        let state = snapshot(&text, dir.path());
        let budget = 30.0;
        assert!(state.spent.iter().all(|&s| s <= budget), "{method}: an example exceeded B_norm");
        if method == "filtered" {
            let exhausted = state.spent.iter().filter(|&&s| s >= budget).count();
            assert!(exhausted > 0, "filtered GD ran past B_norm/C^2 steps, so some examples must be exhausted");
            assert_eq!(s.steps, 40);
        }
        let privacy = s.privacy.as_ref().unwrap();
        let accounted = privacy.accounting.as_ref().unwrap().epsilon.unwrap();
        assert!(accounted <= 8.0 + 1e-9 && accounted > 7.99, "{accounted}");
        assert!(privacy.noise.seeded && !privacy.private, "a fixed seed is not private");
        let folder = RunFolder::new(dir.path());
        for f in [
            "metrics.csv",
            "metrics.jsonl",
            "privacy.json",
            "result.json",
            "config.toml",
            "model.bpk",
            "model.json",
            "accuracy.png",
            "README.txt",
        ] {
            assert!(folder.publishable().join(f).exists(), "{method}: publishable/{f} missing");
        }
        for f in ["state.bin", "steps.jsonl", "diagnostics.json", "README.txt"] {
            assert!(folder.confidential().join(f).exists(), "{method}: confidential/{f} missing");
        }
    }
}

#[test]
fn stopping_and_resuming_continues_the_same_run() {
    let text = config("filtered", "max_steps = 36");
    let whole = tempfile::tempdir().unwrap();
    train(&text, whole.path(), None);
    let parts = tempfile::tempdir().unwrap();
    let first = train(&text, parts.path(), Some(33));
    assert_eq!((first.steps, first.finished), (33, false));
    let second = train(&text, parts.path(), None);
    assert_eq!(second.steps, 36);
    // The resume is on the operator's record, with the settings a resume may change.
    let resumes = std::fs::read_to_string(RunFolder::new(parts.path()).resumes()).unwrap();
    let lines: Vec<serde_json::Value> = resumes.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1, "{resumes}");
    assert_eq!(lines[0]["resumed_after_step"], 33);
    assert!(lines[0]["train.threads"].as_u64().is_some_and(|t| t >= 1) && lines[0]["train.device"].is_string());
    assert!(!RunFolder::new(whole.path()).resumes().exists(), "an uninterrupted run has no resumes");
    let a = snapshot(&text, whole.path());
    let b = snapshot(&text, parts.path());
    // A fixed seed and a deterministic reduction: the resumed run is bit-for-bit the same.
    assert_eq!(a.theta, b.theta, "resumed θ differs from the uninterrupted run");
    assert_eq!(a.spent, b.spent, "resumed ledger differs from the uninterrupted run");
    // The records read back on resume are rewritten with every
    // float exactly as it was (they moved by ulps), so the published files are byte-identical.
    for f in [RunFolder::metrics_jsonl, RunFolder::metrics_csv, RunFolder::result, RunFolder::privacy] {
        let (x, y) = (f(&RunFolder::new(whole.path())), f(&RunFolder::new(parts.path())));
        assert_eq!(std::fs::read(&x).unwrap(), std::fs::read(&y).unwrap(), "{} differs after a resume", x.display());
    }
    assert_eq!(result(&second), result(&train(&text, whole.path(), None)), "a finished run is read back, not redone");
    // Resuming with a different configuration is refused, naming the field.
    let stopped = tempfile::tempdir().unwrap();
    train(&text, stopped.path(), Some(3));
    let changed = text.replace("clip = 1.0", "clip = 2.0");
    let e = try_train(&changed, stopped.path(), None).unwrap_err().to_string();
    assert!(e.contains("privacy.clip: 1.0 -> 2.0"), "{e}");
    // A record of resumes too large to be one is refused by name, not read into memory.
    let resumes = RunFolder::new(stopped.path()).resumes();
    std::fs::write(&resumes, vec![b'x'; 2 << 20]).unwrap();
    let e = try_train(&text, stopped.path(), None).unwrap_err().to_string();
    assert!(e.contains("resumes.jsonl") && e.contains("not a record of resumes"), "{e}");
}

#[test]
fn bad_configs_name_the_field() {
    let base = config("plain", "");
    let cases = [
        (base.replace("epsilon = 8.0", "epsilonn = 8.0"), "epsilonn"),
        (base.replace("steps = 30", "worst_case_steps = 0"), "privacy.worst_case_steps"),
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
    let clip = dpgd::train::Override::parse_set("privacy.clip=0").unwrap();
    let e = TrainConfig::from_toml(&base, &[clip]).unwrap().validate().unwrap_err().to_string();
    assert!(e.contains("privacy.clip"), "{e}");
    // From a file: a misspelt key is found on its line, in that file, with the nearest name;
    // an unknown key given with --set is blamed on the command line, not on the file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, base.replace("lr = 2.0", "lrr = 2.0")).unwrap();
    let e = TrainConfig::from_file(&path, &[]).unwrap_err().to_string();
    let line = base.lines().position(|l| l.starts_with("lr = ")).unwrap() + 1;
    assert!(e.contains(&format!("train.lrr (line {line})")) && e.contains("did you mean `lr`"), "{e}");
    assert!(e.contains(&path.display().to_string()), "{e}");
    std::fs::write(&path, &base).unwrap();
    let set = dpgd::train::Override::parse_set("train.lrr=1").unwrap();
    let e = TrainConfig::from_file(&path, &[set]).unwrap_err().to_string();
    assert!(e.contains("train.lrr (set on the command line)") && e.contains("did you mean `lr`"), "{e}");
    assert!(!e.contains(&path.display().to_string()), "the file is blamed for a --set key: {e}");
    // A bad value under a field's old name, and a
    // misspelt section, given with --set are blamed on the command line too.
    for (set, key) in [("privacy.steps=x", "privacy.worst_case_steps"), ("privcy.epsilon=1", "privcy")] {
        let set = dpgd::train::Override::parse_set(set).unwrap();
        let e = TrainConfig::from_file(&path, &[set]).unwrap_err().to_string();
        assert!(e.contains(&format!("{key} (set on the command line)")), "{e}");
        assert!(
            !e.contains(&path.display().to_string()) && !e.contains("(line"),
            "the file is blamed for a --set key: {e}"
        );
    }
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
    assert!(Dataset::load(dir.path(), Some(10)).is_ok());
    let labels = dir.path().join("t10k-labels-idx1-ubyte.gz");
    let bytes = std::fs::read(&labels).unwrap();
    std::fs::write(&labels, &bytes[..bytes.len() / 2]).unwrap();
    let e = Dataset::load(dir.path(), Some(10)).unwrap_err().to_string();
    assert!(e.contains("t10k-labels") && e.contains("truncated"), "{e}");
    // A labels file where an images file should be: wrong magic.
    std::fs::write(&labels, &bytes).unwrap();
    std::fs::copy(&labels, dir.path().join("t10k-images-idx3-ubyte.gz")).unwrap();
    let e = Dataset::load(dir.path(), Some(10)).unwrap_err().to_string();
    assert!(e.contains("t10k-images") && e.contains("magic"), "{e}");
    // Too few classes for the labels: mislabelled.
    std::fs::remove_file(dir.path().join("t10k-images-idx3-ubyte.gz")).unwrap();
    let e = Dataset::load(dir.path(), Some(10)).unwrap_err().to_string();
    assert!(e.contains("not found") && e.contains("dpgd data fetch"), "{e}");
    for f in std::fs::read_dir(fixture_dir()).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_some_and(|e| e == "gz") {
            std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
        }
    }
    let e = Dataset::load(dir.path(), Some(5)).unwrap_err().to_string();
    assert!(e.contains("label") && e.contains("mislabelled"), "{e}");
}

/// `train.momentum`: heavy-ball steps change the model, the buffer is part of the durable state
/// (a resumed run ends bit for bit where an uninterrupted one does), and a value outside [0, 1)
/// is refused naming the field.
#[test]
fn momentum_resumes_exactly_and_is_validated() {
    let text = config("filtered", "max_steps = 34\nmomentum = 0.9");
    let whole = tempfile::tempdir().unwrap();
    train(&text, whole.path(), None);
    let parts = tempfile::tempdir().unwrap();
    assert_eq!(train(&text, parts.path(), Some(31)).steps, 31);
    assert_eq!(train(&text, parts.path(), None).steps, 34);
    let (a, b) = (snapshot(&text, whole.path()), snapshot(&text, parts.path()));
    assert_eq!((a.theta.len(), a.velocity.len()), (b.theta.len(), b.theta.len()), "the buffer is saved");
    assert_eq!((a.theta, a.velocity, a.spent), (b.theta, b.velocity, b.spent), "resumed run differs");
    let plain = tempfile::tempdir().unwrap();
    let no_momentum = config("filtered", "max_steps = 34");
    train(&no_momentum, plain.path(), None);
    let c = snapshot(&no_momentum, plain.path());
    assert!(c.velocity.is_empty() && c.theta != snapshot(&text, whole.path()).theta);
    for bad in ["momentum = 1.0", "momentum = -0.1", "momentum = nan"] {
        let e = try_train(&config("filtered", bad), tempfile::tempdir().unwrap().path(), None).unwrap_err().to_string();
        assert!(e.contains("train.momentum"), "{bad}: {e}");
    }
}

/// The fast engine, preferring one worker thread more than the machine has cores (as the burn
/// engine on a GPU prefers `GPU_THREADS`, whatever the cores).
struct PrefersMore(dpgd::per_example::Network);

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl dpgd::per_example::PerExample for PrefersMore {
    type Scratch = dpgd::per_example::Workspace;
    fn num_params(&self) -> usize {
        self.0.num_params()
    }
    fn preferred_threads(&self) -> Option<usize> {
        Some(cores() + 1)
    }
    fn input_shape(&self) -> [usize; 3] {
        dpgd::per_example::PerExample::input_shape(&self.0)
    }
    fn classes(&self) -> usize {
        self.0.classes()
    }
    fn scratch(&self, batch: usize) -> Self::Scratch {
        self.0.workspace(batch)
    }
    fn scratch_bytes(&self, batch: usize) -> Option<u64> {
        self.0.workspace_bytes(batch)
    }
    fn gradients(&self, theta: &[f32], x: &[f32], labels: &[u8], ws: &mut Self::Scratch, g: &mut [f32], l: &mut [f32]) {
        dpgd::per_example::PerExample::gradients(&self.0, theta, x, labels, ws, g, l);
    }
    fn logits<'s>(&self, theta: &[f32], x: &[f32], b: usize, ws: &'s mut Self::Scratch) -> &'s [f32] {
        dpgd::per_example::PerExample::logits(&self.0, theta, x, b, ws)
    }
    fn largest_part(&self) -> Option<(String, usize)> {
        dpgd::per_example::PerExample::largest_part(&self.0)
    }
}

impl dpgd::train::TrainModel for PrefersMore {
    fn initial_params(&self, seed: u64) -> dpgd::Result<Vec<f32>> {
        self.0.initial_params(seed)
    }
    fn write_model(
        &self,
        theta: &[f32],
        input: &dpgd::model::export::ModelInput,
        folder: &RunFolder,
        cfg: &dpgd::train::ValidConfig,
    ) -> dpgd::Result<()> {
        self.0.write_model(theta, input, folder, cfg)
    }
    fn identity(&self) -> Option<serde_json::Value> {
        self.0.identity()
    }
}

#[test]
fn a_run_that_names_no_threads_uses_the_engines_preferred_number() {
    use dpgd::train::{Run, RunOptions};
    let dir = tempfile::tempdir().unwrap();
    // Started and resumed without train.threads, then resumed with 2: each resume records the
    // threads that ran it.
    for (stop_after, threads) in [(Some(2), ""), (Some(3), ""), (None, "threads = 2")] {
        let text = config("plain", threads);
        let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
        let data = cfg.config().data.load().unwrap();
        let net = PrefersMore(dpgd::per_example::Network::new(cfg.model().unwrap()).unwrap());
        let opts = RunOptions { stop_after, ..Default::default() };
        Run::new(&cfg, &data, dir.path()).options(opts.clone()).train_model(net).unwrap();
    }
    let resumes = std::fs::read_to_string(RunFolder::new(dir.path()).resumes()).unwrap();
    let threads: Vec<u64> = resumes
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["train.threads"].as_u64().unwrap())
        .collect();
    assert_eq!(threads, [cores() as u64 + 1, 2], "{resumes}");
}
