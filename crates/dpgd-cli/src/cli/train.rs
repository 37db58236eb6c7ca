//! `dpgd train`: one training run from a TOML config.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use dpgd::collective::Collective;
use dpgd::data::{Dataset, fetch};
use dpgd::train::{
    Observer, Override, RESUMABLE_FIELDS, Run, RunFolder, RunOptions, Silent, TrainConfig, resumable_fields,
};

use super::progress::{Mode, RunProgress};

#[derive(Debug, Args)]
pub(crate) struct TrainArgs {
    /// The run's TOML config (e.g. configs/mnist-filtered.toml).
    #[arg(long, required_unless_present = "resume", conflicts_with = "resume")]
    config: Option<PathBuf>,
    /// Override a config field, e.g. --set privacy.epsilon=0.5 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Remove a config field so its default applies, e.g. --unset privacy.epsilon --set privacy.sigma=3.
    #[arg(long = "unset", value_name = "KEY")]
    unset: Vec<String>,
    /// Run folder (default runs/<name>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue the run in this folder from its last step.
    #[arg(long, value_name = "RUN_DIR", conflicts_with = "out")]
    resume: Option<PathBuf>,
    /// Hide the progress bar (warnings and the end summary are still shown).
    #[arg(long)]
    quiet: bool,
    /// Audit the run itself in one run: canaries=M trains M gradient canaries beside the examples
    /// (white-box; each in with probability 1/2) into confidential/audit.json, inputs=M adds M
    /// input canaries to the training examples (black-box: the published model) into
    /// confidential/audit-inputs.json; both as canaries=M,inputs=M (the same as --set
    /// audit.canaries=M, audit.input_canaries=M).
    #[arg(long, value_name = "canaries=M,inputs=M", value_parser = parse_audit)]
    audit: Option<AuditArg>,
    /// Stop after this many steps (the run can be resumed later).
    #[arg(long, hide = true)]
    stop_after: Option<usize>,
}

pub(crate) fn run_cmd(a: TrainArgs) -> Result<()> {
    // Under an MPI launcher (`mpirun -np N dpgd train …`, built with the `mpi` feature) this
    // process is one rank of a data-parallel run; otherwise the only one.
    let mut comm = dpgd::collective::from_launcher()?;
    let outcome = train_as_rank(a, &mut *comm);
    if let Err(e) = &outcome
        && comm.size() > 1
    {
        // A rank that cannot go on says why, then ends the job on every rank (dropping its
        // collective does, with MPI).
        eprintln!("dpgd: rank {} of {} stopped the run: {e:#}", comm.rank(), comm.size());
        comm.abort(&format!("{e:#}"));
        drop(comm);
    }
    outcome
}

fn train_as_rank(a: TrainArgs, comm: &mut dyn Collective) -> Result<()> {
    let rank0 = comm.rank() == 0;
    let (overrides, config_path, dir) = config_and_folder(&a, rank0)?;
    let cfg = TrainConfig::from_file(&config_path, &overrides)?.validate()?;
    if a.resume.is_none() && rank0 {
        warn_if_loosened(&config_path, &cfg);
    }
    if RunFolder::new(&dir).is_finished() {
        if rank0 {
            eprintln!(
                "{} is finished already; its results are in {}",
                dir.display(),
                RunFolder::new(&dir).publishable().display()
            );
        }
        return Ok(());
    }
    let data = rank_data(&cfg, comm)?;
    // Ctrl-C ends the process as a kill would (every step is saved atomically, so any instant is
    // safe) and says how to continue.
    let hint = dir.clone();
    ctrlc::set_handler(move || {
        eprintln!(
            "\ninterrupted: every completed step is saved; continue with `dpgd train --resume {}`",
            hint.display()
        );
        std::process::exit(130);
    })
    .context("installing the Ctrl-C handler")?;
    let mut progress = RunProgress::new(Mode::detect(a.quiet), None, String::new());
    let mut silent = Silent;
    // Progress and logs come from rank 0 alone.
    let observer: &mut dyn Observer = if rank0 { &mut progress } else { &mut silent };
    let opts = RunOptions { stop_after: a.stop_after, ..Default::default() };
    let summary = Run::new(&cfg, &data, &dir).options(opts).observer(observer).ranks(comm).train()?;
    if !rank0 {
        return Ok(());
    }
    if summary.finished {
        for audit in [RunFolder::new(&dir).audit(), RunFolder::new(&dir).input_audit()] {
            if audit.is_file() {
                super::audit::audit_lines(&dpgd::train::read_json(&audit)?, &cfg).iter().for_each(|l| eprintln!("{l}"));
            }
        }
        eprintln!(
            "publishable: {}  (confidential: {})",
            RunFolder::new(&dir).publishable().display(),
            RunFolder::new(&dir).confidential().display()
        );
    } else {
        eprintln!("stopped after step {}: continue with --resume {}", summary.steps, dir.display());
    }
    println!("{}", summary.dir.display());
    Ok(())
}

