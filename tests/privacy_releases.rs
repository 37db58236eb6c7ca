//! What a run releases (issue: privacy you can publish): every defect of the release review has
//! a test here that failed before its fix.

mod common;

use common::{fixture_config, fixture_dir, result, train, try_train};
use dpgd::accounting::filter::IndividualFilter;
use dpgd::arch::{LayerSpec, ModelSpec};
use dpgd::clip::{NonFinitePolicy, SumGrid};
use dpgd::data::{Normalize, Split};
use dpgd::per_example::{BurnEngine, Network, PerExample};
use dpgd::train::step::{Aggregation, ClippedSum, GradientPlan};
use dpgd::train::{RunFolder, TrainConfig, read_json};

/// Sixteen 4 × 4 images; example 3 alone lights pixel 5, on which θ puts a weight near
/// f32::MAX, so its logits overflow and its gradient is NaN — on the real training path.
fn poisoned() -> (Network, Split, Vec<f32>) {
    let spec = ModelSpec {
        input: [1, 4, 4],
        classes: 10,
        layers: vec![
            LayerSpec::Flatten(dpgd::arch::kinds::Flatten),
            LayerSpec::Linear(dpgd::arch::kinds::Linear { out_features: 10, bias: true }),
        ],
    };
    let net = Network::new(&spec).unwrap();
    let mut images = vec![0u8; 16 * 16];
    for (i, img) in images.chunks_exact_mut(16).enumerate() {
        img[(i % 4) + 8] = 200;
    }
    images[3 * 16 + 5] = 255;
    let labels: Vec<u8> = (0..16).map(|i| (i % 10) as u8).collect();
    let mut theta = vec![0.01f32; net.num_params()];
    theta[5] = 3.0e38; // W[class 0, pixel 5]: with the pixel normalised to 2, the logit is +∞
    (net, Split { images, features: Vec::new(), labels, rows: 4, cols: 4, channels: 1 }, theta)
}

#[test]
fn a_skipped_non_finite_example_contributes_nothing_to_the_real_gradient_sum() {
    let (net, data, theta) = poisoned();
    let norm = Normalize::all(0.0, 0.5);
    let grid = SumGrid::fixed_point(1.0, 16).unwrap();
    let clip = Aggregation::Clip { clip: 1.0, on_nonfinite: NonFinitePolicy::Skip, grid };
    let plan = GradientPlan::new(net.clone(), data.head(0), norm.clone(), clip, 4);
    let mut ledger = IndividualFilter::new(16, 10.0).unwrap();
    let (sum, stats) = plan.gradient_sum(&theta, &mut ledger, 1).unwrap();
    let sum = sum.to_f32();
    assert_eq!(stats.skipped_nonfinite, 1);
    assert!(sum.iter().all(|v| v.is_finite()), "one NaN example poisoned the released sum");
    assert_eq!(ledger.spent(3), 1.0, "the skipped example is still charged C²");
    // Its neighbour with example 3 zeroed out (a blank image: zero gradient on pixel 5's
    // weights, a finite one elsewhere) gives the same sum but for example 3's finite part,
    // which a skipped example does not have: compare against the others alone.
    let mut others = data.clone();
    others.images.drain(3 * 16..4 * 16);
    others.labels.remove(3);
    let plan2 = GradientPlan::new(net, others.head(0), norm, clip, 4);
    let mut ledger2 = IndividualFilter::new(15, 10.0).unwrap();
    let want = plan2.gradient_sum(&theta, &mut ledger2, 1).unwrap().0.to_f32();
    for (a, b) in sum.iter().zip(&want) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
    }
}

/// A run of the fixture whose learning rate is so large that after its first step some
/// examples' logits overflow, so their gradients are NaN.
fn overflowing(policy: &str) -> String {
    let privacy =
        format!("method = \"filtered\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 4\n{policy}");
    fixture_config("nan", "logistic", (300, 100), &privacy, "lr = 1e40\nmax_steps = 5\neval_every = 1")
}

