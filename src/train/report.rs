//! `privacy.json` and the one-line guarantee of a validated run: what its method's accounting
//! says, with everything else the run's settings add (not private and why, the tiers, the
//! neighbouring relation, the noise, what the normalisation rests on).

use super::config::ValidConfig;
use super::privacy::{
    LedgerReport, NeighboursReport, NoiseReport, PersonalizedReport, PrivacyReport, RunSession, significant,
};
use crate::error::Result;
use crate::noise::NoiseSampler;

/// What each tier's guarantee rests on, for `privacy.json`.
const PERSONALIZED_RESTS_ON: &str = "personalized differential privacy (Jorgensen, Yu & Cormode 2015): each training \
     example is (its tier's guaranteed epsilon, delta)-DP with respect to its own record under the run's neighbouring \
     relation. The run's noise is calibrated for privacy.epsilon at worst_case_steps; each \
     tier's ledger budget is the largest whose guarantee -- training at that budget composed with every noisy count \
     the run releases, each charged to every example -- converts to at most the tier's epsilon by the run's own \
     conversion, rounded up. The individual filter's guarantee is per example (Feldman & Zrnic 2021, Thm 4.5; for \
     full-batch GD the individual Gaussian-DP filter of Koskela, Tobaben & Honkela 2023), so it holds with a budget \
     per example. It assumes, as personalized DP does, that which example holds which tier is the individuals' own \
     public choice and not their data: it holds against an adversary who knows the assignment, and neighbouring \
     datasets keep every example's tier. dpgd does not publish the assignment or any exact count of how many examples \
     hold each tier; a released noisy active count reveals tier sizes approximately (a strict tier's examples stop \
     together at its budget), which the assumption allows";

/// The one-line guarantee of `cfg` (or why it is not private).
#[must_use]
pub fn summary(cfg: &ValidConfig) -> String {
    let p = &cfg.config().privacy;
    let why = cfg.non_private_reasons();
    if !why.is_empty() {
        return format!("NOT PRIVATE: {}", why.join("; "));
    }
    let Some(accounting) = cfg.accounting() else { return "NOT PRIVATE".into() };
    let (via, neighbours) = (accounting.via(p.conversion), accounting.neighbours(cfg));
    let delta = if p.delta < 1e-3 { format!("{:e}", p.delta) } else { p.delta.to_string() };
    let mut line = format!(
        "({}, {delta})-DP via {via} under {neighbours} neighbours",
        cfg.epsilon().map_or("?".into(), significant)
    );
    if !cfg.tiers().is_empty() {
        let tiers: Vec<String> = cfg
            .tiers()
            .iter()
            .map(|t| format!("epsilon {}: ({}, {delta})-DP", t.epsilon, significant(t.guaranteed_epsilon)))
            .collect();
        line += &format!("; with personalized budgets, each example at its own: {}", tiers.join(", "));
    }
    line
}

/// Builds `privacy.json` for a run of `cfg` on `examples` training examples after `steps_run`
/// steps.
///
/// # Errors
/// If the guarantee cannot be recomputed (never for a validated config).
pub fn report(
    cfg: &ValidConfig,
    session: Option<&RunSession>,
    examples: usize,
    steps_run: usize,
) -> Result<PrivacyReport> {
    let c = cfg.config();
    let p = &c.privacy;
    let why = cfg.non_private_reasons();
    let seed = cfg.noise_seed();
    let mut accounting = match cfg.accounting() {
        Some(a) => a.report(cfg, session, examples, steps_run)?,
        None => None,
    };
    if let Some(a) = accounting.as_mut().filter(|_| !cfg.tiers().is_empty()) {
        a.rests_on.insert(
            "personalized".into(),
            "with personalized budgets, `epsilon` is the loosest tier's (what holds for every example; each tier's \
             is in `personalized.tiers`), while `mu`, `rho`, the event and the training figures are those of an \
             example whose budget is the one privacy.epsilon calibrates (`ledger.budget_per_example`)"
                .into(),
        );
    }
    if let Some(a) = accounting.as_mut() {
        a.rests_on.insert("normalisation".into(), normalisation_rests_on(&c.data));
    }
    let private = why.is_empty() && accounting.is_some();
    Ok(PrivacyReport {
        private,
        not_private_because: why,
        summary: summary(cfg),
        method: p.method,
        epsilon: if private { cfg.epsilon() } else { None },
        delta: p.delta,
        conversion: p.conversion,
        neighbours: NeighboursReport { relation: p.neighbours, meaning: p.neighbours.describe().to_string() },
        noise: NoiseReport {
            sampler: p.noise,
            seeded: seed.is_fixed(),
            seed: c.train.seed,
            source: format!("{}; {}", p.noise.describe(), seed.describe()),
            floating_point: floating_point_note(p.noise),
        },
        accounting,
        ledger: LedgerReport { examples, budget_per_example: cfg.ledger_budget(), unit: cfg.ledger_unit() },
        on_nonfinite: p.on_nonfinite,
        active_count: c.release.active_count,
        steps_run,
        test_accuracy_note: "test accuracy is measured on the held-out test set, not on the training data the \
                             guarantee protects"
            .into(),
        personalized: (!cfg.tiers().is_empty())
            .then(|| PersonalizedReport { tiers: cfg.tiers().to_vec(), rests_on: PERSONALIZED_RESTS_ON.into() }),
    })
}

/// What the input normalisation (published in `config.toml` and the model) is computed from.
fn normalisation_rests_on(data: &super::config::DataConfig) -> String {
    if data.normalize.is_some() {
        return "the inputs are normalised by data.normalize as the config gives it: constants the guarantee treats \
                as public (they must not come from the training data)"
            .into();
    }
    if data.features.is_some() {
        return "the feature transform's outputs are normalised by the transform itself, per example: no statistic \
                of any data"
            .into();
    }
    "without data.normalize, the inputs are normalised by a known dataset's published constants where the test \
     images are that dataset's (MNIST, Fashion-MNIST), else by the exact mean and std of the test split (for CSV data, \
     of each feature column of test.csv), published in config.toml and the model: dpgd treats the test split as \
     public, not private (as it does test accuracy); give data.normalize if the test split is private"
        .into()
}

/// The floating-point caveat of the sampler, for `privacy.json`.
fn floating_point_note(sampler: NoiseSampler) -> String {
    match sampler {
        NoiseSampler::Gaussian => "the clipped sum is exact (integers on a grid, converted to f64 exactly), and \
             Gaussian noise is sampled and added in f64: the low-order bits of floating-point Gaussian samples are \
             not exactly Gaussian, which can leak beyond the stated epsilon (Mironov 2012; Jin et al. 2022); use \
             privacy.noise = \"discrete-gaussian\" for noise that is exact"
            .into(),
        NoiseSampler::DiscreteGaussian => "exact: the clipped sum and the discrete Gaussian noise are integers on a \
             grid (Canonne, Kamath & Steinke 2020); only the released update is rounded to f32, after the noise"
            .into(),
    }
}
