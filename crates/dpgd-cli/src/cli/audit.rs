//! `dpgd audit`: an empirical lower bound on a configuration's ε from white-box canaries: one
//! canary over many training schedules (`--trials`), or many canaries in one (`--canaries`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use dpgd::audit::one_run::{self, OneRunSettings, audit_one_run};
use dpgd::audit::{AuditSettings, audit, plot};
use dpgd::train::canaries::GaussianFamily;
use dpgd::train::{Override, TrainConfig};

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// The training config whose privacy to audit (its privacy section and schedule).
    #[arg(long)]
    config: PathBuf,
    /// Override a config field, e.g. --set privacy.epsilon=0.5 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Remove a config field so its default applies, e.g. --unset privacy.sigma --set privacy.epsilon=2.
    #[arg(long = "unset", value_name = "KEY")]
    unset: Vec<String>,
    /// Training schedules per world (with and without the canary).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=10_000_000))]
    trials: u64,
    /// A one-run audit with this many canaries instead (Steinke, Nasr & Jagielski 2023): every
    /// method, each tier against its own epsilon.
    #[arg(long, conflicts_with = "trials", value_parser = clap::value_parser!(u64).range(2..=one_run::MAX_CANARIES as u64))]
    canaries: Option<u64>,
    /// Confidence of the lower bounds.
    #[arg(long, default_value_t = 0.95, value_parser = super::probability)]
    confidence: f64,
    /// Folder for audit.json and audit.png.
    #[arg(long, default_value = "audit")]
    out: PathBuf,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: AuditArgs) -> Result<()> {
    let unset = a.unset.iter().map(|k| Override::Unset(k.trim().to_string()));
    let set = a.overrides.iter().map(|o| Override::parse_set(o)).collect::<Result<Vec<_>, _>>()?;
    let overrides: Vec<Override> = unset.chain(set).collect();
    let cfg = TrainConfig::from_file(&a.config, &overrides)?.validate()?;
    if let Some(m) = a.canaries {
        return run_one(&a, &cfg, m as usize);
    }
    let mut settings = AuditSettings::default();
    (settings.trials, settings.confidence) = (a.trials as usize, a.confidence);
    eprintln!(
        "auditing {}: {} training schedules of {} steps in each world (white-box canary)",
        a.config.display(),
        a.trials,
        cfg.max_steps()
    );
    let report = audit(&cfg, &settings)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("--out {}", a.out.display()))?;
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(a.out.join("audit.json"), &json).with_context(|| format!("--out {}", a.out.display()))?;
    plot(&report, &a.out.join("audit.png"))?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "audited epsilon >= {:.3} assuming the mechanism is exactly Gaussian DP (Nasr et al. 2023), >= {:.3} \
             assuming nothing; {:.0}% confidence; claimed {:.3} (training mechanism alone: {:.3}) at delta = {}, {} \
             neighbours: {}",
            report.epsilon_lower_bound,
            report.epsilon_lower_bound_distribution_free,
            100.0 * report.confidence,
            report.claimed_epsilon,
            report.training_epsilon,
            report.delta,
            report.neighbours,
            if report.consistent { "consistent with the claim" } else { "THE CLAIM IS VIOLATED" }
        );
        println!(
            "  mu >= {:.4} (training mu {:.4}); the first bound converts mu through the Gaussian-DP curve, a lower \
             bound on epsilon only if the mechanism's privacy curve is exactly Gaussian",
            report.mu_lower_bound, report.training_mu
        );
        println!("  {}", a.out.join("audit.json").display());
    }
    if !report.consistent {
        anyhow::bail!(
            "the audit's lower bound exceeds the claimed epsilon: the implementation leaks more than it accounts"
        );
    }
    Ok(())
}

