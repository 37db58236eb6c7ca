//! Command-line parsing and dispatch. Every subcommand calls library functions only.

mod account;
mod audit;
mod bench;
mod data;
mod eval;
mod inspect;
mod phases;
mod progress;
mod sweep;
mod train;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Differentially private gradient descent with individual privacy accounting.
#[derive(Debug, Parser)]
#[command(name = "dpgd", version, about, allow_negative_numbers = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Privacy accounting without training: conversions, calibration, budgets.
    #[command(subcommand)]
    Account(account::AccountCommand),
    /// Datasets: fetch and verify.
    #[command(subcommand)]
    Data(data::DataCommand),
    /// Train a model privately from a TOML config.
    Train(train::TrainArgs),
    /// Time full private steps and report peak memory (see experiments/speed).
    BenchStep(bench::BenchArgs),
    /// Run (or resume) a grid of training runs from a sweep file.
    Sweep(sweep::SweepArgs),
    /// Summarise a sweep's results (mean ± std over seeds) as Markdown.
    Report(sweep::ReportArgs),
    /// Test accuracy of a run's model (or a model.safetensors) on a dataset's test split.
    Eval(eval::EvalArgs),
    /// Predict the classes of images (IDX or CSV) with a run's model.
    Predict(eval::PredictArgs),
    /// Show how much of its privacy budget each training example of a run spent (confidential).
    Inspect(inspect::InspectArgs),
    /// Audit a configuration's privacy: an empirical lower bound on ε from white-box canaries.
    Audit(audit::AuditArgs),
}

/// Parses the command line and runs it. A command without its subcommand shows its help;
/// usage errors and failures print `error: …` on stderr (naming the bad argument or file)
/// and exit non-zero (2 for usage, 1 for failures).
pub fn run() -> ExitCode {
    use clap::error::ErrorKind;
    let cli = match Cli::try_parse_from(join_negative_values(std::env::args_os())) {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand
            ) =>
        {
            let _ = e.print();
            return ExitCode::from(2);
        }
        Err(e) => {
            // One line: clap's message without its usage and help hints.
            let msg = e.to_string();
            let body: Vec<&str> = msg
                .lines()
                .map(str::trim)
                .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!("{}", body.join(" ").trim_end_matches('.'));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Account(cmd) => account::run(cmd),
        Command::Data(cmd) => data::run(cmd),
        Command::Train(args) => train::run_cmd(args),
        Command::BenchStep(args) => bench::run(args),
        Command::Sweep(args) => sweep::run_sweep(args),
        Command::Report(args) => sweep::run_report(args),
        Command::Audit(args) => audit::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Eval(args) => eval::eval(args),
        Command::Predict(args) => eval::predict(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One message, its causes after colons; a config file's syntax error keeps its
            // caret diagram on the lines below.
            eprintln!("error: {}", format!("{e:#}").trim_end_matches(['.', '\n']));
            ExitCode::FAILURE
        }
    }
}

/// clap value parser: a finite number > 0.
pub(crate) fn positive(s: &str) -> Result<f64, String> {
    parse_with(s, |v| dpgd_accounting::positive("value", v))
}

/// clap value parser: a number strictly between 0 and 1.
pub(crate) fn probability(s: &str) -> Result<f64, String> {
    parse_with(s, |v| dpgd_accounting::probability("value", v))
}

use dpgd_accounting::decimal::Decimal;

/// clap value parser: a decimal > 0, kept exactly as typed ([`dpgd_accounting::decimal`]).
pub(crate) fn positive_decimal(s: &str) -> Result<Decimal, String> {
    let d: Decimal = s.parse().map_err(|e| format!("`{s}`: {e}"))?;
    if d == Decimal::ZERO {
        return Err("must be > 0".into());
    }
    Ok(d)
}

/// clap value parser: a decimal strictly between 0 and 1, kept exactly as typed.
pub(crate) fn probability_decimal(s: &str) -> Result<Decimal, String> {
    let d = positive_decimal(s)?;
    if d >= Decimal::ONE {
        return Err("must be in (0, 1)".into());
    }
    Ok(d)
}

fn parse_with(s: &str, check: impl Fn(f64) -> dpgd_accounting::Result<f64>) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    check(v).map_err(|e| match e {
        dpgd_accounting::AccountingError::InvalidParameter { expected, .. } => expected.to_string(),
        other => other.to_string(),
    })
}

/// `--delta -1e-5` → `--delta=-1e-5`: clap reads a value that starts with `-` and has an
/// exponent as a flag, so a negative number after a long option is joined to it (and then
/// refused by the option's own check, with its name).
fn join_negative_values(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> = Vec::new();
    for arg in args {
        let negative = arg.to_str().is_some_and(|s| s.starts_with('-') && s.parse::<f64>().is_ok());
        match out.last_mut() {
            Some(prev)
                if negative
                    && prev.to_str().is_some_and(|p| p.starts_with("--") && !p.contains('=') && p.len() > 2) =>
            {
                prev.push("=");
                prev.push(&arg);
            }
            _ => out.push(arg),
        }
    }
    out
}
