//! `dpgd account filter`, `odometer` and `compare`: what a filter or an odometer allows, round by
//! round, and their curves side by side.

use anyhow::{Context, Result};
use dpgd_accounting::decimal::Decimal;
use dpgd_accounting::filter::{
    BasicFilter, DpSums, FzFilter, RogersFilter, SumsFilter, WhitehouseFilter, rounds_allowed, rounds_allowed_typed,
};
use dpgd_accounting::odometer::{FilterOdometer, MixtureOdometer, PrivacyOdometer, RogersOdometer, StitchedOdometer};
use serde_json::{Value, json};

use super::{CompareArgs, FilterArgs, FilterKind, OdometerArgs, OdometerKind};

/// The filter rule of `kind` for target (ε, δ); pure mechanisms, so δ″ = 0.
pub(crate) fn filter_rule(kind: FilterKind, epsilon: f64, delta: f64) -> Result<Box<dyn SumsFilter>> {
    Ok(match kind {
        FilterKind::Basic => Box::new(BasicFilter::new(epsilon, delta)?),
        FilterKind::Rogers => Box::new(RogersFilter::new(epsilon, delta)?),
        FilterKind::Fz => Box::new(FzFilter::printed(epsilon, delta)?),
        FilterKind::FzCks => Box::new(FzFilter::cks(epsilon, delta)?),
        FilterKind::Whitehouse => Box::new(WhitehouseFilter::new(epsilon, delta, 0.0)?),
    })
}

fn kind_name<T: clap::ValueEnum>(k: T) -> String {
    k.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
}

/// Rounds of a typed per-round ε₀ a filter allows: summed exactly ([`DpSums::repeated_typed`]),
/// and compared exactly with the typed target by basic composition; the other rules take the
/// floats just below the typed target.
pub(super) fn filter(a: &FilterArgs) -> Result<Value> {
    let rule: Box<dyn SumsFilter> = match a.kind {
        FilterKind::Basic => Box::new(BasicFilter::typed(a.epsilon, a.delta)?),
        kind => filter_rule(kind, a.epsilon.to_f64_down(), a.delta.to_f64_down())?,
    };
    let rounds = rounds_allowed_typed(rule.as_ref(), a.per_round)?;
    Ok(json!({
        "command": "filter", "kind": kind_name(a.kind), "epsilon": a.epsilon.to_f64_nearest(),
        "delta": a.delta.to_f64_nearest(), "per_round": a.per_round.to_f64_nearest(), "rounds": rounds,
    }))
}

/// The odometer of `kind` at level δ (pure mechanisms: δ′ = δ, δ″ = 0).
pub(crate) fn odometer_rule(a: &OdometerArgs) -> Result<Box<dyn PrivacyOdometer>> {
    let need = |name: &str| anyhow::anyhow!("--{name} is required for --kind {}", kind_name(a.kind));
    Ok(match a.kind {
        OdometerKind::Rogers => {
            Box::new(RogersOdometer::new(a.dataset_size.ok_or_else(|| need("dataset-size"))?, a.delta, 0.0)?)
        }
        OdometerKind::Filter => {
            Box::new(FilterOdometer::new(a.target_epsilon.ok_or_else(|| need("target-epsilon"))?, a.delta, 0.0)?)
        }
        OdometerKind::Mixture => match (a.gamma, a.target_epsilon) {
            (Some(g), _) => Box::new(MixtureOdometer::new(g, a.delta, 0.0)?),
            (None, Some(e)) => {
                // tight where the advanced-composition curve √(2LV) + V/2 reaches the target
                let y = FilterOdometer::new(e, a.delta, 0.0)?.y_star();
                Box::new(MixtureOdometer::tight_at(y, a.delta, 0.0)?)
            }
            (None, None) => return Err(need("gamma (or --target-epsilon)")),
        },
        OdometerKind::Stitched => Box::new(StitchedOdometer::new(a.v0.ok_or_else(|| need("v0"))?, a.delta, 0.0)?),
    })
}

pub(super) fn odometer(a: &OdometerArgs) -> Result<Value> {
    let rule = odometer_rule(a)?;
    let sums = DpSums::default().repeated_typed(a.per_round, Decimal::ZERO, a.rounds)?;
    Ok(json!({
        "command": "odometer", "kind": kind_name(a.kind), "per_round": a.per_round.to_f64_nearest(), "rounds": a.rounds,
        "delta": a.delta, "target_epsilon": a.target_epsilon, "gamma": a.gamma, "v0": a.v0,
        "dataset_size": a.dataset_size, "intrinsic_time": sums.eps2, "bound": rule.bound(&sums),
    }))
}

