//! Bad input never panics, hangs or allocates gigabytes: every validated field takes arbitrary
//! numbers, huge shapes are refused with the memory they would need, and inconsistent data,
//! sweeps and run folders are refused naming what is wrong.

mod common;

use std::time::{Duration, Instant};

use common::{fixture_config, fixture_dir, train, try_train};
use dpgd::train::{Override, TrainConfig};
use proptest::prelude::*;

fn base() -> String {
    let privacy = "method = \"filtered\"\nepsilon = 2.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 4";
    fixture_config("bad", "logistic", (300, 100), privacy, "lr = 1.0\nmax_steps = 6\nchunk = 8")
        .replace("[train]", "[release]\nactive_count = \"noisy\"\n[stopping]\nrule = \"best-train-accuracy\"\n[train]")
}

const FLOAT_FIELDS: [&str; 11] = [
    "privacy.epsilon",
    "privacy.delta",
    "privacy.clip",
    "train.lr",
    "train.lr_after_k",
    "release.active_count_sigma",
    "stopping.sigma",
    "data.normalize.mean",
    "data.normalize.std",
    "privacy.sigma",
    "audit.confidence",
];

const INT_FIELDS: [&str; 13] = [
    "privacy.worst_case_steps",
    "train.max_steps",
    "train.chunk",
    "train.threads",
    "train.eval_every",
    "release.active_count_every",
    "stopping.every",
    "stopping.patience",
    "data.train_subset",
    "data.test_subset",
    "model.init_seed",
    "audit.canaries",
    "audit.input_canaries",
];

/// Validates `base()` with one override: an answer or an error naming a field, quickly.
fn validate_with(o: Override) -> Result<(), TestCaseError> {
    let start = Instant::now();
    let unset = (o.key() == "privacy.sigma").then(|| Override::Unset("privacy.epsilon".into()));
    let overrides: Vec<Override> = unset.into_iter().chain(std::iter::once(o)).collect();
    let outcome =
        std::panic::catch_unwind(|| TrainConfig::from_toml(&base(), &overrides).and_then(|c| c.validate().map(|_| ())));
    prop_assert!(outcome.is_ok(), "validation panicked on {overrides:?}");
    prop_assert!(start.elapsed() < Duration::from_secs(2), "validation took {:?} on {overrides:?}", start.elapsed());
    if let Ok(Err(e)) = outcome {
        prop_assert!(e.to_string().contains("config field"), "{e}");
    }
    Ok(())
}

fn any_float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(-0.0),
        Just(1e-300),
        Just(1e-200),
        Just(1e-320),
        Just(1e300),
        Just(f64::MIN_POSITIVE),
        -1e3f64..1e3,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_float_field_takes_any_number(field in proptest::sample::select(FLOAT_FIELDS.to_vec()), v in any_float()) {
        validate_with(Override::Set(field.to_string(), toml::Value::Float(v)))?;
    }

    #[test]
    fn every_integer_field_takes_any_integer(field in proptest::sample::select(INT_FIELDS.to_vec()), v in prop_oneof![any::<i64>(), Just(i64::MAX), Just(0i64), Just(1i64 << 62), -5i64..5]) {
        validate_with(Override::Set(field.to_string(), toml::Value::Integer(v)))?;
    }
}

#[test]
fn extreme_numbers_are_refused_naming_the_field() {
    for (key, value, want) in [
        ("privacy.sigma", 1e-200, "privacy.sigma"),
        ("release.active_count_sigma", 1e-200, "release.active_count_sigma"),
        ("stopping.sigma", 1e-200, "stopping.sigma"),
        ("privacy.clip", 1e300, "privacy.clip"),
        ("privacy.clip", 1e-300, "privacy.clip"),
        ("privacy.epsilon", 1e-200, "privacy.epsilon"),
        ("data.normalize.std", 0.0, "data.normalize.std"),
        // Subnormal as an f32: 1/(255·std) would scale the inputs to infinity.
        ("data.normalize.std", 1e-40, "data.normalize.std"),
        ("data.normalize.mean", f64::NAN, "data.normalize.mean"),
    ] {
        let mut o = vec![Override::Set(key.into(), toml::Value::Float(value))];
        if key == "privacy.sigma" {
            o.insert(0, Override::Unset("privacy.epsilon".into()));
        }
        let e = TrainConfig::from_toml(&base(), &o).and_then(|c| c.validate().map(|_| ())).unwrap_err().to_string();
        assert!(e.contains(want), "{key} = {value}: {e}");
    }
    // A subnormal δ is a valid (if odd) target: it is calibrated, quickly.
    let start = Instant::now();
    let tiny = [Override::Set("privacy.delta".into(), toml::Value::Float(1e-320))];
    assert!(TrainConfig::from_toml(&base(), &tiny).unwrap().validate().is_ok());
    assert!(start.elapsed() < Duration::from_secs(2));
    for (key, value, want) in
        [("train.threads", 100_000, "train.threads"), ("train.max_steps", 1 << 40, "train.max_steps")]
    {
        let o = [Override::Set(key.into(), toml::Value::Integer(value))];
        let e = TrainConfig::from_toml(&base(), &o).and_then(|c| c.validate().map(|_| ())).unwrap_err().to_string();
        assert!(e.contains(want), "{key} = {value}: {e}");
    }
}