/// `dpgd audit --canaries M`: the one-run audit, its `audit.json` and `audit.png`.
fn run_one(a: &AuditArgs, cfg: &dpgd::train::ValidConfig, canaries: usize) -> Result<()> {
    eprintln!(
        "auditing {}: one run of {} steps with {canaries} canaries, each included with probability 1/2 (white-box)",
        a.config.display(),
        cfg.max_steps()
    );
    let mut settings = OneRunSettings::default();
    (settings.canaries, settings.confidence) = (canaries, a.confidence);
    let report = audit_one_run(cfg, &settings)?;
    std::fs::create_dir_all(&a.out).with_context(|| format!("--out {}", a.out.display()))?;
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(a.out.join("audit.json"), &json).with_context(|| format!("--out {}", a.out.display()))?;
    one_run::plot(&report, &a.out.join("audit.png"))?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        audit_lines(&report, cfg).iter().for_each(|l| println!("{l}"));
        println!("  {}", a.out.join("audit.json").display());
    }
    if !report.consistent {
        anyhow::bail!(
            "the audit's lower bound exceeds a claimed epsilon: the implementation leaks more than it accounts"
        );
    }
    Ok(())
}

/// A one-run audit in words, a few lines per group: its bound, the guesses behind it, its
/// claim, the f-DP analysis's bound, and the Gaussian model's where there is one.
pub(crate) fn audit_lines(report: &one_run::OneRunReport, cfg: &dpgd::train::ValidConfig) -> Vec<String> {
    let mut lines = Vec::new();
    let kind =
        if report.threat_model.starts_with("black-box") { "black-box audit (input canaries)" } else { "one-run audit" };
    for g in &report.groups {
        let best = g.bound.tests.iter().max_by(|x, y| x.1.total_cmp(&y.1)).map(|t| t.0);
        let (r, v) = best.map_or((0, 0), |b| (b.guesses, b.correct));
        lines.push(format!(
            "{kind}, {}: epsilon >= {:.3} ({v} of {r} guesses right, {} canaries, {} statistic, {:.0}% \
             confidence); claimed {:.3}{} at delta = {}: {}",
            g.group,
            g.bound.epsilon_lower,
            g.canaries,
            g.statistic,
            100.0 * g.bound.confidence,
            g.claimed_epsilon,
            if g.gradient_norm.is_some_and(|n| n < 1.0) { " (of what they spent)" } else { "" },
            cfg.config().privacy.delta,
            if g.consistent { "consistent with the claim" } else { "THE CLAIM IS VIOLATED" }
        ));
        if let Some(f) = &g.fdp {
            let parameter = if f.family == "gaussian-dp" { "mu" } else { "noise divided by theta, theta" };
            lines.push(format!(
                "  f-DP analysis (Mahloujifar, Melis & Chaudhuri 2025; the {} claim): {parameter} >= {:.4}, epsilon >= \
                 {:.3}: {}",
                f.family,
                f.parameter,
                f.epsilon_lower,
                if f.consistent { "consistent with the claim" } else { "THE CLAIM IS VIOLATED" }
            ));
        }
        if let Some(gauss) = g.gaussian {
            let reading = match gauss.family {
                GaussianFamily::GaussianDp => "the canaries' scores Gaussian with one variance, as full-batch GD's are",
                GaussianFamily::Composition => {
                    "the canaries' likelihood scores read by their means and spreads (Agrawal et al. 2026)"
                }
            };
            let exact = gauss.epsilon_as_claimed.map_or(String::new(), |e| {
                format!(" (these steps as claimed: {e:.3} by the PLD accountant, the most an audit can show)")
            });
            lines.push(format!(
                "  assuming {reading}: {} >= {:.4}, epsilon >= {:.3}{exact}{}",
                gauss.family.parameter(),
                gauss.parameter,
                gauss.epsilon_lower,
                if gauss.epsilon_lower > g.claimed_epsilon {
                    format!(
                        ": ABOVE THE CLAIM (a {:.0}% chance for a run that leaks what it claims; otherwise a leak)",
                        100.0 * (1.0 - g.bound.confidence)
                    )
                } else {
                    String::new()
                }
            ));
        }
    }
    lines
}