/// The most rounds `--series` prints (one line each).
const MAX_SERIES_ROUNDS: u64 = 10_000_000;

pub(super) fn odometer_series(a: &OdometerArgs) -> Result<()> {
    if a.rounds > MAX_SERIES_ROUNDS {
        anyhow::bail!("--series prints one line per round: --rounds {} is more than {MAX_SERIES_ROUNDS}", a.rounds);
    }
    let rule = odometer_rule(a)?;
    println!("round,bound");
    let mut s = DpSums::default();
    for r in 1..=a.rounds {
        s = s.repeated_typed(a.per_round, Decimal::ZERO, 1)?;
        println!("{r},{}", rule.bound(&s).map_or(String::new(), |b| b.to_string()));
    }
    Ok(())
}

pub(super) fn compare(a: &CompareArgs) -> Result<Value> {
    use dpgd::plot::{Panel, SeriesLabelPosition, YRange, line_charts};
    if a.out.exists() && !a.out.is_dir() {
        anyhow::bail!(
            "--out {}: exists and is not a folder; give a folder for filters.png and odometers.png",
            a.out.display()
        );
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("--out {}", a.out.display()))?;
    let (filter_series, odo_series) = (filter_curves(a)?, odometer_curves(a)?);
    let chart = |name: &str, title: String, x: &str, y: &str, series, legend| -> Result<std::path::PathBuf> {
        let path = a.out.join(name);
        line_charts(
            &path,
            &[Panel {
                title,
                x_label: x.into(),
                y_label: y.into(),
                series,
                markers: vec![],
                y_range: YRange::All,
                legend,
            }],
        )?;
        Ok(path)
    };
    let filters = chart(
        "filters.png",
        format!("rounds allowed by each filter at ({}, {})-DP", a.epsilon, a.delta),
        "log10 per-round epsilon",
        "log10 rounds allowed",
        filter_series,
        SeriesLabelPosition::UpperRight,
    )?;
    let odometers = chart(
        "odometers.png",
        format!("odometer bounds, {}-DP rounds, delta = {}", a.per_round.to_f64_nearest(), a.delta),
        "rounds",
        "bound on privacy loss",
        odo_series,
        SeriesLabelPosition::UpperLeft,
    )?;
    Ok(json!({
        "command": "compare", "epsilon": a.epsilon, "delta": a.delta, "per_round": a.per_round.to_f64_nearest(),
        "dataset_size": a.dataset_size, "filters_plot": filters, "odometers_plot": odometers,
    }))
}

/// Rounds each filter allows against the per-round ε (log-log), for `account compare`.
fn filter_curves(a: &CompareArgs) -> Result<Vec<dpgd::plot::Series>> {
    use clap::ValueEnum;
    use dpgd::plot::Series;
    let eps0s: Vec<f64> = (0..=40).map(|i| 10f64.powf(-3.0 + 2.5 * f64::from(i) / 40.0)).collect();
    let mut filter_series = Vec::new();
    for kind in FilterKind::value_variants() {
        let rule = filter_rule(*kind, a.epsilon, a.delta)?;
        let mut pts = Vec::new();
        for &e0 in &eps0s {
            if let Some(r) = rounds_allowed(rule.as_ref(), e0)?.filter(|&r| r > 0) {
                pts.push((e0.log10(), (r as f64).log10()));
            }
        }
        filter_series.push(Series { label: kind_name(*kind), points: pts });
    }
    Ok(filter_series)
}

/// Each odometer's bound against the rounds run, for `account compare`.
fn odometer_curves(a: &CompareArgs) -> Result<Vec<dpgd::plot::Series>> {
    use clap::ValueEnum;
    use dpgd::plot::Series;
    let per_round = a.per_round.to_f64_nearest();
    let max_rounds = (4.0 / (per_round * per_round)) as u64;
    let mut odo_series = Vec::new();
    for kind in OdometerKind::value_variants() {
        let args = OdometerArgs {
            kind: *kind,
            per_round: a.per_round,
            rounds: max_rounds,
            delta: a.delta,
            target_epsilon: Some(a.epsilon),
            gamma: None,
            v0: Some(per_round * per_round * 10.0),
            dataset_size: Some(a.dataset_size),
            series: false,
            json: false,
        };
        let rule = odometer_rule(&args)?;
        let mut pts = Vec::new();
        for r in (1..=200u64).map(|i| i * max_rounds / 200) {
            if let Some(b) = rule.bound(&DpSums::default().repeated_typed(a.per_round, Decimal::ZERO, r)?) {
                pts.push((r as f64, b));
            }
        }
        odo_series.push(Series { label: kind_name(*kind), points: pts });
    }
    Ok(odo_series)
}