#[test]
fn non_finite_gradients_are_skipped_by_default_and_counted_only_for_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let text = overflowing("");
    let cfg = TrainConfig::from_toml(&text, &[]).unwrap();
    assert_eq!(cfg.privacy.on_nonfinite, NonFinitePolicy::Skip, "skipping is the default");
    let s = train(&text, dir.path(), None);
    let folder = RunFolder::new(dir.path());
    let steps = std::fs::read_to_string(folder.steps()).unwrap();
    let skipped: usize = steps
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["nonfinite_skipped"].as_u64().unwrap() as usize)
        .sum();
    assert!(skipped > 0, "the learning rate must poison some examples");
    assert!(s.privacy.as_ref().unwrap().private, "skipping keeps the run private");
    for f in std::fs::read_dir(folder.publishable()).unwrap() {
        let f = f.unwrap().path();
        if let Ok(text) = std::fs::read_to_string(&f) {
            assert!(
                !text.contains("nonfinite_skipped") && !text.contains("skipped"),
                "{} mentions the skip count",
                f.display()
            );
        }
    }
    // The aborting policy is still available, and makes the run non-private.
    let e = try_train(&overflowing("on_nonfinite = \"error\""), tempfile::tempdir().unwrap().path(), None).unwrap_err();
    assert!(e.to_string().contains("non-finite gradient"), "{e}");
    let cfg = TrainConfig::from_toml(&overflowing("on_nonfinite = \"error\""), &[]).unwrap().validate().unwrap();
    assert!(cfg.non_private_reasons().iter().any(|r| r.contains("on_nonfinite")));
}

fn run_config(extra_privacy: &str, extra_train: &str, release: &str) -> String {
    let privacy = format!(
        "method = \"filtered\"\nepsilon = 2.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 4\n{extra_privacy}"
    );
    let train = format!("lr = 1.0\nmax_steps = 6\neval_every = 2\n{extra_train}\n{release}");
    fixture_config("releases", "logistic", (400, 100), &privacy, &train)
}

#[test]
fn an_os_seeded_run_is_private_and_a_fixed_seed_one_says_it_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let s = train(&run_config("", "", ""), dir.path(), None);
    let p = s.privacy.as_ref().unwrap();
    assert!(p.private && p.not_private_because.is_empty());
    assert!(!p.noise.seeded && p.noise.seed.is_none());
    assert!(p.epsilon.unwrap() <= 2.0 && p.epsilon.unwrap() > 1.99);
    assert_eq!(result(&s).epsilon, p.epsilon);
    let dir = tempfile::tempdir().unwrap();
    let s = train(&run_config("", "seed = 11", ""), dir.path(), None);
    let p = s.privacy.as_ref().unwrap();
    assert!(!p.private && p.epsilon.is_none() && p.noise.seeded);
    assert!(p.not_private_because[0].contains("train.seed = 11"), "{:?}", p.not_private_because);
    assert!(result(&s).epsilon.is_none() && !result(&s).private);
}

#[test]
fn publishable_files_hold_no_timings_exact_counts_or_losses() {
    let dir = tempfile::tempdir().unwrap();
    train(&run_config("", "", "[release]\nactive_count = \"noisy\"\nactive_count_every = 2"), dir.path(), None);
    let folder = RunFolder::new(dir.path());
    for f in std::fs::read_dir(folder.publishable()).unwrap() {
        let f = f.unwrap().path();
        let Ok(text) = std::fs::read_to_string(&f) else { continue };
        for word in ["seconds", "active_exact", "train_loss", "NON_PRIVATE"] {
            assert!(!text.contains(word), "{} holds `{word}`", f.display());
        }
    }
    let csv = std::fs::read_to_string(folder.metrics_csv()).unwrap();
    assert_eq!(
        csv.lines().next().unwrap(),
        "step,epsilon_so_far,test_accuracy,active_count_noisy,train_accuracy_noisy"
    );
    let steps = std::fs::read_to_string(folder.steps()).unwrap();
    assert!(
        steps.contains("\"seconds\"") && steps.contains("active_exact"),
        "timings and exact counts stay confidential"
    );
}

