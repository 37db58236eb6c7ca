//! `dpgd sweep` and `dpgd report`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::progress::{Mode, SweepProgress};

#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    /// The sweep file (e.g. experiments/tiny/sweep.toml).
    file: PathBuf,
    /// Results folder (default: results/ beside the sweep file).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Runs trained at the same time (each gets cores / jobs threads).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    jobs: u32,
    /// Train only the runs with this case or grid value, e.g. `--only train.seed=1` or
    /// `--only case=tuned-eps0.3` (repeatable; the results table lists every finished run).
    #[arg(long, value_name = "FIELD=VALUE", value_parser = parse_only)]
    only: Vec<(String, String)>,
    /// Hide progress bars.
    #[arg(long)]
    quiet: bool,
}

fn parse_only(s: &str) -> std::result::Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("`{s}`: write FIELD=VALUE, e.g. train.seed=1 or case=tuned-eps0.3"))
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// A sweep's folder or its results folder (e.g. experiments/tiny).
    dir: PathBuf,
}

pub(crate) fn run_sweep(a: SweepArgs) -> Result<()> {
    let (sweep, runs) = dpgd::sweep::plan(&a.file)?;
    let dir = a.out.unwrap_or_else(|| dpgd::sweep::default_results(&a.file));
    let fields: std::collections::BTreeSet<&String> = runs.iter().flat_map(|r| r.point.keys()).collect();
    if let Some((k, _)) = a.only.iter().find(|(k, _)| !fields.contains(k)) {
        let names: Vec<&str> = fields.iter().map(|f| f.as_str()).collect();
        anyhow::bail!("--only {k}=…: {k} is not a case or grid field of this sweep (fields: {})", names.join(", "));
    }
    for (k, v) in &a.only {
        if !runs.iter().any(|r| r.has(k, v)) {
            let values: std::collections::BTreeSet<String> =
                runs.iter().filter_map(|r| r.point.get(k)).map(dpgd::sweep::value_text).collect();
            anyhow::bail!(
                "--only {k}={v}: no run has this value (values of {k}: {})",
                values.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
    }
    let opts = dpgd::sweep::ExecuteOptions { jobs: a.jobs as usize, reuse: sweep.reuse.clone(), only: a.only.clone() };
    let progress = SweepProgress::new(Mode::detect(a.quiet));
    let executed = dpgd::sweep::execute(&dir, &runs, &opts, &progress);
    progress.finish();
    let executed = executed?;
    eprintln!("sweep {}: {} runs planned, {executed} trained now", sweep.name, runs.len());
    print!("{}", dpgd::sweep::report(&dir)?);
    eprintln!("plots: {}", dir.join("report.png").display());
    Ok(())
}

pub(crate) fn run_report(a: ReportArgs) -> Result<()> {
    let dir = if a.dir.join("results").join("results.jsonl").exists() { a.dir.join("results") } else { a.dir };
    print!("{}", dpgd::sweep::report(&dir)?);
    eprintln!("plots: {}", dir.join("report.png").display());
    Ok(())
}
