//! `dpgd account`: a privacy calculator that needs no training.

use anyhow::Result;
use clap::{Args, Subcommand};
use dpgd::accounting::{Conversion, GaussianDp, PrivateGd, PureDp, ToApproxDp, Zcdp, calibrate_sigma};
use serde_json::{Value, json};

use super::{positive, probability};

#[derive(Debug, Subcommand)]
pub(crate) enum AccountCommand {
    /// Convert a zCDP, Gaussian-DP or pure-DP guarantee to (ε, δ)-DP.
    Convert(ConvertArgs),
    /// The largest zCDP ρ that gives a target (ε, δ) under a conversion.
    MaxRho(MaxRhoArgs),
    /// Noise multiplier σ for private GD with filtering (001 Alg. 3) to meet a target (ε, δ).
    Calibrate(CalibrateArgs),
    /// ε of private GD with filtering for a given σ and worst-case steps, under every conversion.
    Budget(BudgetArgs),
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct ConvertArgs {
    #[command(flatten)]
    guarantee: Guarantee,
    /// Target δ ∈ (0, 1).
    #[arg(long, value_parser = probability)]
    delta: f64,
    /// bun-steinke, cks or gaussian-exact. Default: gaussian-exact for --gdp, cks otherwise.
    /// gaussian-exact with --zcdp assumes ρ comes from Gaussian mechanisms (μ = √(2ρ)).
    #[arg(long)]
    method: Option<Conversion>,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// Exactly one guarantee to convert.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct Guarantee {
    /// ρ of a ρ-zCDP guarantee.
    #[arg(long, value_name = "RHO", value_parser = positive)]
    zcdp: Option<f64>,
    /// μ of a μ-Gaussian-DP guarantee.
    #[arg(long, value_name = "MU", value_parser = positive)]
    gdp: Option<f64>,
    /// ε of a pure ε-DP guarantee (converted through (ε²/2)-zCDP).
    #[arg(long, value_name = "EPS", value_parser = positive)]
    pure: Option<f64>,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct MaxRhoArgs {
    /// Target ε > 0.
    #[arg(long, value_parser = positive)]
    epsilon: f64,
    /// Target δ ∈ (0, 1).
    #[arg(long, value_parser = probability)]
    delta: f64,
    /// bun-steinke, cks or gaussian-exact (the last for Gaussian mechanisms only).
    #[arg(long, default_value = "cks")]
    method: Conversion,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct CalibrateArgs {
    /// Target ε > 0.
    #[arg(long, value_parser = positive)]
    epsilon: f64,
    /// Target δ ∈ (0, 1).
    #[arg(long, value_parser = probability)]
    delta: f64,
    /// Worst-case steps k (B_norm = k·C²): the steps plain private GD would take.
    #[arg(long, value_parser = positive)]
    steps: f64,
    /// Clip value C.
    #[arg(long, value_parser = positive, default_value_t = 1.0)]
    clip: f64,
    /// Conversion; gaussian-exact is the tightest valid one for this algorithm.
    #[arg(long, default_value = "gaussian-exact")]
    method: Conversion,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct BudgetArgs {
    /// Noise multiplier σ (noise std is σ·C).
    #[arg(long, value_parser = positive)]
    sigma: f64,
    /// Worst-case steps k (B_norm = k·C²).
    #[arg(long, value_parser = positive)]
    steps: f64,
    /// Target δ ∈ (0, 1).
    #[arg(long, value_parser = probability)]
    delta: f64,
    /// Clip value C (does not change ε).
    #[arg(long, value_parser = positive, default_value_t = 1.0)]
    clip: f64,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(cmd: AccountCommand) -> Result<()> {
    let (json, out, human) = match cmd {
        AccountCommand::Convert(a) => (a.json, convert(&a)?, None),
        AccountCommand::MaxRho(a) => (a.json, max_rho(&a)?, None),
        AccountCommand::Calibrate(a) => (a.json, calibrate(&a)?, None),
        AccountCommand::Budget(a) => {
            let v = budget(&a)?;
            let table = budget_table(&v);
            (a.json, v, Some(table))
        }
    };
    if json {
        println!("{}", serde_json::to_string(&out)?);
    } else if let Some(text) = human {
        print!("{text}");
    } else {
        for (k, v) in out.as_object().expect("object") {
            println!("{k:>18}: {}", v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()));
        }
    }
    Ok(())
}

fn convert(a: &ConvertArgs) -> Result<Value> {
    let mut out = json!({ "command": "convert", "delta": a.delta });
    let g = &a.guarantee;
    let epsilon = if let Some(mu) = g.gdp {
        let method = a.method.unwrap_or(Conversion::GaussianExact);
        out["gdp"] = json!(mu);
        out["method"] = json!(method.name());
        GaussianDp::new(mu)?.epsilon(a.delta, method)?
    } else {
        let (zcdp, source) = match (g.zcdp, g.pure) {
            (Some(rho), _) => (Zcdp::new(rho)?, "zcdp"),
            (_, Some(eps)) => (PureDp::new(eps)?.to_zcdp(), "pure"),
            _ => unreachable!("clap requires one guarantee"),
        };
        out[source] = json!(g.zcdp.or(g.pure));
        out["rho"] = json!(zcdp.rho());
        let method = a.method.unwrap_or(Conversion::Cks);
        out["method"] = json!(method.name());
        if method == Conversion::GaussianExact {
            out["assumes"] = json!("the zCDP guarantee comes from Gaussian mechanisms (mu = sqrt(2 rho))");
            GaussianDp::from_gaussian_zcdp(zcdp).epsilon(a.delta, method)?
        } else {
            zcdp.epsilon(a.delta, method)?
        }
    };
    out["epsilon"] = json!(epsilon);
    Ok(out)
}

fn max_rho(a: &MaxRhoArgs) -> Result<Value> {
    let rho = a.method.max_rho(a.epsilon, a.delta)?.rho();
    Ok(json!({
        "command": "max-rho", "epsilon": a.epsilon, "delta": a.delta, "method": a.method.name(), "rho": rho,
    }))
}

fn calibrate(a: &CalibrateArgs) -> Result<Value> {
    let sigma = calibrate_sigma(a.epsilon, a.delta, a.steps, a.method)?;
    let run = PrivateGd::new(sigma, a.clip, a.steps)?;
    Ok(json!({
        "command": "calibrate", "epsilon": a.epsilon, "delta": a.delta, "steps": a.steps, "clip": a.clip,
        "method": a.method.name(), "sigma": sigma, "noise_std": sigma * a.clip, "rho": run.zcdp().rho(),
        "mu": run.gaussian_dp().mu(), "b_norm": run.b_norm(), "epsilon_achieved": run.epsilon(a.delta, a.method)?,
    }))
}

fn budget(a: &BudgetArgs) -> Result<Value> {
    let run = PrivateGd::new(a.sigma, a.clip, a.steps)?;
    let mut eps = serde_json::Map::new();
    for m in Conversion::ALL {
        eps.insert(m.name().to_string(), json!(run.epsilon(a.delta, m)?));
    }
    Ok(json!({
        "command": "budget", "sigma": a.sigma, "steps": a.steps, "delta": a.delta, "clip": a.clip,
        "rho": run.zcdp().rho(), "mu": run.gaussian_dp().mu(), "b_norm": run.b_norm(), "epsilon": eps,
    }))
}

fn budget_table(v: &Value) -> String {
    let mut s = format!(
        "private GD with filtering: sigma = {}, {} worst-case steps, clip = {}\n  rho = {:.6} (zCDP), mu = {:.6} (GDP)\n\n  {:<16} epsilon at delta = {}\n",
        v["sigma"],
        v["steps"],
        v["clip"],
        v["rho"].as_f64().unwrap_or(f64::NAN),
        v["mu"].as_f64().unwrap_or(f64::NAN),
        "conversion",
        v["delta"]
    );
    for m in Conversion::ALL {
        s += &format!("  {:<16} {:.6}\n", m.name(), v["epsilon"][m.name()].as_f64().unwrap_or(f64::NAN));
    }
    s
}
