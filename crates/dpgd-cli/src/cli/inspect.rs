//! `dpgd inspect`: the data owner's view of a run — how much of its privacy budget each
//! training example spent. CONFIDENTIAL output.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use dpgd::per_example::Network;
use dpgd::train::{RunFolder, TrainConfig, budget};

#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// The run folder (e.g. runs/mnist-filtered).
    run: PathBuf,
    /// Also show this training example's spent budget (0-based index).
    #[arg(long)]
    example: Option<usize>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: InspectArgs) -> Result<()> {
    let folder = RunFolder::new(&a.run);
    if !folder.config().is_file() {
        bail!("{} holds no run (no publishable/config.toml)", a.run.display());
    }
    let cfg = TrainConfig::from_file(&folder.config(), &[])?.validate()?;
    if !cfg.is_private_method() {
        bail!("{}: method = non-private keeps no privacy ledger", a.run.display());
    }
    if cfg.ledger_budget().is_none() {
        bail!(
            "{}: {} has no per-example budgets (every example is clipped to C and the run's epsilon holds \
             for each alone); inspect reports the ledgers of GD runs and of DP-SGD with individual accounting \
             (method = \"sgd-filtered\")",
            a.run.display(),
            cfg.method().describe()
        );
    }
    // The parameter count the run recorded (its model is resolved for its data's shape).
    let params = match dpgd::train::state::peek_meta(&folder.state()) {
        Some(meta) => meta.identity.params,
        None => Network::new(cfg.model()?).map(|n| n.num_params()).context("the run's model")?,
    };
    let report = budget::report(&folder, &cfg, params)?;
    if !folder.budget().exists() || !folder.is_finished() {
        budget::write(&folder, &report)?;
    }
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    let [min, p10, med, p90, max] = report.spent_fraction_quantiles.map(|q| 100.0 * q);
    println!("CONFIDENTIAL — for the data owner; not covered by the run's privacy guarantee, do not publish");
    let each = if report.tiers.is_empty() {
        format!("budget {} each", report.budget_per_example)
    } else {
        "each with its own tier's budget, below".to_string()
    };
    println!("{} training examples, {each} ({}), after {} steps:", report.examples, cfg.ledger_unit(), report.steps);
    println!(
        "  {} out of budget ({:.1} %)",
        report.exhausted,
        100.0 * report.exhausted as f64 / report.examples.max(1) as f64
    );
    println!(
        "  share of its budget an example spent: min {min:.1} %, 10 % {p10:.1} %, median {med:.1} %, 90 % {p90:.1} %, max {max:.1} %"
    );
    for t in &report.tiers {
        println!(
            "  examples with epsilon = {}: {} of them, budget {} each, {} out of budget, median spent {:.1} %",
            t.epsilon,
            t.examples,
            t.budget,
            t.exhausted,
            100.0 * t.median_spent_fraction
        );
    }
    if let Some(&(step, _)) = report.exhausted_before_step.iter().find(|&&(_, e)| e > 0) {
        println!("  the first examples ran out before step {step}");
    }
    if let Some(i) = a.example {
        // Wherever the ledger is: the state, or a run's rank shards.
        let spent = budget::spent(&folder, params, cfg.max_steps())?.spent;
        // Every training row's (an audit's input canaries after the examples).
        let spent_rows = spent.len();
        let Some(&spent) = spent.get(i).filter(|_| i < report.examples) else {
            bail!("--example {i}: the run has {} training examples (0 to {})", report.examples, report.examples - 1);
        };
        let own = dpgd::train::budget::ledger_budgets(&cfg, spent_rows)?.0.get(i);
        println!("  example {i}: spent {spent} of its budget {own} ({:.1} %)", 100.0 * spent / own);
    }
    println!("  histogram: {}", folder.budget_plot().display());
    Ok(())
}