#[test]
fn shapes_too_large_for_memory_are_refused_before_allocating() {
    let huge_layer = base().replace("preset = \"logistic\"", "layers = [{ kind = \"flatten\" }, { kind = \"linear\", out_features = 1000000000 }, { kind = \"linear\", out_features = 10 }]");
    let e = try_train(&huge_layer, tempfile::tempdir().unwrap().path(), None).unwrap_err().to_string();
    assert!(e.contains("GiB") && e.contains("nothing was allocated"), "{e}");
    // No advice to lower the chunk when chunk 1 cannot fit;
    // the layer and its parameter count are named instead.
    assert!(
        e.contains("model.layers[1]") && e.contains("even at train.chunk = 1") && !e.contains("lower train.chunk"),
        "{e}"
    );
    let huge_chunk = base().replace("chunk = 8", "chunk = 1000000000");
    let e = try_train(&huge_chunk, tempfile::tempdir().unwrap().path(), None).unwrap_err().to_string();
    assert!(e.contains("train.chunk") && e.contains("GiB"), "{e}");
    // The advice is the largest chunk that fits, not chunk 1.
    let most: usize = e.split("at most ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().parse().unwrap();
    assert!(most > 1000 && most < 1_000_000_000, "{e}");
    let wrapping = base().replace("preset = \"logistic\"", "layers = [{ kind = \"flatten\" }, { kind = \"linear\", out_features = 4611686018427387904 }, { kind = \"linear\", out_features = 10 }]");
    // Explicit layers are checked against the data's shape, when it is known: before training.
    let e = try_train(&wrapping, tempfile::tempdir().unwrap().path(), None).unwrap_err().to_string();
    assert!(e.contains("model.layers[1]") && e.contains("too large"), "{e}");
}

#[test]
fn inconsistent_data_is_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    dpgd::data::synthetic::Synthetic { train: 0, test: 10, side: 28, seed: 1 }.write(&empty).unwrap();
    let e = dpgd::data::Dataset::load(&empty, Some(10)).unwrap_err().to_string();
    assert!(e.contains("train-images") && e.contains("0 examples"), "{e}");
    let small = tmp.path().join("small");
    dpgd::data::synthetic::Synthetic { train: 50, test: 10, side: 16, seed: 1 }.write(&small).unwrap();
    // 16 × 16 training images with 28 × 28 test images: the files do not belong together.
    for f in [dpgd::data::FILES[2], dpgd::data::FILES[3]] {
        std::fs::copy(fixture_dir().join(format!("{f}.gz")), small.join(format!("{f}.gz"))).unwrap();
    }
    let text = base().replace(&fixture_dir().display().to_string(), &small.display().to_string());
    let e = try_train(&text, &tmp.path().join("run"), None).unwrap_err().to_string();
    assert!(e.contains("[1, 16, 16]") && e.contains("[1, 28, 28]"), "{e}");
}

#[test]
fn sweeps_that_would_explode_or_collide_are_refused_before_any_run() {
    let tmp = tempfile::tempdir().unwrap();
    let base_file = tmp.path().join("base.toml");
    std::fs::write(&base_file, base()).unwrap();
    let write = |grid: &str| {
        let p = tmp.path().join("sweep.toml");
        std::fs::write(&p, format!("name = \"s\"\nbase = \"{}\"\n[grid]\n{grid}", base_file.display())).unwrap();
        p
    };
    let big: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
    let grid = format!("\"train.eval_every\" = [{0}]\n\"stopping.every\" = [{0}]\nseeds = [{0}]\n", big.join(","));
    let start = Instant::now();
    let e = dpgd::sweep::plan(&write(&grid)).unwrap_err().to_string();
    assert!(e.contains("more than 100000 runs") && start.elapsed() < Duration::from_secs(5), "{e}");
    let e = dpgd::sweep::plan(&write("\"data.dir\" = [\"a/b_c\", \"a/bc\"]\n")).err().map(|e| e.to_string());
    // Distinct values get distinct folders (the data folders do not exist, so validation fails later).
    assert!(e.as_ref().is_none_or(|e| !e.contains("share the folder")), "{e:?}");
    let e = dpgd::sweep::plan(&write("seeds = [1]\n")).map(|_| ());
    assert!(e.is_ok());
    std::fs::write(tmp.path().join("noname.toml"), format!("name = \"\"\nbase = \"{}\"\n", base_file.display()))
        .unwrap();
    let e = dpgd::sweep::plan(&tmp.path().join("noname.toml")).unwrap_err().to_string();
    assert!(e.contains("name"), "{e}");
}

