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
    /// Hide progress bars (with --select private, every candidate's lines and end: they would
    /// tell how many candidates ran).
    #[arg(long)]
    quiet: bool,
    /// `private`: a private hyperparameter search. A random number of candidates, each a grid
    /// point chosen at random, scored privately on held-out training examples; only the best
    /// is published, and the guarantee covers the whole search (Papernot & Steinke 2022).
    /// Settings in the file's `[search]` section.
    #[arg(long, value_enum)]
    select: Option<Select>,
    /// The whole search's epsilon (with --select private).
    #[arg(long, requires = "select")]
    epsilon: Option<f64>,
    /// Every run (every candidate of a private search) audits itself in one run: canaries=M, as
    /// `dpgd train --audit` (each against its own epsilon); a private search's released
    /// candidate is judged again against the search's epsilon (confidential/search-audit.json).
    #[arg(long, value_name = "canaries=M,inputs=M", value_parser = super::train::parse_audit)]
    audit: Option<super::train::AuditArg>,
    /// The whole search's delta (with --select private).
    #[arg(long, requires = "select")]
    delta: Option<f64>,
}

/// How a sweep chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Select {
    /// A private hyperparameter search: one published model, one guarantee for everything.
    Private,
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
    // Under mpirun every rank would run the whole sweep: refused (one process runs it).
    dpgd::sweep::one_process(dpgd::collective::from_launcher()?.size())?;
    if a.select == Some(Select::Private) {
        return run_search(a);
    }
    let (sweep, runs) = dpgd::sweep::plan_with(&a.file, &super::train::audit_overrides(a.audit.as_ref())?)?;
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

/// `dpgd sweep FILE --select private --epsilon ε --delta δ`.
fn run_search(a: SweepArgs) -> Result<()> {
    let (Some(epsilon), Some(delta)) = (a.epsilon, a.delta) else {
        anyhow::bail!("--select private needs the whole search's --epsilon and --delta, e.g. --epsilon 1 --delta 1e-5");
    };
    if !a.only.is_empty() || a.jobs != 1 {
        anyhow::bail!("--select private runs its candidates one after another: remove --only and --jobs");
    }
    let search = dpgd::sweep::search::prepare_with(
        &a.file,
        (epsilon, delta),
        &super::train::audit_overrides(a.audit.as_ref())?,
    )?;
    let dir = a.out.unwrap_or_else(|| dpgd::sweep::default_results(&a.file));
    eprintln!(
        "search {}: {} grid points, each candidate calibrated for epsilon = {} (how many candidates run, and their \
         scores, are confidential: so are these progress lines)",
        search.name,
        search.points.len(),
        dpgd::train::significant(search.guarantee.candidate_epsilon)
    );
    let mut progress = SearchProgress { mode: Mode::detect(a.quiet) };
    let result = dpgd::sweep::search::run_search(&search, &dir, &mut progress, None)?
        .ok_or_else(|| anyhow::anyhow!("the search stopped before its end"))?;
    println!("{}", result.summary);
    match &result.chosen {
        Some(c) => {
            let point: Vec<String> = c.point.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            println!("chosen: {}", point.join(", "));
            println!(
                "noisy validation accuracy {:.2} %, test accuracy {:.2} %",
                100.0 * c.noisy_validation_accuracy,
                100.0 * c.test_accuracy
            );
        }
        None => println!("the search drew no candidate: nothing to publish but the guarantee"),
    }
    search_audit(&dir)?;
    eprintln!("publishable: {}", dir.join("publishable").display());
    Ok(())
}

/// The search's audit, if its candidates were audited: a line per tier, and an error if a bound
/// exceeds the search's claim.
fn search_audit(dir: &std::path::Path) -> Result<()> {
    let audits = [
        (dpgd::sweep::search::search_audit_path(dir), "canaries"),
        (dpgd::sweep::search::search_input_audit_path(dir), "input canaries, black-box"),
    ];
    for (path, kind) in audits.iter().filter(|(p, _)| p.exists()) {
        search_audit_lines(path, kind)?;
    }
    Ok(())
}

/// One search audit's lines, and an error if a bound exceeds the search's claim.
fn search_audit_lines(path: &std::path::Path, kind: &str) -> Result<()> {
    let audit: dpgd::sweep::search::SearchAudit = dpgd::train::read_json(path)?;
    for g in &audit.groups {
        let fdp = g.epsilon_lower_fdp.map_or(String::new(), |e| format!(", f-DP {e:.3}"));
        println!(
            "search audit (the released candidate's {kind}), {}: epsilon >= {:.3}{fdp}; the search claims {:.3} \
             (the candidate {:.3}): {}",
            g.group,
            g.epsilon_lower,
            g.claimed_epsilon,
            g.candidate_epsilon,
            if g.consistent { "consistent with the claim" } else { "THE CLAIM IS VIOLATED" }
        );
    }
    if !audit.consistent {
        anyhow::bail!("the search's audit exceeds its claimed epsilon: {}", path.display());
    }
    Ok(())
}

struct SearchProgress {
    mode: Mode,
}

impl dpgd::sweep::search::SearchObserver for SearchProgress {
    /// Progress lines number the candidates and show their results, so they tell how many ran
    /// (K, confidential): with `--quiet`, nothing of any candidate is shown, not even its end.
    fn candidate(&mut self, i: usize) -> Box<dyn dpgd::train::Observer + '_> {
        if self.mode == Mode::Quiet {
            return Box::new(dpgd::train::Silent);
        }
        Box::new(super::progress::RunProgress::new(self.mode, None, format!("[candidate {}] ", i + 1)))
    }
}