#[test]
fn the_neighbouring_relation_is_stated_and_replace_one_calibrates_for_sensitivity_2c() {
    let zero = TrainConfig::from_toml(&run_config("", "", ""), &[]).unwrap().validate().unwrap();
    let replace =
        TrainConfig::from_toml(&run_config("neighbours = \"replace-one\"", "", ""), &[]).unwrap().validate().unwrap();
    let ratio = replace.sigma().unwrap() / zero.sigma().unwrap();
    assert!((ratio - 2.0).abs() < 1e-9, "σ ratio {ratio}");
    assert_eq!(replace.epsilon(), zero.epsilon(), "the same ε under each relation");
    let dir = tempfile::tempdir().unwrap();
    let text =
        run_config("neighbours = \"replace-one\"", "", "[release]\nactive_count = \"noisy\"\nactive_count_every = 2");
    // The counts' noise, resolved from the budget at validation (sensitivity 1 under both).
    let sigma_count =
        TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap().config().release.active_count_sigma;
    let s = train(&text, dir.path(), None);
    let p = s.privacy.as_ref().unwrap();
    assert_eq!(p.neighbours.relation.name(), "replace-one");
    assert!(p.summary.contains("replace-one"), "{}", p.summary);
    let a = p.accounting.as_ref().unwrap();
    assert!(a.guarantee.contains("2 sqrt(B_norm)/(sigma C)"), "{}", a.guarantee);
    assert!(a.rests_on["sensitivity"].starts_with("2C per step"), "{:?}", a.rests_on);
    // Counts keep sensitivity 1: their charge is 1/(2 s²) per release under both relations.
    let per = a.session.as_ref().unwrap().charged_rho["active-count"] / 3.0;
    let sigma_count = sigma_count.unwrap();
    assert!((per - 0.5 / (sigma_count * sigma_count)).abs() < 1e-12, "{per}");
}

#[test]
fn exact_counts_make_a_run_non_private_in_every_file() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base.toml");
    std::fs::write(
        &base,
        run_config("", "", "[release]\nactive_count = \"exact-non-private\"\nactive_count_every = 2"),
    )
    .unwrap();
    let sweep = tmp.path().join("sweep.toml");
    std::fs::write(
        &sweep,
        format!("name = \"exact\"\nbase = \"{}\"\n[grid]\n\"privacy.epsilon\" = [2.0]\n", base.display()),
    )
    .unwrap();
    let (_, runs) = dpgd::sweep::plan(&sweep).unwrap();
    let out = tmp.path().join("out");
    dpgd::sweep::execute(&out, &runs, &dpgd::sweep::ExecuteOptions::default(), &dpgd::sweep::QuietSweep).unwrap();
    let folder = RunFolder::new(out.join("runs").join(&runs[0].id));
    let privacy: serde_json::Value = read_json(&folder.privacy()).unwrap();
    assert_eq!((privacy["private"].clone(), privacy["epsilon"].clone()), (false.into(), serde_json::Value::Null));
    assert!(privacy["summary"].as_str().unwrap().starts_with("NOT PRIVATE"));
    let result: serde_json::Value = read_json(&folder.result()).unwrap();
    assert_eq!((result["private"].clone(), result["epsilon"].clone()), (false.into(), serde_json::Value::Null));
    let row: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(out.join("results.jsonl")).unwrap().lines().next().unwrap())
            .unwrap();
    assert_eq!((row["private"].clone(), row["epsilon"].clone()), (false.into(), serde_json::Value::Null));
    let csv = std::fs::read_to_string(folder.metrics_csv()).unwrap();
    assert!(csv.lines().next().unwrap().ends_with("active_count_NON_PRIVATE"), "the column says so too");
    assert!(dpgd::sweep::report(&out).unwrap().contains("(not private)"));
}