/// The command line's overrides, the config file to read (the run folder's own on
/// `--resume`) and the run folder, after refusing what a resume cannot change and a new run
/// into a folder that holds one (rank 0 checks: the other ranks may see it created already).
fn config_and_folder(a: &TrainArgs, rank0: bool) -> Result<(Vec<Override>, PathBuf, PathBuf)> {
    let mut overrides: Vec<Override> = a.unset.iter().map(|k| Override::Unset(k.trim().to_string())).collect();
    for o in &a.overrides {
        overrides.push(Override::parse_set(o)?);
    }
    overrides.extend(audit_overrides(a.audit.as_ref())?);
    let (config_path, dir) = match (&a.resume, &a.config) {
        (Some(dir), _) => {
            if let Some(o) = overrides.iter().find(|o| !RESUMABLE_FIELDS.contains(&o.key())) {
                bail!(
                    "--resume cannot change {}: a run continues with the settings it started with (only {} may \
                     change); start a new run with --config and --out instead",
                    o.key(),
                    resumable_fields()
                );
            }
            let folder = RunFolder::new(dir);
            if !folder.config().is_file() {
                bail!("{} holds no run to resume (no publishable/config.toml)", dir.display());
            }
            (folder.config(), dir.clone())
        }
        (None, Some(c)) => {
            let cfg = TrainConfig::from_file(c, &overrides)?;
            let dir = a.out.clone().unwrap_or_else(|| PathBuf::from("runs").join(&cfg.name));
            // (Rank 0 creates the folder: the other ranks may already see it.)
            if rank0 && RunFolder::new(&dir).holds_run() {
                bail!(
                    "run folder {} already holds a run: pass --resume {0} to continue it, or --out NEW_DIR for a new one",
                    dir.display()
                );
            }
            (c.clone(), dir)
        }
        (None, None) => bail!("give --config FILE or --resume RUN_DIR"),
    };
    Ok((overrides, config_path, dir))
}

/// This rank's dataset: rank 0 fills a missing dataset folder, the others read it once it has;
/// each rank keeps only the training examples it trains on.
fn rank_data(cfg: &dpgd::train::ValidConfig, comm: &mut dyn Collective) -> Result<dpgd::data::Dataset> {
    let rank0 = comm.rank() == 0;
    let data = if rank0 { Some(load_or_fetch(&cfg.config().data)?) } else { None };
    comm.broadcast(&mut Vec::new())?;
    let data = match data {
        Some(d) => d,
        None => cfg.config().data.load()?,
    };
    Ok(if comm.size() > 1 { data.keep_shard(cfg.config().data.train_subset, comm.size(), comm.rank()) } else { data })
}

/// Says loudly when the command line weakens the guarantee the config file asks for (a larger
/// ε or δ), e.g. `--set privacy.sigma=5` replacing a file's ε = 0.3 by ε = 6.
fn warn_if_loosened(path: &Path, cfg: &dpgd::train::ValidConfig) {
    let Ok(file) = TrainConfig::from_file(path, &[]).and_then(|f| f.validate()) else { return };
    let (was, now) = (file.epsilon(), cfg.epsilon());
    let (was_delta, now_delta) = (file.config().privacy.delta, cfg.config().privacy.delta);
    let looser_eps = matches!((was, now), (Some(w), Some(n)) if n > w * (1.0 + 1e-9));
    if looser_eps || now_delta > was_delta || (was.is_some() && now.is_none()) {
        let show = |e: Option<f64>, d: f64| {
            let d = if d < 1e-3 { format!("{d:e}") } else { d.to_string() };
            e.map_or("not private".to_string(), |e| format!("({}, {d})-DP", dpgd::train::significant(e)))
        };
        eprintln!(
            "WARNING: the command line loosens the privacy of {}: the file asks for {}, this run is {}",
            path.display(),
            show(was, was_delta),
            show(now, now_delta)
        );
    }
}

/// Loads the dataset; a missing `datasets/<known name>` folder is filled by the dataset step first.
fn load_or_fetch(data: &dpgd::train::DataConfig) -> Result<Dataset> {
    let dir = data.dir.as_path();
    let known = fetch::KNOWN.iter().find(|k| dir == Path::new("datasets").join(k.name));
    if let (Some(k), Err(_)) = (known, dpgd::data::locate(dir, dpgd::data::FILES[0])) {
        eprintln!("{} is empty: running `dpgd data fetch {}` first", dir.display(), k.name);
        fetch::fetch(k.name, dir, None).with_context(|| format!("fetching {}", k.name))?;
    }
    Ok(data.load()?)
}

/// `--audit canaries=M,inputs=M`: the gradient canaries and the input canaries (either may be
/// left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AuditArg {
    canaries: Option<usize>,
    inputs: Option<usize>,
}

/// `--audit canaries=M`, `--audit inputs=M` or `--audit canaries=M,inputs=M`.
pub(crate) fn parse_audit(s: &str) -> std::result::Result<AuditArg, String> {
    let bad =
        || format!("{s:?}: write --audit canaries=M, --audit inputs=M or both, e.g. --audit canaries=1000,inputs=1000");
    let mut arg = AuditArg { canaries: None, inputs: None };
    for part in s.split(',') {
        let (key, value) = part.split_once('=').ok_or_else(bad)?;
        let m: usize = value.trim().parse().map_err(|_| bad())?;
        let slot = match key.trim() {
            "canaries" => &mut arg.canaries,
            "inputs" => &mut arg.inputs,
            _ => return Err(bad()),
        };
        if slot.replace(m).is_some() {
            return Err(bad());
        }
    }
    Ok(arg)
}

/// `--audit` as overrides of the config's `[audit]`.
pub(crate) fn audit_overrides(audit: Option<&AuditArg>) -> Result<Vec<Override>> {
    let Some(a) = audit else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for (key, m) in [("audit.canaries", a.canaries), ("audit.input_canaries", a.inputs)] {
        if let Some(m) = m {
            out.push(Override::parse_set(&format!("{key}={m}"))?);
        }
    }
    Ok(out)
}
