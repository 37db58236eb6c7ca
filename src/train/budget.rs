//! The per-example budget report: how much of its privacy budget each training example spent,
//! how many ran out and when — individual accounting made visible to the data owner.
//!
//! **Confidential.** Every number here is an exact statistic of the training data (which
//! examples are hard, how many were still training at each step). It lives in
//! `confidential/budget.json` and `budget.png`, never among the publishable files.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::config::ValidConfig;
use super::folder::RunFolder;
use super::outputs::ConfidentialRow;
use super::state::{self, Expect};
use super::tiers::Tier;
use crate::accounting::filter::{Budgets, IndividualFilter};
use crate::data::Fingerprint;
use crate::error::{Error, Result};
use crate::plot::{Panel, Series, SeriesLabelPosition, YRange, line_charts};
use sha2::{Digest, Sha256};

/// Bins of the spent-fraction histogram.
const BINS: usize = 20;

/// `confidential/budget.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetReport {
    /// What this file is.
    pub notice: String,
    /// Training examples.
    pub examples: usize,
    /// The per-example budget in the ledger's units (B_norm for GD: a squared clipped gradient
    /// norm); with personalized budgets, the largest tier's.
    pub budget_per_example: f64,
    /// Steps completed.
    pub steps: usize,
    /// Examples whose budget is spent.
    pub exhausted: usize,
    /// Quantiles of the spent fraction (0 = none spent, 1 = all): min, 10 %, median, 90 %, max.
    pub spent_fraction_quantiles: [f64; 5],
    /// Histogram of the spent fraction over [0, 1] in 20 equal bins (the last one holds 1).
    pub spent_fraction_histogram: Vec<usize>,
    /// Per step: how many examples had run out of budget before it (from the exact active
    /// counts of `steps.jsonl`).
    pub exhausted_before_step: Vec<(usize, usize)>,
    /// With personalized budgets (`privacy.budgets`): each tier's examples and their spending
    /// against their own budget, in the tiers' order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<TierSpending>,
}

/// How one tier of personalized budgets spent them (confidential: exact counts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierSpending {
    /// The tier's ε.
    pub epsilon: f64,
    /// Its examples' budget.
    pub budget: f64,
    /// How many training examples hold it.
    pub examples: usize,
    /// How many of them spent it all.
    pub exhausted: usize,
    /// Their median spent fraction of their own budget.
    pub median_spent_fraction: f64,
}

/// The budget report of the run of `cfg` in `folder`, from its saved training state, its
/// confidential step records and (with personalized budgets) its assignment of tiers.
///
/// # Errors
/// A folder without a training state, unreadable records, or an unreadable assignment.
pub fn report(folder: &RunFolder, cfg: &ValidConfig, params: usize) -> Result<BudgetReport> {
    let spent = spent(folder, params, cfg.max_steps())?;
    let steps: Vec<ConfidentialRow> = std::fs::read_to_string(folder.steps())
        .map(|t| t.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
        .unwrap_or_default();
    let budgets = match cfg.tiers() {
        [] => Budgets::uniform(spent.budget)?,
        _ => ledger_budgets(cfg, spent.spent.len())?.0,
    };
    let ledger = IndividualFilter::from_spent_with(budgets, spent.spent)
        .map_err(|e| Error::RunState { path: folder.state(), message: format!("its ledger is invalid: {e}") })?;
    Ok(summarise(&examples_only(cfg, &ledger)?, cfg.tiers(), spent.step, &steps))
}

/// The ledger of the run's own training examples: `ledger` without an audit's input canaries,
/// the rows after them (the whole ledger without).
///
/// # Errors
/// [`Error::State`]: a ledger shorter than the canaries.
pub(crate) fn examples_only(cfg: &ValidConfig, ledger: &IndividualFilter) -> Result<IndividualFilter> {
    let real = real_examples(cfg, ledger.len())?;
    let spent = ledger.spent_all()[..real].to_vec();
    Ok(IndividualFilter::from_spent_with(ledger.budgets().slice(0..real), spent)?)
}

/// The run's own examples among its `n` training rows: those before an audit's input canaries.
fn real_examples(cfg: &ValidConfig, n: usize) -> Result<usize> {
    n.checked_sub(cfg.input_canaries()).ok_or_else(|| {
        Error::State(format!("{n} training rows for {} input canaries (audit.input_canaries)", cfg.input_canaries()))
    })
}

/// Every training example's spent budget in a run's saved state, in the run's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Spent {
    /// Steps completed.
    pub step: usize,
    /// The ledger's uniform budget (with personalized budgets, the run's base budget).
    pub budget: f64,
    /// Each example's spent budget.
    pub spent: Vec<f64>,
}

