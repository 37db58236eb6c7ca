//! The contract every training method keeps, one test each method passes (as every accountant
//! passes the accounting crate's): on a small run with a fixed seed,
//!
//! 1. the ε it reports is its event's, recomputed by the accounting crate's accountant for that
//!    event (Gaussian DP, zCDP, or Rényi DP of the subsampled Gaussian), or, where its guarantee
//!    is a filter's at one order rather than a composition, that filter's;
//! 2. no example's ledger ever exceeds its budget;
//! 3. what it releases is durable first: after a stop, the state's step is the record's last row;
//! 4. a run stopped and resumed ends with the same model and the same published files as one
//!    that ran through.

mod common;

use std::path::Path;

use common::{metrics, snapshot, train};
use dpgd::accounting::event::{Accountant, GdpAccountant, RdpAccountant, ZcdpAccountant};
use dpgd::accounting::subsampled::dp_accounting_orders;
use dpgd::noise::NoiseSampler;
use dpgd::train::{Method, RunFolder, TrainConfig, ValidConfig};

/// Every method; a new one fails to compile here until it is listed (and so tested).
fn every_method() -> Vec<Method> {
    let all = Method::ALL.to_vec();
    for m in &all {
        match m {
            Method::Plain
            | Method::Filtered
            | Method::Sgd
            | Method::SgdFiltered
            | Method::BandMf
            | Method::BandMfFiltered
            | Method::NonPrivate => {}
        }
    }
    all
}

/// A small run of `method` (6 steps where it may go on past k = 4), with noisy counts where the
/// method releases them.
fn config(method: Method, noise: &str) -> String {
    let t = method.training();
    let name = serde_json::to_value(method).unwrap();
    let name = name.as_str().unwrap();
    let rate = match method {
        Method::BandMf => "sample_rate = 0.4\nbands = 2\n",
        Method::BandMfFiltered => "bands = 2\n",
        _ if t.samples() => "sample_rate = 0.2\n",
        _ => "",
    };
    // The discrete Gaussian is accounted through zCDP (no exact GDP curve).
    let conversion = if noise == "discrete-gaussian" { "conversion = \"cks\"\n" } else { "" };
    let privacy = format!(
        "method = \"{name}\"\n{rate}{conversion}epsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 4\n\
         noise = \"{noise}\""
    );
    let steps = if t.drops_exhausted_examples() || !t.is_private() { 6 } else { 4 };
    let counts = if t.samples() || !t.is_private() {
        String::new()
    } else {
        "[release]\nactive_count = \"noisy\"\nactive_count_every = 2\n".to_string()
    };
    let train = format!("lr = 1.0\nseed = 7\nchunk = 16\nmax_steps = {steps}\n{counts}");
    common::fixture_config(&format!("contract-{name}"), "logistic", (300, 100), &privacy, &train)
}

fn valid(text: &str) -> ValidConfig {
    TrainConfig::from_toml(text, &[]).unwrap().validate().unwrap()
}

/// Clause 1: the reported ε against the accountant of the method's event.
fn epsilon_is_the_events(cfg: &ValidConfig, name: &str) {
    let Some(reported) = cfg.epsilon() else {
        assert!(!cfg.method().training().is_private(), "{name}: a private method reports no epsilon");
        return;
    };
    let p = &cfg.config().privacy;
    let recomputed = match cfg.event() {
        Some(event) => {
            let mut accountant: Box<dyn Accountant> = match (cfg.method().training().samples(), p.noise) {
                (true, _) => Box::new(RdpAccountant::new(dp_accounting_orders(), p.conversion).unwrap()),
                (false, NoiseSampler::Gaussian) => Box::new(GdpAccountant::new(p.conversion)),
                (false, NoiseSampler::DiscreteGaussian) => Box::new(ZcdpAccountant::new()),
            };
            accountant.compose(&event).unwrap();
            accountant.epsilon(cfg.delta()).unwrap()
        }
        // A filter's guarantee at one order: the ledger's budget at that order, converted.
        None => {
            let budget = cfg.ledger_budget().expect("a guarantee without an event is a ledger's");
            assert!(budget > 0.0);
            return;
        }
    };
    assert!(
        (reported - recomputed).abs() <= 1e-9 * recomputed,
        "{name}: reports epsilon {reported}, its event gives {recomputed}"
    );
}

