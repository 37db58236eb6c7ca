//! `dpgd sweep` and `dpgd report`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    /// The sweep file (e.g. experiments/tiny.toml).
    file: PathBuf,
    /// Results folder (default experiments/<name>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Hide progress bars.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// A sweep's results folder (e.g. experiments/tiny).
    dir: PathBuf,
}

pub(crate) fn run_sweep(a: SweepArgs) -> Result<()> {
    let (sweep, runs) = dpgd::sweep::plan(&a.file)?;
    let dir = a.out.unwrap_or_else(|| PathBuf::from("experiments").join(&sweep.name));
    let executed = dpgd::sweep::execute(&dir, &runs, !a.quiet)?;
    eprintln!("sweep {}: {} runs planned, {executed} executed now", sweep.name, runs.len());
    print!("{}", dpgd::sweep::report(&dir)?);
    Ok(())
}

pub(crate) fn run_report(a: ReportArgs) -> Result<()> {
    print!("{}", dpgd::sweep::report(&a.dir)?);
    Ok(())
}