/// The spent budgets of the run in `folder` (a model of `params` parameters, up to
/// `max_steps` steps), wherever its state says the ledger is: in the state itself, or, for a
/// run on several ranks, in the shard files it names.
///
/// # Errors
/// No training state, an unreadable one, or a shard that is missing, damaged or behind it.
pub fn spent(folder: &RunFolder, params: usize, max_steps: usize) -> Result<Spent> {
    let meta = state::peek_meta(&folder.state()).ok_or_else(|| Error::RunState {
        path: folder.state(),
        message: "no training state to report on: the run has not taken a step".into(),
    })?;
    let n = meta.identity.examples;
    let snap = state::read(&folder.state(), Expect { params, examples: n, max_steps })?
        .ok_or_else(|| Error::RunState { path: folder.state(), message: "the state file is missing".into() })?;
    let (step, budget) = (snap.meta.step, snap.meta.budget);
    let spent = super::shards::assemble(folder, n, &(0..n), (&snap.spent, snap.meta.ledger_ranks), step, budget)?;
    Ok(Spent { step, budget, spent })
}

/// Every one of the run's `n` training rows' ledger budget (an audit's input canaries after its
/// examples, each its tier's), and the fingerprint of the
/// assignment (part of the run's identity: a resume with another assignment is refused). One
/// budget for all where the config has no tiers; `f64::MAX` where the method keeps no ledger
/// that stops examples (plain DP-SGD clips to C alone).
///
/// # Errors
/// As [`BudgetsConfig::assignment_by_row`](crate::train::BudgetsConfig::assignment_by_row); tiers whose budgets the accounting did not compute.
pub fn ledger_budgets(cfg: &ValidConfig, n: usize) -> Result<(Budgets, Option<Fingerprint>)> {
    let c = cfg.config();
    let uniform = cfg.ledger_budget().unwrap_or(f64::MAX);
    let Some(b) = &c.privacy.budgets else { return Ok((Budgets::uniform(uniform)?, None)) };
    let tiers = cfg.tiers();
    if tiers.len() != b.epsilons.len() {
        return Err(Error::State(format!("{} tier budgets for {} tiers", tiers.len(), b.epsilons.len())));
    }
    // The run's own examples by their rows; an audit's input canaries after them, dealt to the
    // tiers in turn (they are in no file).
    let mut of = b.assignment_by_row(&c.data, real_examples(cfg, n)?)?;
    of.extend(crate::train::input_canaries::tiers_of(cfg.input_canaries(), tiers.len()));
    let mut hash = Sha256::new();
    for t in tiers {
        hash.update(t.budget.to_le_bytes());
    }
    hash.update(&of);
    let fingerprint = Fingerprint {
        file: "privacy.budgets (each example's tier)".into(),
        sha256: crate::data::idx::hex(&hash.finalize()),
    };
    Ok((Budgets::tiered(tiers.iter().map(|t| t.budget).collect(), of)?, Some(fingerprint)))
}

/// The report from every example's ledger entry, the tiers of personalized budgets (if any)
/// and the confidential step records.
pub(crate) fn summarise(
    ledger: &IndividualFilter,
    tiers: &[Tier],
    step: usize,
    steps: &[ConfidentialRow],
) -> BudgetReport {
    let (spent, budgets) = (ledger.spent_all(), ledger.budgets());
    let n = spent.len();
    let fraction = |i: usize| (spent[i] / budgets.get(i)).clamp(0.0, 1.0);
    let mut fractions: Vec<f64> = (0..n).map(fraction).collect();
    fractions.sort_by(f64::total_cmp);
    let q = |p: f64| fractions.get(((n.saturating_sub(1)) as f64 * p).round() as usize).copied().unwrap_or(0.0);
    let mut histogram = vec![0usize; BINS];
    for &f in &fractions {
        histogram[((f * BINS as f64) as usize).min(BINS - 1)] += 1;
    }
    BudgetReport {
        notice: "CONFIDENTIAL to the data owner: exact per-example statistics of the training data, not covered \
                 by the run's guarantee; do not publish"
            .into(),
        examples: n,
        budget_per_example: ledger.budget(),
        steps: step,
        exhausted: n - ledger.active_count_non_private(),
        spent_fraction_quantiles: [q(0.0), q(0.1), q(0.5), q(0.9), q(1.0)],
        spent_fraction_histogram: histogram,
        exhausted_before_step: steps.iter().map(|r| (r.step, n.saturating_sub(r.active_exact))).collect(),
        tiers: by_tier(ledger, tiers, fraction),
    }
}