#[test]
fn a_damaged_finished_sweep_run_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let base_file = tmp.path().join("base.toml");
    std::fs::write(
        &base_file,
        base().replace("max_steps = 6", "max_steps = 4").replace("rule = \"best-train-accuracy\"", ""),
    )
    .unwrap();
    let sweep = tmp.path().join("sweep.toml");
    std::fs::write(&sweep, format!("name = \"s\"\nbase = \"{}\"\n[grid]\nseeds = [1]\n", base_file.display())).unwrap();
    let (_, runs) = dpgd::sweep::plan(&sweep).unwrap();
    let out = tmp.path().join("out");
    dpgd::sweep::execute(&out, &runs, &Default::default(), &dpgd::sweep::QuietSweep).unwrap();
    let privacy = dpgd::train::RunFolder::new(out.join("runs").join(&runs[0].id)).privacy();
    std::fs::write(&privacy, "").unwrap();
    let e = dpgd::sweep::write_results(&out, &runs).unwrap_err().to_string();
    assert!(e.contains(&privacy.display().to_string()), "{e}");
}

#[test]
fn a_finished_run_is_not_redone_and_an_unfinished_one_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let text = base().replace("rule = \"best-train-accuracy\"", "").replace("\n[train]", "\n[train]\nseed = 1");
    let a = train(&text, dir.path(), None);
    let b = train(&text, dir.path(), None);
    assert_eq!(a.result, b.result);
}

/// A device whose backend is not compiled in is refused when
/// the config is validated, not after the whole run when the model is saved.
#[cfg(not(feature = "flex"))]
#[test]
fn a_device_not_compiled_in_is_refused_before_training() {
    let o = [Override::Set("train.device".into(), toml::Value::String("flex".into()))];
    let e = TrainConfig::from_toml(&base(), &o).unwrap().validate().map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("train.device") && e.contains("--features flex"), "{e}");
}

/// δ ≥ 1/n promises nothing (publishing one random example
/// whole meets it) and is refused by name.
#[test]
fn a_delta_of_at_least_one_over_n_is_refused() {
    let text = base().replace("delta = 1e-5", "delta = 0.9999");
    assert!(text.contains("0.9999"));
    let e = try_train(&text, tempfile::tempdir().unwrap().path(), None).unwrap_err().to_string();
    assert!(e.contains("privacy.delta") && e.contains("1/n"), "{e}");
}

/// `train.engine`: the fast engine is refused for a GPU device (it computes on the CPU: a run
/// asked to go on wgpu must not silently stay on the CPU);
/// `Trainer::resume_or_init` (the fast engine's entry) refuses a model the burn engine trains.
#[test]
fn an_engine_that_cannot_train_the_model_where_asked_is_refused_naming_the_fix() {
    let set = |k: &str, v: &str| Override::Set(k.into(), toml::Value::String(v.into()));
    // Checked on the unvalidated config: validation first asks for wgpu to be compiled in.
    let wgpu = TrainConfig::from_toml(&base(), &[set("train.device", "wgpu")]).unwrap();
    let e = wgpu.model_spec_for([1, 28, 28], 10).unwrap_err().to_string();
    assert!(e.contains("train.device") && e.contains("engine = \"burn\""), "{e}");
    let on_burn = TrainConfig::from_toml(&base(), &[set("train.device", "wgpu"), set("train.engine", "burn")]).unwrap();
    assert!(on_burn.model_spec_for([1, 28, 28], 10).is_ok());
    let cfg = TrainConfig::from_toml(&base(), &[set("train.engine", "burn")]).unwrap().validate().unwrap();
    let data = cfg.config().data.load().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut silent = dpgd::train::Silent;
    let opts = dpgd::train::RunOptions::default();
    let e =
        dpgd::train::Trainer::resume_or_init(&cfg, &data, dir.path(), &opts, &mut silent).err().unwrap().to_string();
    assert!(e.contains("train.engine") && e.contains("train::run"), "{e}");
}

/// A config switched to another method lists every field it now needs changed, in one error
/// (it took three rounds of edits, one error at a time, before).
#[test]
fn every_problem_of_a_config_is_reported_at_once() {
    let text = base().replace("method = \"filtered\"", "method = \"sgd\"").replace("max_steps = 6", "max_steps = 9");
    let e = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, dpgd::Error::ConfigProblems(ref all) if all.len() == 3), "{msg}");
    for field in ["train.max_steps", "stopping.rule", "privacy.sample_rate"] {
        assert!(msg.contains(&format!("config field `{field}`")), "{field}: {msg}");
    }
    // One problem is reported as itself.
    let one = base().replace("lr = 1.0", "lr = -1.0");
    let e = TrainConfig::from_toml(&one, &[]).unwrap().validate().unwrap_err();
    assert!(matches!(e, dpgd::Error::Config { ref field, .. } if field == "train.lr"), "{e}");
}
