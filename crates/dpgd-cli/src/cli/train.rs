//! `dpgd train`: one training run from a TOML config.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use dpgd::data::{Dataset, fetch};
use dpgd::train::{RunOptions, TrainConfig, run};

#[derive(Debug, Args)]
pub(crate) struct TrainArgs {
    /// The run's TOML config (e.g. configs/mnist-filtered.toml).
    #[arg(long, required_unless_present = "resume")]
    config: Option<PathBuf>,
    /// Override a config field, e.g. --set privacy.epsilon=0.5 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Run folder (default runs/<name>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in this folder from its last checkpoint.
    #[arg(long, value_name = "RUN_DIR", conflicts_with = "out")]
    resume: Option<PathBuf>,
    /// Hide the progress bar.
    #[arg(long)]
    quiet: bool,
    /// Stop after this many steps (the run can be resumed later).
    #[arg(long, hide = true)]
    stop_after: Option<usize>,
}

pub(crate) fn run_cmd(a: TrainArgs) -> Result<()> {
    let (config_path, dir) = match (&a.resume, &a.config) {
        (Some(dir), _) => (dir.join("config.toml"), dir.clone()),
        (None, Some(c)) => {
            let cfg = TrainConfig::from_file(c, &a.overrides)?;
            let dir = a.out.clone().unwrap_or_else(|| PathBuf::from("runs").join(&cfg.name));
            if dpgd::train::checkpoint::state_path(&dir).exists() {
                bail!(
                    "run folder {} already holds a run: pass --resume {0} to continue it, or --out NEW_DIR",
                    dir.display()
                );
            }
            (c.clone(), dir)
        }
        (None, None) => bail!("give --config FILE or --resume RUN_DIR"),
    };
    let cfg = TrainConfig::from_file(&config_path, &a.overrides)?.validate()?;
    let data = load_or_fetch(&cfg.config.data.dir)?;
    let summary =
        run(&cfg, &data, &dir, &RunOptions { progress: !a.quiet, stop_after: a.stop_after, ..Default::default() })?;
    println!("{}", summary.dir.display());
    Ok(())
}

/// Loads the dataset; a missing `datasets/<known name>` folder is filled by the dataset step first.
fn load_or_fetch(dir: &Path) -> Result<Dataset> {
    let known = fetch::KNOWN.iter().find(|k| dir == Path::new("datasets").join(k.name));
    if let (Some(k), Err(_)) = (known, dpgd::data::locate(dir, dpgd::data::FILES[0])) {
        eprintln!("{} is empty: running `dpgd data fetch {}` first", dir.display(), k.name);
        fetch::fetch(k.name, dir, None).with_context(|| format!("fetching {}", k.name))?;
    }
    Ok(Dataset::load(dir, 10)?)
}