/// Each tier's examples, exhausted examples and median spent fraction, in one pass.
fn by_tier(ledger: &IndividualFilter, tiers: &[Tier], fraction: impl Fn(usize) -> f64) -> Vec<TierSpending> {
    let mut fractions: Vec<Vec<f64>> = vec![Vec::new(); tiers.len()];
    let mut exhausted = vec![0usize; tiers.len()];
    for i in 0..ledger.len() {
        let t = ledger.budgets().tier(i);
        if let (Some(f), Some(e)) = (fractions.get_mut(t), exhausted.get_mut(t)) {
            f.push(fraction(i));
            *e += usize::from(!ledger.is_active(i));
        }
    }
    tiers
        .iter()
        .zip(fractions.iter_mut().zip(exhausted))
        .map(|(tier, (f, exhausted))| {
            f.sort_by(f64::total_cmp);
            TierSpending {
                epsilon: tier.epsilon,
                budget: tier.budget,
                examples: f.len(),
                exhausted,
                median_spent_fraction: f.get(f.len() / 2).copied().unwrap_or(0.0),
            }
        })
        .collect()
}

/// Writes `budget.json` and `budget.png` into the run's `confidential/` folder.
///
/// # Errors
/// If a file cannot be written.
pub fn write(folder: &RunFolder, report: &BudgetReport) -> Result<()> {
    let text = serde_json::to_string_pretty(report).map_err(Error::serialise("budget.json"))?;
    state::atomic_write(&folder.budget(), text.as_bytes())?;
    plot(report, &folder.budget_plot())
}

fn plot(r: &BudgetReport, path: &Path) -> Result<()> {
    let width = 100.0 / BINS as f64;
    let mut hist = Vec::new();
    for (i, &c) in r.spent_fraction_histogram.iter().enumerate() {
        hist.push((i as f64 * width, c as f64));
        hist.push(((i + 1) as f64 * width, c as f64));
    }
    let panels = [
        Panel {
            title: format!(
                "CONFIDENTIAL — budget spent per example ({} examples, {} exhausted)",
                r.examples, r.exhausted
            ),
            x_label: "share of its budget an example spent (%)".into(),
            y_label: "examples".into(),
            series: vec![Series { label: String::new(), points: hist }],
            markers: vec![],
            y_range: YRange::FromZero,
            legend: SeriesLabelPosition::UpperLeft,
        },
        Panel {
            title: "CONFIDENTIAL — examples out of budget before each step".into(),
            x_label: "step".into(),
            y_label: "examples out of budget".into(),
            series: vec![Series {
                label: String::new(),
                points: r.exhausted_before_step.iter().map(|&(s, e)| (s as f64, e as f64)).collect(),
            }],
            markers: vec![],
            y_range: YRange::FromZero,
            legend: SeriesLabelPosition::UpperLeft,
        },
    ];
    line_charts(path, &panels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarises_spent_budgets() {
        let ledger = IndividualFilter::from_spent(2.0, vec![0.0, 1.0, 2.0, 2.0, 0.5]).unwrap();
        let rows = [
            ConfidentialRow { step: 1, active_exact: 5, ..Default::default() },
            ConfidentialRow { step: 2, active_exact: 3, ..Default::default() },
        ];
        let r = summarise(&ledger, &[], 2, &rows);
        assert_eq!((r.examples, r.exhausted), (5, 2));
        assert_eq!(r.spent_fraction_quantiles, [0.0, 0.0, 0.5, 1.0, 1.0]);
        assert_eq!(r.spent_fraction_histogram.iter().sum::<usize>(), 5);
        assert_eq!(r.spent_fraction_histogram[BINS - 1], 2);
        assert_eq!(r.exhausted_before_step, vec![(1, 0), (2, 2)]);
        assert!(r.tiers.is_empty());
    }

    /// With tiers, each example's fraction is of its own budget, and each tier is counted.
    #[test]
    fn summarises_each_tier_against_its_own_budget() {
        let budgets = Budgets::tiered(vec![1.0, 4.0], vec![0, 1, 1, 0]).unwrap();
        let ledger = IndividualFilter::from_spent_with(budgets, vec![1.0, 2.0, 4.0, 0.5]).unwrap();
        let tier = |epsilon, budget| Tier { epsilon, guaranteed_epsilon: epsilon, budget, worst_case_steps: None };
        let r = summarise(&ledger, &[tier(1.0, 1.0), tier(3.0, 4.0)], 3, &[]);
        assert_eq!((r.exhausted, r.budget_per_example), (2, 4.0));
        assert_eq!(r.spent_fraction_quantiles, [0.5, 0.5, 1.0, 1.0, 1.0]);
        let counts: Vec<(usize, usize, f64)> =
            r.tiers.iter().map(|t| (t.examples, t.exhausted, t.median_spent_fraction)).collect();
        assert_eq!(counts, [(2, 1, 1.0), (2, 1, 1.0)]);
    }
}
