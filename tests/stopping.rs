//! The adaptive stopping rule of 001 §5.1 and the plain-GD prefix: plain private GD is
//! exactly the first B_norm/C² steps of filtered GD with the same σ; the training-accuracy
//! queries are charged to the run's privacy session and counted in its ε; the best released
//! model is returned, checkpointed and restored on resume.

mod common;

use common::{metrics, result, snapshot, train};
use dpgd::train::TrainConfig;

fn config(method: &str, privacy: &str, extra: &str) -> String {
    let privacy = format!("method = \"{method}\"\n{privacy}\ndelta = 1e-5\nclip = 1.0\nsteps = 10");
    let train = format!("lr = 2.0\nseed = 5\neval_every = 2\nchunk = 8\n{extra}");
    common::fixture_config(&format!("stopping-{method}"), "opacus-cnn", (1000, 500), &privacy, &train)
}

const STOP: &str = "max_steps = 18\n[stopping]\nrule = \"best-train-accuracy\"\nevery = 2\nsigma = 20.0\n";

#[test]
fn plain_gd_is_the_first_k_steps_of_filtered_gd() {
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = train(&config("plain", "sigma = 3.0", ""), plain_dir.path(), None);
    let filtered_dir = tempfile::tempdir().unwrap();
    let filtered = train(&config("filtered", "sigma = 3.0", "max_steps = 16"), filtered_dir.path(), None);
    // Up to step k no example can run out of budget, so the clipped sums, the noise and the
    // parameters are identical, and so is the test accuracy after k steps.
    assert_eq!(result(&filtered).test_accuracy_at_k, Some(result(&plain).test_accuracy));
    assert_eq!(result(&plain).test_accuracy_at_k, Some(result(&plain).test_accuracy));
    // The filtered run's state after exactly k steps (the state is saved every step).
    let at_k = tempfile::tempdir().unwrap();
    let filtered_text = config("filtered", "sigma = 3.0", "max_steps = 16");
    assert_eq!(train(&filtered_text, at_k.path(), Some(10)).steps, 10);
    let a = snapshot(&config("plain", "sigma = 3.0", ""), plain_dir.path());
    let b = snapshot(&filtered_text, at_k.path());
    assert_eq!((a.meta.step, b.meta.step), (10, 10));
    assert_eq!(a.theta, b.theta, "the parameters after k steps differ");
    assert_eq!(a.spent, b.spent, "the ledgers after k steps differ");
    assert_eq!(filtered.steps, 16);
}

#[test]
fn lr_after_k_changes_only_the_steps_after_k() {
    let every_step = |extra: &str| config("filtered", "sigma = 3.0", &format!("max_steps = 16\n{extra}"));
    let theta_after = |text: &str, steps: usize| {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(train(text, dir.path(), Some(steps)).steps, steps);
        snapshot(text, dir.path()).theta
    };
    // train.lr after k, given (a config that leaves the stopping noise to the budget would take
    // a quarter of it by default).
    let (same, slow) = (every_step("lr_after_k = 2.0"), every_step("lr_after_k = 0.5"));
    let at_k = theta_after(&same, 10);
    assert_eq!(theta_after(&slow, 10), at_k, "lr_after_k changed the plain-GD prefix");
    // Step 11 sees the same parameters, ledger, clipped sum and noise in both runs: only the
    // learning rate differs (0.5 instead of 2.0), so the update is a quarter as long.
    let (next, slow_next) = (theta_after(&same, 11), theta_after(&slow, 11));
    let mut moved = 0;
    for ((k, a), b) in at_k.iter().zip(&next).zip(&slow_next) {
        let (full, quarter) = (a - k, b - k);
        assert!((quarter - 0.25 * full).abs() <= 1e-3 * full.abs() + 1e-6, "update {quarter} vs {full} / 4");
        moved += usize::from(full != 0.0);
    }
    assert!(moved > at_k.len() / 2, "step 11 moved only {moved} parameters");
}