#[test]
fn resume_refuses_training_data_that_changed_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    for f in std::fs::read_dir(fixture_dir()).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, data.join(f.file_name().unwrap()))
            .or_else(|_| {
                std::fs::create_dir_all(&data).unwrap();
                std::fs::copy(&f, data.join(f.file_name().unwrap()))
            })
            .unwrap();
    }
    let text =
        run_config("", "seed = 2", "").replace(&fixture_dir().display().to_string(), &data.display().to_string());
    let run = tmp.path().join("run");
    assert_eq!(train(&text, &run, Some(2)).steps, 2);
    // The same labels, reordered: the same size and classes, the wrong examples.
    let labels = data.join("train-labels-idx1-ubyte.gz");
    let d = dpgd::data::Dataset::load(&data, Some(10)).unwrap();
    let mut shuffled = d.train.labels.clone();
    shuffled.rotate_left(1);
    dpgd::data::idx::write_gz(&labels, &[shuffled.len() as u32], &shuffled).unwrap();
    let e = try_train(&text, &run, None).unwrap_err().to_string();
    assert!(e.contains("train-labels-idx1-ubyte.gz") && e.contains("differs"), "{e}");
    // A training set of another size is refused too.
    dpgd::data::idx::write_gz(&labels, &[d.train.labels.len() as u32], &d.train.labels).unwrap();
    let fewer = text.replace("train_subset = 400", "train_subset = 300");
    let e = try_train(&fewer, &run, None).unwrap_err().to_string();
    assert!(e.contains("train_subset: 400 -> 300"), "{e}");
}

#[test]
fn discrete_gaussian_noise_trains_is_accounted_through_zcdp_and_reproduces() {
    let text = run_config(
        "noise = \"discrete-gaussian\"\nconversion = \"cks\"",
        "seed = 4",
        "[release]\nactive_count = \"noisy\"\nactive_count_every = 2",
    );
    let dir = tempfile::tempdir().unwrap();
    let s = train(&text, dir.path(), None);
    let p = s.privacy.as_ref().unwrap();
    assert_eq!(p.noise.sampler, dpgd::noise::NoiseSampler::DiscreteGaussian);
    let a = p.accounting.as_ref().unwrap();
    assert!(a.mu.is_none(), "no Gaussian-DP claim for discrete noise");
    assert!(a.epsilon_by_conversion["gaussian-exact"].is_none());
    assert!(a.epsilon.unwrap() <= 2.0 && a.epsilon.unwrap() > 1.99);
    assert!(result(&s).test_accuracy > 0.3, "{}", result(&s).test_accuracy);
    // Noisy counts stay integers.
    for r in common::metrics(dir.path()) {
        if let Some(c) = r.active_count_noisy {
            assert_eq!(c.fract(), 0.0);
        }
    }
    // Integer sums are exact in any order: a resumed run is the same run.
    let parts = tempfile::tempdir().unwrap();
    train(&text, parts.path(), Some(3));
    assert_eq!(result(&train(&text, parts.path(), None)), result(&s));
    // The continuous Gaussian's exact curve is refused for it.
    let e = TrainConfig::from_toml(&run_config("noise = \"discrete-gaussian\"", "", ""), &[])
        .unwrap()
        .validate()
        .unwrap_err();
    assert!(e.to_string().contains("privacy.conversion"), "{e}");
}

/// Two processes continuing one run drew independent noise and
/// left two noisy versions of a step. The second is refused, naming the holder; the lock goes
/// with the first.
#[test]
fn a_second_trainer_on_one_run_folder_is_refused_while_the_first_holds_it() {
    use dpgd::train::{RunOptions, Silent, Trainer};
    let dir = tempfile::tempdir().unwrap();
    let privacy = "method = \"plain\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 3";
    let text = fixture_config("lock", "logistic", (200, 50), privacy, "lr = 1.0\nseed = 1");
    // The lock is the folder's, whatever the engine: this uses the fast engine's entry point.
    let fast = [dpgd::train::Override::Set("train.engine".into(), toml::Value::String("fast".into()))];
    let cfg = TrainConfig::from_toml(&text, &fast).unwrap().validate().unwrap();
    let data = dpgd::data::Dataset::load(&fixture_dir(), Some(10)).unwrap();
    let (mut a, mut b, mut c) = (Silent, Silent, Silent);
    let first = Trainer::resume_or_init(&cfg, &data, dir.path(), &RunOptions::default(), &mut a).unwrap();
    let Err(e) = Trainer::resume_or_init(&cfg, &data, dir.path(), &RunOptions::default(), &mut b) else {
        panic!("a second trainer continued a run another one holds");
    };
    let msg = e.to_string();
    assert!(msg.contains("another process") && msg.contains(&format!("process {}", std::process::id())), "{msg}");
    drop(first);
    assert!(Trainer::resume_or_init(&cfg, &data, dir.path(), &RunOptions::default(), &mut c).is_ok());
}