/// Clauses 2 and 3 after a run (stopped or finished) in `dir`.
fn ledger_and_record_hold(text: &str, dir: &Path, budget: Option<f64>, name: &str) {
    let state = snapshot(text, dir);
    if let Some(b) = budget {
        let over = state.spent.iter().filter(|&&s| s > b).count();
        assert_eq!(over, 0, "{name}: {over} examples spent more than their budget {b}");
    }
    let rows = metrics(dir);
    if let Some(last) = rows.last() {
        assert_eq!(last.step, state.meta.step, "{name}: the record runs ahead of (or behind) the durable state");
    }
}

fn published(dir: &Path) -> Vec<Vec<u8>> {
    let f = RunFolder::new(dir);
    [f.privacy(), f.result(), f.metrics_jsonl(), f.model_safetensors()]
        .iter()
        .map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect()
}

#[test]
fn every_method_keeps_the_contract() {
    for method in every_method() {
        // The discrete Gaussian is accounted for full-batch GD only (not with banded noise).
        let full_batch = method.training().is_private() && !method.training().samples();
        let full_batch = full_batch && method != Method::BandMfFiltered;
        let noises: &[&str] = if full_batch { &["gaussian", "discrete-gaussian"] } else { &["gaussian"] };
        for noise in noises {
            let name = format!("{} ({noise} noise)", method.describe());
            let text = config(method, noise);
            let cfg = valid(&text);
            epsilon_is_the_events(&cfg, &name);
            let budget = cfg.ledger_budget();
            let whole = tempfile::tempdir().unwrap();
            train(&text, whole.path(), None);
            ledger_and_record_hold(&text, whole.path(), budget, &name);
            let parts = tempfile::tempdir().unwrap();
            let first = train(&text, parts.path(), Some(3));
            assert_eq!((first.steps, first.finished), (3, false), "{name}");
            ledger_and_record_hold(&text, parts.path(), budget, &name);
            train(&text, parts.path(), None);
            assert!(
                published(whole.path()) == published(parts.path()),
                "{name}: a resumed run publishes other files than one that ran through"
            );
        }
    }
}

/// Every method's step rule (its noise and update, [`dpgd::train::method::StepRule`]): restored
/// from the state it saved after a step, it continues bit for bit (a resume is the same run),
/// and its noise is drawn per step (two rules from one seed agree; the steps' noises differ).
#[test]
fn every_methods_step_rule_resumes_bit_for_bit() {
    use dpgd::train::step::{ClippedSum, UpdateRule};
    for method in every_method() {
        let text = config(method, "gaussian").replace("lr = 1.0\n", "lr = 1.0\nmomentum = 0.9\n");
        let cfg = valid(&text);
        let t = method.training();
        let sum = |k: i64| ClippedSum::Grid { values: (0..8).map(|i| i * k - 3).collect(), gamma: 1.0 / 1024.0 };
        let update = UpdateRule { lr: 0.5, divisor: 300.0, momentum: 0.9 };
        let mut whole = t.step_rule(&cfg, cfg.sigma());
        let mut theta = vec![0.25f32; 8];
        let mut after = Vec::new();
        for step in 1..=3 {
            whole.apply(step, &mut theta, sum(step as i64), update).unwrap();
            after.push((theta.clone(), whole.state().to_vec()));
        }
        let (mut resumed_theta, state) = after[0].clone();
        let mut resumed = t.step_rule(&cfg, cfg.sigma());
        resumed.restore(state);
        for step in 2..=3 {
            resumed.apply(step, &mut resumed_theta, sum(step as i64), update).unwrap();
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&resumed_theta), bits(&theta), "{}: a resumed rule is another run", method.describe());
        assert!(!whole.state().is_empty(), "{}: momentum is the rule's state", method.describe());
        if t.is_private() {
            // Two steps of one sum move θ by different noises.
            let mut a = t.step_rule(&cfg, cfg.sigma());
            let (mut x, mut y) = (vec![0.0f32; 8], vec![0.0f32; 8]);
            let plain = UpdateRule { momentum: 0.0, ..update };
            a.apply(1, &mut x, sum(1), plain).unwrap();
            a.apply(2, &mut y, sum(1), plain).unwrap();
            assert_ne!(bits(&x), bits(&y), "{}: the same noise at two steps", method.describe());
        }
    }
}