#[test]
fn the_stopping_rule_is_accounted_and_returns_the_best_released_model() {
    let dir = tempfile::tempdir().unwrap();
    let s = train(&config("filtered", "epsilon = 4.0", STOP), dir.path(), None);
    let p = s.privacy.as_ref().unwrap().accounting.clone().unwrap();
    // Queries after steps 10, 12, …, 18: five noisy counts of std 20, each 1/(2·20²)-zCDP.
    assert_eq!(p.releases.len(), 1);
    assert_eq!(p.releases[0].mechanism.name(), "train-accuracy");
    assert_eq!(p.releases[0].scheduled, 5);
    let charged = &p.session.as_ref().unwrap().charged_rho;
    assert!((charged["train-accuracy"] - 5.0 / 800.0).abs() < 1e-15);
    assert!((charged["training"] + 5.0 / 800.0 - p.rho.unwrap()).abs() < 1e-12);
    let eps = p.epsilon.unwrap();
    assert!(eps <= 4.0 + 1e-9 && eps > 4.0 - 1e-6, "the budget is used: {eps}");
    // σ pays for the queries: larger than without them.
    let no_queries = "max_steps = 18\n[stopping]\nrule = \"max-steps\"\n";
    let without =
        TrainConfig::from_toml(&config("filtered", "epsilon = 4.0", no_queries), &[]).unwrap().validate().unwrap();
    assert!(p.training.sigma > without.sigma().unwrap());
    // The released accuracies appear at exactly the query steps; the returned model is the
    // first step with the highest one, and its test accuracy is the one recorded there.
    let rows = metrics(dir.path());
    let released: Vec<(usize, f64)> = rows.iter().filter_map(|r| r.train_accuracy_noisy.map(|a| (r.step, a))).collect();
    assert_eq!(released.iter().map(|r| r.0).collect::<Vec<_>>(), vec![10, 12, 14, 16, 18]);
    let best = released.iter().fold(released[0], |b, &r| if r.1 > b.1 { r } else { b });
    let r = result(&s);
    assert_eq!(r.selected_step, best.0);
    let recorded = rows[best.0 - 1].test_accuracy.unwrap();
    assert!((r.test_accuracy - recorded).abs() < 1e-6, "{} vs {recorded}", r.test_accuracy);
}

#[test]
fn patience_stops_early_and_a_resumed_run_keeps_the_best_model() {
    let text = config("filtered", "epsilon = 4.0", &format!("{STOP}patience = 1\n"));
    let whole = tempfile::tempdir().unwrap();
    let a = train(&text, whole.path(), None);
    let rows = metrics(whole.path());
    let released: Vec<f64> = rows.iter().filter_map(|r| r.train_accuracy_noisy).collect();
    // It stops at the first query that is not a new best (or runs to the end).
    let first_stale = released.windows(2).position(|w| w[1] <= w[0]).map(|i| 10 + 2 * (i + 1));
    assert_eq!(a.steps, first_stale.unwrap_or(18));
    // Stopping early does not lower the guarantee: every scheduled query was paid for.
    let no_patience = tempfile::tempdir().unwrap();
    let full = train(&config("filtered", "epsilon = 4.0", STOP), no_patience.path(), None);
    assert_eq!(
        a.privacy.as_ref().unwrap().accounting.as_ref().unwrap().epsilon,
        full.privacy.as_ref().unwrap().accounting.as_ref().unwrap().epsilon
    );
    // Interrupted after the first query and resumed: the same run, the same choice.
    let parts = tempfile::tempdir().unwrap();
    assert_eq!(train(&text, parts.path(), Some(11)).steps, 11);
    let b = train(&text, parts.path(), None);
    assert_eq!(result(&a), result(&b));
}