/// The integer clipped sum of the real training path. `exhausted` examples are skipped, as the
/// trainer skips examples whose budget is spent.
fn grid_sum<E: PerExample>(net: E, data: &Split, theta: &[f32], exhausted: impl Fn(usize) -> bool) -> Vec<i64> {
    let n = data.len();
    let grid = SumGrid::fixed_point(1.0, n).unwrap();
    let clip = Aggregation::Clip { clip: 1.0, on_nonfinite: NonFinitePolicy::Skip, grid };
    let plan = GradientPlan::new(net, data.head(0), Normalize::MNIST, clip, 16);
    let mut ledger = IndividualFilter::new(n, 10.0).unwrap();
    for i in (0..n).filter(|&i| exhausted(i)) {
        ledger.slot_mut(i).grant(10.0);
    }
    match plan.gradient_sum(theta, &mut ledger, 1).unwrap().0 {
        ClippedSum::Grid { values, .. } => values,
        ClippedSum::Float(_) => panic!("a clipped sum is on a grid"),
    }
}

/// A neighbour moves the released sum by exactly its own rounded row, on the real training path:
/// S(all) − S(example i skipped) = S(only example i), in integers. The engine computes a batch of
/// one differently from a batch of sixteen, so before micro-batches had one size this failed
/// whenever a neighbour changed how many examples shared a micro-batch. On both engines: the
/// fast one and the burn engine (the same model as burn modules of `dpgd::nn` layers).
#[test]
fn a_neighbour_moves_the_clipped_sum_by_exactly_its_own_rounded_row() {
    let data = dpgd::data::Dataset::load(&fixture_dir(), Some(10)).unwrap().train.truncated(40);
    let net = Network::new(&ModelSpec::opacus_cnn()).unwrap();
    let theta = net.init_params(&mut <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(5));
    neighbours_move_the_sum_by_their_own_row(|| net.clone(), &data, &theta);
    let device = burn::tensor::Device::flex();
    let burn_engine = || {
        let model = dpgd::model::BurnModel::from_params(&net, &theta, &device).unwrap();
        BurnEngine::new(model, &device, [1, 28, 28], 10).unwrap()
    };
    let burn_theta = burn_engine().current_params().unwrap();
    neighbours_move_the_sum_by_their_own_row(burn_engine, &data, &burn_theta);
}

fn neighbours_move_the_sum_by_their_own_row<E: PerExample>(engine: impl Fn() -> E, data: &Split, theta: &[f32]) {
    let all = grid_sum(engine(), data, theta, |_| false);
    for i in [0, 17, 39] {
        let without = grid_sum(engine(), data, theta, |j| j == i);
        let alone = grid_sum(engine(), data, theta, |j| j != i);
        let moved: Vec<i64> = all.iter().zip(&without).map(|(a, b)| a - b).collect();
        assert!(moved == alone, "removing example {i} moved the sum by more than its own row");
        assert!(alone.iter().any(|&v| v != 0));
    }
}

/// An observer that remembers the first noisy count it is shown and then dies, as a process
/// killed right after printing its first progress line does.
struct DiesAfterFirstLine(Option<f64>);

impl dpgd::train::Observer for DiesAfterFirstLine {
    fn step(&mut self, report: &dpgd::train::observer::StepReport) {
        self.0 = report.active_count_noisy;
        panic!("killed right after the first progress line");
    }
}

