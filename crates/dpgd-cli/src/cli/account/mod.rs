//! `dpgd account`: a privacy calculator that needs no training.

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use dpgd_accounting::decimal::Decimal;
use dpgd_accounting::{ApproxDp, Conversion, GaussianDp, GaussianRelease, GdPlan, PrivateGd, PureDp, ToApproxDp, Zcdp};
use serde_json::{Value, json};

use super::{positive, positive_decimal, probability, probability_decimal};

mod filters;

use filters::{compare, filter, odometer, odometer_series};

#[derive(Debug, Subcommand)]
pub(crate) enum AccountCommand {
    /// Convert a zCDP, Gaussian-DP or pure-DP guarantee to (ε, δ)-DP.
    Convert(ConvertArgs),
    /// The largest zCDP ρ that gives a target (ε, δ) under a conversion.
    MaxRho(MaxRhoArgs),
    /// Noise multiplier σ for private GD with filtering (Feldman & Zrnic 2021, Alg. 3) to meet a target (ε, δ).
    Calibrate(CalibrateArgs),
    /// ε of private GD with filtering for a given σ and worst-case steps, under every conversion
    /// (full batch: every example in every step; for Poisson-sampled DP-SGD use `sgd`).
    Budget(BudgetArgs),
    /// ε of DP-SGD (Poisson sampling at rate q, σ, T steps) by the RDP accountant, or the σ
    /// that meets a target ε (add-or-remove-one neighbours, as Opacus states its ε).
    Sgd(SgdArgs),
    /// ε of BandMF (`privacy.method = "bandmf"`: --bands b partitions taken in turn, each step
    /// Poisson-sampling its partition at --sample-rate), or the σ that meets a target ε: T steps
    /// as ⌈T/b⌉ rounds of DP-SGD (Choquette-Choo, Ganesh, Steinke & Thakurta 2023); `sgd --bands b`.
    Bandmf(SgdArgs),
    /// How many rounds of ε₀-DP mechanisms a privacy filter allows for a target (ε, δ).
    Filter(FilterArgs),
    /// An odometer's bound on the privacy loss after N rounds of ε₀-DP mechanisms.
    Odometer(OdometerArgs),
    /// Plot the filters (rounds allowed vs ε₀) and odometers (bound vs rounds) side by side.
    Compare(CompareArgs),
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct CompareArgs {
    /// Folder for filters.png and odometers.png.
    #[arg(long, default_value = "docs")]
    out: std::path::PathBuf,
    /// Target ε of the filters (and the filter odometer's tight point).
    #[arg(long, value_parser = positive, default_value_t = 1.0)]
    epsilon: f64,
    /// δ of filters and odometers.
    #[arg(long, value_parser = probability, default_value_t = 1e-6)]
    delta: f64,
    /// ε₀ per round for the odometer comparison (a decimal, kept exactly).
    #[arg(long, value_parser = positive_decimal, default_value = "0.01")]
    per_round: Decimal,
    /// Dataset size for the Rogers et al. odometer.
    #[arg(long, default_value_t = 1_000_000)]
    dataset_size: u64,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// Filter kinds for `dpgd account filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum FilterKind {
    /// Basic composition: Σε ≤ ε.
    Basic,
    /// Rogers et al. 2016, Thm 5.1.
    Rogers,
    /// Feldman & Zrnic 2021, Thm 4.8 with the B* printed there.
    Fz,
    /// Feldman & Zrnic 2021, Thm 4.8 with B* from the cks conversion.
    FzCks,
    /// Whitehouse et al. 2023, Thm 2.
    Whitehouse,
}

/// Odometer kinds for `dpgd account odometer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OdometerKind {
    /// Rogers et al. 2016 (needs --dataset-size).
    Rogers,
    /// Whitehouse et al. filter odometer (tight at --target-epsilon).
    Filter,
    /// Whitehouse et al. mixture odometer (--gamma, or tight at --target-epsilon).
    Mixture,
    /// Whitehouse et al. stitched odometer (--v0).
    Stitched,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct FilterArgs {
    /// basic, rogers, fz, fz-cks or whitehouse.
    #[arg(long, value_enum)]
    kind: FilterKind,
    /// Target ε > 0 (a decimal, kept exactly: 1 in rounds of 0.1 is 10 rounds).
    #[arg(long, value_parser = positive_decimal)]
    epsilon: Decimal,
    /// Target δ ∈ (0, 1).
    #[arg(long, value_parser = probability_decimal)]
    delta: Decimal,
    /// ε₀ of each (pure) mechanism (a decimal, kept exactly).
    #[arg(long, value_parser = positive_decimal)]
    per_round: Decimal,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct OdometerArgs {
    /// rogers, filter, mixture or stitched.
    #[arg(long, value_enum)]
    kind: OdometerKind,
    /// ε₀ of each (pure) mechanism (a decimal, kept exactly: 10,000 rounds of 0.01 have
    /// intrinsic time Σε₀² = 1 exactly).
    #[arg(long, value_parser = positive_decimal)]
    per_round: Decimal,
    /// Number of rounds N.
    #[arg(long)]
    rounds: u64,
    /// δ ∈ (0, 1) of the odometer.
    #[arg(long, value_parser = probability)]
    delta: f64,
    /// The ε at which the filter odometer is tight (also picks γ for the mixture odometer).
    #[arg(long, value_parser = positive)]
    target_epsilon: Option<f64>,
    /// Mixture parameter γ.
    #[arg(long, value_parser = positive)]
    gamma: Option<f64>,
    /// Intrinsic time v₀ from which the stitched odometer is nontrivial.
    #[arg(long, value_parser = positive)]
    v0: Option<f64>,
    /// Dataset size n (Rogers et al.).
    #[arg(long)]
    dataset_size: Option<u64>,
    /// Print the bound after every round as CSV (round,bound).
    #[arg(long)]
    series: bool,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct ConvertArgs {
    #[command(flatten)]
    guarantee: Guarantee,
    /// Target δ ∈ (0, 1).
    #[arg(long, value_parser = probability)]
    delta: f64,
    /// bun-steinke, cks or gaussian-exact. Default: gaussian-exact for --gdp (exact there); cks
    /// for --zcdp and --pure (gaussian-exact holds for --zcdp only when ρ comes from
    /// continuous Gaussian mechanisms, μ = √(2ρ): ask for it explicitly; it is invalid for --pure).
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
    /// bun-steinke, cks or gaussian-exact (the default everywhere it is valid; here it gives
    /// μ²/2 for the largest μ-GDP, i.e. it assumes Gaussian mechanisms).
    #[arg(long, default_value = "gaussian-exact")]
    method: Conversion,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct CalibrateArgs {
    /// A training config: calibrate exactly as `dpgd train` will (its target, k, neighbouring
    /// relation and every scheduled noisy release), instead of --epsilon/--delta/--steps.
    #[arg(long, conflicts_with_all = ["epsilon", "delta", "steps"])]
    config: Option<std::path::PathBuf>,
    /// Target ε > 0.
    #[arg(long, value_parser = positive, required_unless_present = "config")]
    epsilon: Option<f64>,
    /// Target δ ∈ (0, 1).
    #[arg(long, value_parser = probability, required_unless_present = "config")]
    delta: Option<f64>,
    /// Worst-case steps k (B_norm = k·C²): the steps plain private GD would take.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), required_unless_present = "config")]
    steps: Option<u64>,
    /// Noisy counts released beside training, as STD:COUNT (e.g. 500:12 for twelve counts of
    /// noise std 500, sensitivity 1); repeatable.
    #[arg(long = "release", value_name = "STD:COUNT", value_parser = parse_release)]
    releases: Vec<(f64, u64)>,
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
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
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

#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub(crate) struct SgdArgs {
    /// Poisson sampling rate q ∈ (0, 1]: each step includes each example with probability q
    /// (Opacus's MNIST example: 240/60000 = 0.004).
    #[arg(long, value_parser = sample_rate)]
    sample_rate: f64,
    /// Noise multiplier σ (noise std σ·C); give --epsilon instead to calibrate it.
    #[arg(long, value_parser = positive, required_unless_present = "epsilon", conflicts_with = "epsilon")]
    sigma: Option<f64>,
    /// Target ε: print the smallest σ that meets it.
    #[arg(long, value_parser = positive)]
    epsilon: Option<f64>,
    /// Steps T (at most 10^12).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000_000), required_unless_present = "epochs", conflicts_with = "epochs")]
    steps: Option<u64>,
    /// Epochs instead of steps: T = ⌈epochs / q⌉ (⌈epochs·b / q⌉ with --bands b).
    #[arg(long, value_parser = positive)]
    epochs: Option<f64>,
    /// BandMF's bands b (`privacy.method = "bandmf"`): the examples in b partitions taken in
    /// turn, --sample-rate the rate within a step's partition; the T steps are accounted as
    /// ⌈T/b⌉ rounds of DP-SGD (Choquette-Choo, Ganesh, Steinke & Thakurta 2023). 1 is DP-SGD.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    bands: u64,
    /// δ ∈ (0, 1).
    #[arg(long, value_parser = probability)]
    delta: f64,
    /// The accountant: `rdp`, or `pld` (tighter; prints a lower estimate beside ε, from a
    /// dominated pair, to show how tight ε is).
    #[arg(long, value_enum, default_value = "rdp")]
    accountant: SgdAccountant,
    /// The PLD accountant's loss grid interval (finer: tighter and slower). Where the composed
    /// losses would span more points than the accountant holds (little noise, many steps), the
    /// next coarser of 2, 5 and 10 times it that fits is used, and printed.
    #[arg(long, value_parser = pld_interval, default_value_t = 1e-4)]
    pld_interval: f64,
    /// Rényi orders: `opacus` (Opacus 1.6's defaults), `dp-accounting` (dp_accounting's), or a
    /// comma-separated list of numbers > 1.
    #[arg(long, default_value = "opacus", value_parser = parse_orders)]
    orders: Orders,
    /// RDP to (ε, δ): `cks` (Canonne, Kamath & Steinke 2020, Prop. 12; as Opacus) or `classic`
    /// (ε = min R(α) + ln(1/δ)/(α − 1), Mironov 2017, Prop. 3).
    #[arg(long, value_enum, default_value = "cks")]
    conversion: RdpConversion,
    /// Print exactly one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// Accountants for `dpgd account sgd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SgdAccountant {
    /// Rényi DP of the Poisson-subsampled Gaussian (Mironov, Talwar & Zhang 2019).
    Rdp,
    /// Its privacy loss distribution on a grid, composed by FFT (Koskela et al. 2021;
    /// Doroshenko et al. 2022): tighter than RDP.
    Pld,
}

fn pld_interval(s: &str) -> std::result::Result<f64, String> {
    let h: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (1e-6..=0.1).contains(&h) { Ok(h) } else { Err(format!("{h}: use a grid interval in [1e-6, 0.1]")) }
}

/// RDP-to-(ε, δ) conversions for `dpgd account sgd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RdpConversion {
    /// Canonne, Kamath & Steinke 2020, Prop. 12 (Opacus's).
    Cks,
    /// ε = min_α R(α) + ln(1/δ)/(α − 1) (Mironov 2017, Prop. 3).
    Classic,
}

impl RdpConversion {
    /// The accounting crate's conversion: the classic one is what it names `bun-steinke`, which
    /// on an RDP curve R is ε = min over α of R(α) + ln(1/δ)/(α − 1) (Mironov 2017, Prop. 3), and
    /// on zCDP's R(α) = ρα gives Bun & Steinke 2016's ρ + 2√(ρ ln(1/δ)).
    fn conversion(self) -> Conversion {
        match self {
            RdpConversion::Cks => Conversion::Cks,
            RdpConversion::Classic => Conversion::BunSteinke,
        }
    }
}

/// Rényi orders, by name or listed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Orders {
    name: String,
    orders: Vec<f64>,
}

fn parse_orders(s: &str) -> std::result::Result<Orders, String> {
    use dpgd_accounting::subsampled::{dp_accounting_orders, opacus_orders};
    let orders = match s.trim() {
        "opacus" => opacus_orders(),
        "dp-accounting" => dp_accounting_orders(),
        list => {
            let parse = |x: &str| x.trim().parse::<f64>().ok().filter(|a| a.is_finite() && *a > 1.0 && *a <= 1e4);
            let orders: Option<Vec<f64>> = list.split(',').map(parse).collect();
            match orders {
                Some(o) if !o.is_empty() && o.len() <= 10_000 => o,
                _ => {
                    return Err(format!(
                        "`{s}`: use opacus, dp-accounting, or a comma-separated list of up to 10000 orders in (1, 10000]"
                    ));
                }
            }
        }
    };
    Ok(Orders { name: s.trim().to_string(), orders })
}

fn sample_rate(s: &str) -> std::result::Result<f64, String> {
    let q: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    if q > 0.0 && q <= 1.0 { Ok(q) } else { Err(format!("{q}: a sampling probability must be in (0, 1]")) }
}

pub(crate) fn run(cmd: AccountCommand) -> Result<()> {
    let (json, out, human) = match cmd {
        AccountCommand::Convert(a) => (a.json, convert(&a)?, None),
        AccountCommand::MaxRho(a) => (a.json, max_rho(&a)?, None),
        AccountCommand::Calibrate(a) => (a.json, calibrate(&a)?, None),
        AccountCommand::Filter(a) => (a.json, filter(&a)?, None),
        AccountCommand::Compare(a) => (a.json, compare(&a)?, None),
        AccountCommand::Odometer(a) => {
            if a.series {
                return odometer_series(&a);
            }
            (a.json, odometer(&a)?, None)
        }
        AccountCommand::Sgd(a) => (a.json, sgd(&a)?, None),
        AccountCommand::Bandmf(a) => {
            anyhow::ensure!(
                a.bands >= 2,
                "give BandMF's bands, --bands b with b >= 2 (one band is DP-SGD: dpgd account sgd)"
            );
            (a.json, sgd(&a)?, None)
        }
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
        print!("{}", human_lines(&out));
    }
    Ok(())
}

/// The answer first (`epsilon = 1.3081`), then the inputs and details, one per line; no null
/// fields, whole numbers without a decimal point.
fn human_lines(out: &Value) -> String {
    let answer = match out["command"].as_str() {
        Some("convert") => "epsilon",
        Some("max-rho") => "rho",
        Some("calibrate") => "sigma",
        Some("sgd") => "epsilon",
        Some("filter") => "rounds",
        Some("odometer") => "bound",
        _ => "",
    };
    let mut s = String::new();
    if let Some(v) = out.get(answer).filter(|v| !v.is_null()) {
        s += &format!("{answer} = {}\n", shown(v));
    } else if !answer.is_empty() {
        s += &format!("{answer}: none (the bound is trivial)\n");
    }
    // Every command above builds its output with `json!({...})`, an object.
    for (k, v) in out.as_object().into_iter().flatten() {
        if k != "command" && k != answer && !v.is_null() {
            s += &format!("  {k}: {}\n", shown(v));
        }
    }
    s
}

fn shown(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{}", x as i64),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        // A long list of numbers (the RDP orders and curve) by its ends: --json has them all.
        Value::Array(a) if a.len() > 8 && a.iter().all(Value::is_number) => format!(
            "{}, {}, …, {} ({} values; --json lists them)",
            shown(&a[0]),
            shown(&a[1]),
            shown(&a[a.len() - 1]),
            a.len()
        ),
        // Objects in a list are separated more strongly than their own fields.
        Value::Array(a) => {
            let sep = if a.iter().any(Value::is_object) { "; " } else { ", " };
            a.iter().map(shown).collect::<Vec<_>>().join(sep)
        }
        Value::Object(o) => o
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| format!("{k} {}", shown(v)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
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
            (_, Some(eps)) => {
                if a.method == Some(Conversion::GaussianExact) {
                    anyhow::bail!(
                        "--method gaussian-exact does not apply to --pure: it is the (epsilon, delta) curve of Gaussian \
                         mechanisms, and a pure epsilon-DP mechanism is not one (randomized response needs a larger \
                         epsilon); use --method cks or --method bun-steinke"
                    );
                }
                (PureDp::new(eps)?.to_zcdp(), "pure")
            }
            _ => anyhow::bail!("give one guarantee: --zcdp RHO, --gdp MU or --pure EPS"),
        };
        out[source] = json!(g.zcdp.or(g.pure));
        out["rho"] = json!(zcdp.rho());
        let method = a.method.unwrap_or(Conversion::Cks);
        out["method"] = json!(method.name());
        let converted = if method == Conversion::GaussianExact {
            out["assumes"] = json!("the zCDP guarantee comes from continuous Gaussian mechanisms (mu = sqrt(2 rho))");
            GaussianDp::from_gaussian_zcdp(zcdp).epsilon(a.delta, method)?
        } else {
            zcdp.epsilon(a.delta, method)?
        };
        match g.pure {
            // ε-DP is (ε, δ)-DP for every δ: the conversion only helps when it is smaller.
            Some(eps) if eps <= converted => {
                out["method"] = json!("pure");
                out["note"] = json!(format!(
                    "pure epsilon-DP is (epsilon, delta)-DP for every delta; the {} conversion gives {converted}",
                    method.name()
                ));
                eps
            }
            _ => converted,
        }
    };
    if !epsilon.is_finite() {
        anyhow::bail!("this guarantee gives no finite epsilon at delta = {}: it is vacuous", a.delta);
    }
    out["epsilon"] = json!(epsilon);
    Ok(out)
}

fn max_rho(a: &MaxRhoArgs) -> Result<Value> {
    let rho = a.method.max_rho(a.epsilon, a.delta)?.rho();
    Ok(json!({
        "command": "max-rho", "epsilon": a.epsilon, "delta": a.delta, "method": a.method.name(), "rho": rho,
    }))
}

fn parse_release(s: &str) -> std::result::Result<(f64, u64), String> {
    let (std, count) = s.split_once(':').ok_or_else(|| format!("`{s}`: write STD:COUNT, e.g. 500:12"))?;
    let std = positive(std)?;
    let count = count.trim().parse::<u64>().map_err(|_| format!("`{count}` is not a whole number of releases"))?;
    Ok((std, count))
}

fn calibrate(a: &CalibrateArgs) -> Result<Value> {
    if let Some(path) = &a.config {
        return calibrate_config(path);
    }
    // clap requires these three without --config.
    let (Some(epsilon), Some(delta), Some(steps)) = (a.epsilon, a.delta, a.steps) else {
        anyhow::bail!("give --config FILE, or --epsilon, --delta and --steps");
    };
    let mut plan = GdPlan::new(steps as f64)?;
    for &(std, count) in &a.releases {
        plan = plan.with_release(GaussianRelease::new(std, 1.0, count)?);
    }
    let sigma = plan.calibrate(ApproxDp::new(epsilon, delta)?, a.method)?;
    let run = PrivateGd::new(sigma, a.clip, steps as f64)?;
    let releases: Vec<Value> = a.releases.iter().map(|(s, c)| json!({ "std": s, "count": c })).collect();
    Ok(json!({
        "command": "calibrate", "sigma": sigma, "epsilon": epsilon, "delta": delta, "steps": steps, "clip": a.clip,
        "method": a.method.name(), "noise_std": sigma * a.clip, "releases": releases,
        "rho": plan.guarantee(sigma)?.to_zcdp().rho(), "mu": plan.guarantee(sigma)?.mu(), "b_norm": run.b_norm(),
        "epsilon_achieved": plan.guarantee(sigma)?.epsilon(delta, a.method)?,
    }))
}

/// σ exactly as `dpgd train` calibrates it for `path`.
fn calibrate_config(path: &std::path::Path) -> Result<Value> {
    let cfg = dpgd::train::TrainConfig::from_file(path, &[])?.validate()?;
    let p = &cfg.config().privacy;
    let Some(sigma) = cfg.sigma() else {
        anyhow::bail!("{}: method = non-private has no noise to calibrate", path.display())
    };
    let releases: Vec<Value> = cfg
        .releases()
        .iter()
        .map(|r| json!({ "mechanism": r.kind.name(), "std": r.sigma, "count": r.count_through(r.last) }))
        .collect();
    Ok(json!({
        "command": "calibrate", "sigma": sigma, "config": path, "epsilon": cfg.epsilon(), "delta": p.delta,
        "steps": p.worst_case_steps, "clip": p.clip, "method": p.conversion.name(), "neighbours": p.neighbours.name(),
        "noise_std": sigma * p.clip, "releases": releases,
    }))
}

fn sgd(a: &SgdArgs) -> Result<Value> {
    use dpgd_accounting::event::{
        Accountant, DpEvent, PldAccountant, RdpAccountant, calibrate_sgd_sigma, calibrate_sgd_sigma_pld,
    };
    let steps = match (a.steps, a.epochs) {
        (Some(t), _) => t,
        (None, Some(e)) => {
            let t = (e * a.bands as f64 / a.sample_rate).ceil();
            anyhow::ensure!(
                t.is_finite() && t <= 1e12,
                "--epochs {e} at --sample-rate {} is over 10^12 steps",
                a.sample_rate
            );
            t as u64
        }
        (None, None) => anyhow::bail!("give --steps or --epochs"),
    };
    // BandMF's steps are ⌈T/b⌉ rounds of DP-SGD; with one band, its steps.
    let total_steps = steps;
    let steps = steps.div_ceil(a.bands);
    let (orders, conversion) = (&a.orders.orders, a.conversion.conversion());
    let sigma = match (a.sigma, a.epsilon, a.accountant) {
        (Some(s), _, _) => s,
        (None, Some(eps), SgdAccountant::Pld) => {
            coarser_if_needed(a.pld_interval, |h| calibrate_sgd_sigma_pld(a.sample_rate, steps, (eps, a.delta), h))
                .context("calibrating --sigma for --epsilon with the PLD accountant")?
                .0
        }
        (None, Some(eps), SgdAccountant::Rdp) => {
            calibrate_sgd_sigma(a.sample_rate, steps, (eps, a.delta), orders, conversion)
                .context("calibrating --sigma for --epsilon")?
        }
        (None, None, _) => anyhow::bail!("give --sigma or --epsilon"),
    };
    let step = DpEvent::poisson_sampled(a.sample_rate, DpEvent::gaussian(sigma));
    let mut out = json!({
        "command": "sgd", "sigma": sigma, "target_epsilon": a.epsilon,
        "setting": "DP-SGD: each step samples each example with probability sample_rate (Poisson) and adds N(0, sigma^2 C^2) to the clipped sum",
        "neighbours": "add-or-remove-one", "sample_rate": a.sample_rate, "steps": total_steps, "delta": a.delta,
    });
    if a.bands > 1
        && let Some(o) = out.as_object_mut()
    {
        o.insert("setting".into(), json!("BandMF: the examples in `bands` partitions taken in turn, each step samples each example of its partition with probability sample_rate (Poisson) and adds its row of C^-1 z to the clipped sum, C b-banded with columns of norm at most 1: as private as `rounds` rounds of DP-SGD at sample_rate (Choquette-Choo, Ganesh, Steinke & Thakurta 2023)"));
        o.insert("bands".into(), json!(a.bands));
        o.insert("rounds".into(), json!(steps));
    }
    let fields = match a.accountant {
        SgdAccountant::Rdp => {
            let mut acc = RdpAccountant::new(orders.clone(), conversion)?;
            let per_step = acc.rdp_of(&step)?;
            acc.compose(&step.repeated(steps))?;
            let (epsilon, alpha) = acc.epsilon_and_order(a.delta)?;
            json!({
                "epsilon": epsilon, "accountant": "rdp (Mironov, Talwar & Zhang 2019)",
                "conversion": match a.conversion { RdpConversion::Cks => "cks", RdpConversion::Classic => "classic" },
                "alpha": alpha, "orders_name": a.orders.name, "orders": acc.orders(), "rdp": per_step,
            })
        }
        SgdAccountant::Pld => {
            let ((epsilon, lower), interval) = coarser_if_needed(a.pld_interval, |h| {
                let mut acc = PldAccountant::new(h)?;
                acc.compose(&step.clone().repeated(steps))?;
                acc.epsilon_bounds(a.delta)
            })?;
            json!({
                "epsilon": epsilon, "epsilon_lower_estimate": lower,
                "accountant": "pld (privacy loss distribution; Koskela et al. 2021, Doroshenko et al. 2022)",
                "pld_interval": interval,
            })
        }
    };
    if let (Some(o), Some(f)) = (out.as_object_mut(), fields.as_object()) {
        o.extend(f.clone());
    }
    Ok(out)
}

/// `f` on the PLD grid `interval`, or on the first of 2, 5, 10, 20, 50, … times it (up to 0.1)
/// where the composed losses would span more grid points than the accountant holds; the
/// result and the interval used.
fn coarser_if_needed<T>(
    interval: f64,
    f: impl Fn(f64) -> dpgd_accounting::Result<T>,
) -> dpgd_accounting::Result<(T, f64)> {
    let (mut h, mut step) = (interval, 0usize);
    loop {
        let factor = [2.0, 2.5, 2.0][step % 3];
        match f(h) {
            Err(dpgd_accounting::AccountingError::InvalidParameter { name: "grid interval", .. })
                if h * factor <= 0.1 =>
            {
                (h, step) = (h * factor, step + 1);
            }
            other => return other.map(|t| (t, h)),
        }
    }
}

fn budget(a: &BudgetArgs) -> Result<Value> {
    let run = PrivateGd::new(a.sigma, a.clip, a.steps as f64)?;
    let mut eps = serde_json::Map::new();
    for m in Conversion::ALL {
        eps.insert(m.name().to_string(), json!(run.epsilon(a.delta, m)?));
    }
    Ok(json!({
        "command": "budget",
        "setting": "full-batch private GD with filtering (every example in every step, zero-out neighbours); for Poisson-sampled DP-SGD use `dpgd account sgd`",
        "sigma": a.sigma, "steps": a.steps, "delta": a.delta, "clip": a.clip,
        "rho": run.zcdp().rho(), "mu": run.gaussian_dp().mu(), "b_norm": run.b_norm(), "epsilon": eps,
    }))
}

fn budget_table(v: &Value) -> String {
    let mut s = format!(
        "full-batch private GD with filtering (every example in every step; for Poisson-sampled DP-SGD use `dpgd account sgd`)\n  sigma = {}, {} worst-case steps, clip = {}\n  rho = {:.6} (zCDP), mu = {:.6} (GDP)\n\n  {:<16} epsilon at delta = {}\n",
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