#[test]
fn bad_stopping_settings_name_the_field() {
    for (text, want) in [
        (config("plain", "epsilon = 4.0", "[stopping]\nrule = \"best-train-accuracy\"\n"), "stopping.rule"),
        (config("filtered", "epsilon = 4.0", &STOP.replace("sigma = 20.0", "sigma = 0.0")), "stopping.sigma"),
        (config("filtered", "epsilon = 4.0", &STOP.replace("every = 2", "every = 0")), "stopping.every"),
        (config("filtered", "epsilon = 0.01", &STOP.replace("sigma = 20.0", "sigma = 1.0")), "release"),
        (config("filtered", "epsilon = 4.0", &STOP.replace("rule =", "rules =")), "rules"),
        (config("plain", "epsilon = 4.0", "lr_after_k = 1.0"), "train.lr_after_k"),
        (config("filtered", "epsilon = 4.0", "max_steps = 16\nlr_after_k = 0.0"), "train.lr_after_k"),
    ] {
        let e = TrainConfig::from_toml(&text, &[]).and_then(|c| c.validate().map(|_| ())).unwrap_err().to_string();
        assert!(e.contains(want), "expected `{want}` in: {e}");
    }
}

#[test]
fn a_filtered_run_returns_its_best_released_model_by_default() {
    let filtered = TrainConfig::from_toml(&config("filtered", "sigma = 3.0", "max_steps = 16"), &[]).unwrap();
    assert_eq!(filtered.stopping.rule, Some(dpgd::train::StopRule::BestTrainAccuracy), "resolved and written out");
    let plain = TrainConfig::from_toml(&config("plain", "sigma = 3.0", ""), &[]).unwrap();
    assert_eq!(plain.stopping.rule, Some(dpgd::train::StopRule::MaxSteps));
    let dir = tempfile::tempdir().unwrap();
    let s = train(&config("filtered", "epsilon = 4.0", "max_steps = 18"), dir.path(), None);
    assert!(metrics(dir.path()).iter().any(|r| r.train_accuracy_noisy.is_some()), "the rule's queries were made");
    let recorded = std::fs::read_to_string(dir.path().join("publishable/config.toml")).unwrap();
    assert!(recorded.contains("rule = \"best-train-accuracy\""), "{recorded}");
    assert!(result(&s).selected_step >= 10);
}

/// Collects the run's warnings.
#[derive(Default)]
struct Warnings(Vec<dpgd::train::Warning>);

impl dpgd::train::Observer for Warnings {
    fn warning(&mut self, w: &dpgd::train::Warning) {
        self.0.push(w.clone());
    }
}

/// With a clip far below every gradient's norm each example spends C² per step, so all of
/// them run out at step k and the noisy active count collapses: the operator is warned once,
/// and told whether the best model is already returned.
#[test]
fn a_collapsed_active_count_is_warned_about_with_advice_that_fits_the_rule() {
    use dpgd::data::Dataset;
    use dpgd::train::{RunOptions, TrainConfig, Warning, run};
    let release = "[release]\nactive_count = \"noisy\"\nactive_count_sigma = 5.0\nactive_count_every = 2\n";
    for (stop, best) in
        [(STOP.replace("max_steps = 18\n", ""), true), ("[stopping]\nrule = \"max-steps\"\n".into(), false)]
    {
        let text = config("filtered", "sigma = 3.0", &format!("max_steps = 18\n{release}{stop}"))
            .replace("clip = 1.0", "clip = 0.001");
        let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
        let data = Dataset::load(&cfg.config().data.dir, Some(10)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut seen = Warnings::default();
        run(&cfg, &data, dir.path(), &RunOptions::default(), &mut seen).unwrap();
        let collapsed: Vec<_> = seen.0.iter().filter(|w| matches!(w, Warning::ActiveCollapsed { .. })).collect();
        assert_eq!(collapsed.len(), 1, "{:?}", seen.0);
        let Warning::ActiveCollapsed { step, returns_best, .. } = collapsed[0] else { unreachable!() };
        assert!(*step >= 10, "warned at step {step}, before k");
        assert_eq!(*returns_best, best);
    }
}