/// A noisy count shown to the operator is the count the record keeps: the step's releases are
/// durable in the state before the observer sees them, so a run that dies right after showing
/// step 1 resumes with the value it showed — never a second draw (with OS noise, a second draw
/// of one count is a release nobody charged). This failed when the row became durable only
/// with the next step's state.
#[test]
fn a_count_shown_before_a_crash_is_the_count_the_resumed_run_records() {
    let privacy = "method = \"filtered\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 3";
    let rest = "lr = 1.0\nmax_steps = 4\n[release]\nactive_count = \"noisy\"\nactive_count_sigma = 20.0\n\
                active_count_every = 1";
    // No train.seed: the noise is keyed from the operating system, as in a private run.
    let text = fixture_config("shown", "logistic", (300, 100), privacy, rest);
    assert!(!text.contains("seed"), "the run must be OS-seeded");
    let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
    let data = cfg.config().data.load().unwrap();
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let mut dies = DiesAfterFirstLine(None);
        let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            dpgd::train::run(&cfg, &data, dir.path(), &dpgd::train::RunOptions::default(), &mut dies)
        }));
        assert!(crashed.is_err(), "the observer ends the process after the first line");
        let shown = dies.0.expect("step 1 shows a noisy count");
        train(&text, dir.path(), None);
        let recorded = common::metrics(dir.path())[0].active_count_noisy.expect("step 1 released a count");
        assert_eq!(shown.to_bits(), recorded.to_bits(), "step 1 showed {shown} but the record says {recorded}");
    }
}

/// A resume refuses a released record that lost rows the training state says were written to
/// it, naming the file and the missing steps, instead of publishing a record with a hole.
#[test]
fn a_resume_refuses_a_released_record_that_lost_rows_naming_them() {
    let privacy = "method = \"filtered\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 3";
    let rest = "lr = 1.0\nseed = 1\nmax_steps = 8\neval_every = 2\n[release]\nactive_count = \"noisy\"\n\
                active_count_sigma = 20.0\nactive_count_every = 1";
    let text = fixture_config("hole", "logistic", (300, 100), privacy, rest);
    for emptied in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        train(&text, dir.path(), Some(5));
        let jsonl = RunFolder::new(dir.path()).metrics_jsonl();
        let rows = std::fs::read_to_string(&jsonl).unwrap();
        // The file emptied, or cut after its second row.
        let kept: String =
            if emptied { String::new() } else { rows.lines().take(2).map(|l| format!("{l}\n")).collect() };
        std::fs::write(&jsonl, kept).unwrap();
        let e = try_train(&text, dir.path(), None).unwrap_err().to_string();
        let missing = if emptied { "steps 1-4" } else { "steps 3-4" };
        assert!(e.contains("metrics.jsonl") && e.contains(missing) && e.contains("missing"), "{e}");
        assert!(!RunFolder::new(dir.path()).is_finished());
    }
}

/// Noisy counts are released clamped to [0, n] (n is public; post-processing is free): a small
/// training set with a large count noise printed "~-417 of 1400" and "~1936 of 450" before.
#[test]
fn noisy_counts_are_released_within_zero_and_n() {
    let privacy = "method = \"filtered\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 3";
    let rest = "lr = 1.0\nseed = 3\nmax_steps = 12\n[release]\nactive_count = \"noisy\"\nactive_count_sigma = 5000.0\n\
                active_count_every = 1\n[stopping]\nrule = \"best-train-accuracy\"\nevery = 1\nsigma = 5000.0";
    let text = fixture_config("clamped", "logistic", (60, 50), privacy, rest);
    let dir = tempfile::tempdir().unwrap();
    train(&text, dir.path(), None);
    let rows = common::metrics(dir.path());
    let counts: Vec<f64> = rows.iter().filter_map(|r| r.active_count_noisy).collect();
    let accuracies: Vec<f64> = rows.iter().filter_map(|r| r.train_accuracy_noisy).collect();
    assert!(counts.len() == 12 && !accuracies.is_empty());
    assert!(counts.iter().all(|c| (0.0..=60.0).contains(c)), "{counts:?}");
    assert!(accuracies.iter().all(|a| (0.0..=1.0).contains(a)), "{accuracies:?}");
    assert!(counts.iter().any(|&c| c == 0.0 || c == 60.0), "noise of std 5000 leaves [0, 60]: {counts:?}");
}
