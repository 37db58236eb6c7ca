//! A whole training run: the step loop, progress, metrics, privacy report, checkpoints,
//! resume, the model record and the plot.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use super::checkpoint::{self, Meta};
use super::config::{ActiveRelease, Method, ValidConfig};
use super::step::{Combine, GradientPlan, apply_update, correct};
use crate::accounting::filter::IndividualFilter;
use crate::accounting::{Conversion, GaussianDp, PrivateGd, ToApproxDp};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::model::BurnModel;
use crate::noise::{NoiseSeed, add_gaussian};
use crate::per_example::Network;
use crate::plot::{Panel, Series, line_charts};

/// What a finished run reports.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// The run folder.
    pub dir: PathBuf,
    /// Steps completed.
    pub steps: usize,
    /// Final test accuracy (held-out test set).
    pub test_accuracy: f64,
    /// The privacy report written to `privacy.json`.
    pub privacy: Value,
}

/// Options that are not part of the (hashed) configuration.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Show a progress bar.
    pub progress: bool,
    /// Draw the progress bar inside this group (e.g. beneath a sweep's overall bar).
    pub multi: Option<indicatif::MultiProgress>,
    /// Stop after this many steps in this invocation (for tests of resume); None = run to the end.
    pub stop_after: Option<usize>,
}

/// Trains per `cfg` on `data`, writing into `dir`. If `dir` holds a checkpoint of the same
/// privacy-relevant configuration, continues from it; a different one is refused.
pub fn run(cfg: &ValidConfig, data: &Dataset, dir: &Path, opts: &RunOptions) -> Result<RunSummary> {
    let c = &cfg.config;
    let net = Network::new(&cfg.model)?;
    if data.train.pixels() != net.input_len() {
        return Err(Error::Config {
            field: "model".into(),
            message: format!(
                "the model expects {} input values but the images have {}",
                net.input_len(),
                data.train.pixels()
            ),
        });
    }
    let train = data.train.clone().truncated(c.data.train_subset);
    let test = data.test.clone().truncated(c.data.test_subset);
    let n = train.len();
    let k = c.privacy.steps as f64;
    let clip = c.privacy.clip;
    let private = c.privacy.method != Method::NonPrivate;
    let b_norm = if private { k * clip * clip } else { f64::MAX };
    let hash = c.privacy_hash();
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;

    // Start fresh or resume.
    let (mut theta, mut ledger, start) = match checkpoint::read(&checkpoint::state_path(dir))? {
        Some(snap) => {
            if snap.meta.config_hash != hash {
                return Err(Error::Checkpoint {
                    path: dir.into(),
                    message: "the privacy-relevant configuration (data, privacy, release, model, max_steps) differs from the \
                              run being resumed; start a new run folder instead"
                        .into(),
                });
            }
            let mut spent = snap.spent;
            if let Some(j) = checkpoint::read(&checkpoint::journal_path(dir))?
                && j.meta.config_hash == hash
                && j.meta.step >= snap.meta.step
                && j.spent.len() == spent.len()
            {
                spent = j.spent; // includes charges of steps lost after the last checkpoint
            }
            (snap.theta, IndividualFilter::from_spent(b_norm, spent)?, snap.meta.step)
        }
        None => {
            let theta = net.init_params(&mut ChaCha8Rng::seed_from_u64(c.model.init_seed));
            std::fs::write(dir.join("config.toml"), resolved_config(cfg))
                .map_err(Error::io(dir.join("config.toml")))?;
            (theta, IndividualFilter::new(n, b_norm)?, 0)
        }
    };
    let seed = c.train.seed.map_or(NoiseSeed::Os, NoiseSeed::Fixed);
    announce(cfg, seed, n, start);

    let metrics_path = dir.join("metrics.csv");
    let mut metrics = open_metrics(&metrics_path, start, c.release.active_count)?;
    let combine = if private { Combine::Clip { clip, on_nonfinite: c.privacy.on_nonfinite } } else { Combine::Sum };
    let noise_std = cfg.sigma.map_or(0.0, |s| s * clip);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(c.train.threads).build().expect("thread pool");
    let bar = progress_bar(opts.progress, cfg.max_steps, start);
    let bar = match &opts.multi {
        Some(m) if opts.progress => m.add(bar),
        _ => bar,
    };
    let started = Instant::now();
    let end = opts.stop_after.map_or(cfg.max_steps, |s| (start + s).min(cfg.max_steps));
    let mut last_acc = f64::NAN;
    let norm = c.data.normalize;
    let plan = GradientPlan::new(&net, &train, norm, combine, c.train.chunk);

    for step in start + 1..=end {
        let t0 = Instant::now();
        let sum = pool.install(|| plan.gradient_sum(&theta, &mut ledger, step))?;
        // The ledger is durable before this step's result is released.
        if private {
            checkpoint::write(&checkpoint::journal_path(dir), &meta(step, &hash, b_norm), &[], ledger.spent_all())?;
        }
        apply_update(&mut theta, sum, noise_std, c.train.lr, n, &mut seed.rng_for_step(step as u64));
        let active = release_active_count(cfg, &ledger, step, seed);
        let eval_now = step == cfg.max_steps || (c.train.eval_every > 0 && step.is_multiple_of(c.train.eval_every));
        if eval_now {
            last_acc = pool.install(|| correct(&net, &theta, &test, norm)) as f64 / test.len().max(1) as f64;
        }
        let eps_so_far = epsilon_so_far(cfg, step);
        writeln!(
            metrics,
            "{step},{:.4},{},{},{}",
            t0.elapsed().as_secs_f64(),
            eps_so_far.map_or(String::new(), |e| format!("{e:.6}")),
            if eval_now { format!("{last_acc:.6}") } else { String::new() },
            active.map_or(String::new(), |a| format!("{a:.1}"))
        )
        .map_err(Error::io(&metrics_path))?;
        metrics.flush().map_err(Error::io(&metrics_path))?;
        if step.is_multiple_of(c.train.checkpoint_every.max(1)) || step == cfg.max_steps {
            checkpoint::write(&checkpoint::state_path(dir), &meta(step, &hash, b_norm), &theta, ledger.spent_all())?;
        }
        bar.set_position(step as u64);
        bar.set_message(format!(
            "eps<={} test acc {:.2}%{}",
            eps_so_far.map_or("n/a (NOT PRIVATE)".into(), |e| format!("{e:.3}")),
            100.0 * last_acc,
            active.map_or(String::new(), |a| format!(" active~{a:.0}"))
        ));
    }
    bar.finish_and_clear();
    let steps_done = end;
    if steps_done < cfg.max_steps {
        return Ok(RunSummary { dir: dir.into(), steps: steps_done, test_accuracy: last_acc, privacy: Value::Null });
    }
    if last_acc.is_nan() {
        last_acc = correct(&net, &theta, &test, norm) as f64 / test.len().max(1) as f64;
    }
    BurnModel::from_params(&net, &theta, &cfg.device()).save(&dir.join("model.bpk"))?;
    let privacy = privacy_report(cfg, n, steps_done, seed);
    let report = serde_json::to_string_pretty(&privacy).expect("json");
    std::fs::write(dir.join("privacy.json"), report).map_err(Error::io(dir.join("privacy.json")))?;
    plot_run(dir, cfg)?;
    eprintln!(
        "done: {steps_done} steps in {:.1}s, test accuracy {:.2}%, {}",
        started.elapsed().as_secs_f64(),
        100.0 * last_acc,
        privacy["summary"].as_str().unwrap_or("")
    );
    Ok(RunSummary { dir: dir.into(), steps: steps_done, test_accuracy: last_acc, privacy })
}

fn meta(step: usize, hash: &str, budget: f64) -> Meta {
    Meta { step, config_hash: hash.to_string(), budget }
}

fn resolved_config(cfg: &ValidConfig) -> String {
    let mut text = toml::to_string_pretty(&cfg.config).expect("config serialises");
    if let Some(s) = cfg.sigma {
        text = format!("# resolved noise multiplier: sigma = {s}\n{text}");
    }
    text
}

fn announce(cfg: &ValidConfig, seed: NoiseSeed, n: usize, start: usize) {
    let c = &cfg.config;
    if c.privacy.method == Method::NonPrivate {
        eprintln!(
            "WARNING: method = non-private — no clipping, no noise. THIS RUN IS NOT PRIVATE; do not publish its results."
        );
    } else {
        let eps = total_gdp(cfg).epsilon(c.privacy.delta, c.privacy.conversion).unwrap_or(f64::NAN);
        eprintln!(
            "{:?} private GD on {n} examples: sigma = {:.4}, clip = {}, B_norm = {} ({} worst-case steps), up to {} steps; \
             ({eps:.4}, {})-DP via {}",
            c.privacy.method,
            cfg.sigma.unwrap_or(f64::NAN),
            c.privacy.clip,
            c.privacy.steps as f64 * c.privacy.clip.powi(2),
            c.privacy.steps,
            cfg.max_steps,
            c.privacy.delta,
            c.privacy.conversion
        );
        eprintln!("noise: {}", seed.describe());
    }
    if c.release.active_count == ActiveRelease::ExactNonPrivate {
        eprintln!(
            "WARNING: release.active_count = exact-non-private: active counts in metrics.csv are NOT PRIVATE (debugging only)."
        );
    }
    if start > 0 {
        eprintln!("resuming after step {start}");
    }
}

/// The whole run's Gaussian-DP guarantee: training plus the scheduled noisy counts.
fn total_gdp(cfg: &ValidConfig) -> GaussianDp {
    let c = &cfg.config;
    let sigma = cfg.sigma.expect("private runs have sigma");
    let train = PrivateGd::new(sigma, c.privacy.clip, c.privacy.steps as f64).expect("validated").gaussian_dp();
    if cfg.count_releases == 0 {
        return train;
    }
    let counts = GaussianDp::new((cfg.count_releases as f64).sqrt() / c.release.active_count_sigma).expect("validated");
    train.compose(counts)
}

/// ε of the worst case spent after `step` steps (a public quantity: min(step, k)·C² per
/// example, plus the counts released so far). None for non-private runs.
fn epsilon_so_far(cfg: &ValidConfig, step: usize) -> Option<f64> {
    let c = &cfg.config;
    let sigma = cfg.sigma?;
    let k = step.min(c.privacy.steps) as f64;
    let mut mu2 = k / (sigma * sigma);
    if c.release.active_count == ActiveRelease::Noisy {
        mu2 += (step / c.release.active_count_every) as f64 / c.release.active_count_sigma.powi(2);
    }
    GaussianDp::new(mu2.sqrt()).ok()?.epsilon(c.privacy.delta, c.privacy.conversion).ok()
}

/// The active count released at `step`, if one is due.
fn release_active_count(cfg: &ValidConfig, ledger: &IndividualFilter, step: usize, seed: NoiseSeed) -> Option<f64> {
    let r = &cfg.config.release;
    match r.active_count {
        ActiveRelease::None => None,
        _ if !step.is_multiple_of(r.active_count_every.max(1)) => None,
        ActiveRelease::ExactNonPrivate => Some(ledger.active_count_non_private() as f64),
        ActiveRelease::Noisy => {
            let mut v = [ledger.active_count_non_private() as f32];
            add_gaussian(&mut v, r.active_count_sigma, &mut seed.rng_for_step(u64::MAX - step as u64));
            Some(f64::from(v[0]))
        }
    }
}

fn open_metrics(path: &Path, start: usize, active: ActiveRelease) -> Result<std::io::BufWriter<std::fs::File>> {
    let col = match active {
        ActiveRelease::ExactNonPrivate => "active_count_NON_PRIVATE",
        _ => "active_count_noisy",
    };
    let header = format!("step,seconds,epsilon_so_far,test_accuracy,{col}");
    // Keep the rows of completed steps up to the checkpoint (rows of lost steps are dropped).
    let kept: Vec<String> = match std::fs::read_to_string(path) {
        Ok(text) if start > 0 => text
            .lines()
            .skip(1)
            .filter(|l| l.split(',').next().and_then(|s| s.parse::<usize>().ok()).is_some_and(|s| s <= start))
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    };
    let file = std::fs::File::create(path).map_err(Error::io(path))?;
    let mut w = std::io::BufWriter::new(file);
    writeln!(w, "{header}").map_err(Error::io(path))?;
    for l in kept {
        writeln!(w, "{l}").map_err(Error::io(path))?;
    }
    Ok(w)
}

fn progress_bar(show: bool, total: usize, start: usize) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} step {pos}/{len} [{bar:30}] {msg} | {elapsed} ETA {eta}")
            .expect("template")
            .progress_chars("=> "),
    );
    bar.set_position(start as u64);
    bar
}

/// `privacy.json`: the guarantee, its inputs, and ε under every valid conversion.
fn privacy_report(cfg: &ValidConfig, n: usize, steps: usize, seed: NoiseSeed) -> Value {
    let c = &cfg.config;
    let p = &c.privacy;
    if p.method == Method::NonPrivate {
        return json!({
            "method": "non-private", "private": false, "epsilon": null, "steps_run": steps,
            "summary": "NOT PRIVATE (no clipping, no noise)",
        });
    }
    let total = total_gdp(cfg);
    let mut eps = serde_json::Map::new();
    for m in Conversion::ALL {
        eps.insert(m.name().into(), json!(total.epsilon(p.delta, m).ok()));
    }
    let epsilon = total.epsilon(p.delta, p.conversion).ok();
    let sigma = cfg.sigma.expect("private");
    json!({
        "method": p.method, "private": true,
        "delta": p.delta, "conversion": p.conversion, "epsilon": epsilon, "epsilon_by_conversion": eps,
        "target_epsilon": p.epsilon,
        "rho": total.to_zcdp().rho(), "mu": total.mu(),
        "training": {
            "sigma": sigma, "clip": p.clip, "noise_std": sigma * p.clip,
            "b_norm": p.steps as f64 * p.clip * p.clip, "worst_case_steps": p.steps,
            "max_steps": cfg.max_steps, "steps_run": steps,
            "rho": p.steps as f64 / (2.0 * sigma * sigma),
            "guarantee": "B_norm/(2 sigma^2 C^2)-zCDP and sqrt(B_norm)/(sigma C)-GDP whatever the number of steps (001 Prop. 5.1)",
        },
        "active_count_releases": {
            "mode": c.release.active_count, "count": cfg.count_releases,
            "sigma": (c.release.active_count == ActiveRelease::Noisy).then_some(c.release.active_count_sigma),
        },
        "ledger": { "examples": n, "budget_per_example": p.steps as f64 * p.clip * p.clip, "unit": "squared clipped gradient norm" },
        "noise": seed.describe(), "fixed_seed": matches!(seed, NoiseSeed::Fixed(_)),
        "test_accuracy_note": "test accuracy is measured on the held-out test set, not on the training data the guarantee protects",
        "summary": format!("({}, {})-DP via {} ({})", epsilon.map_or("?".into(), |e| format!("{e:.4}")), p.delta, p.conversion,
            if matches!(seed, NoiseSeed::Fixed(_)) { "FIXED noise seed: for experiments only" } else { "OS-seeded CSPRNG noise" }),
    })
}

/// `accuracy.png`: test accuracy (and the released active count) against the step.
fn plot_run(dir: &Path, cfg: &ValidConfig) -> Result<()> {
    let text = std::fs::read_to_string(dir.join("metrics.csv")).map_err(Error::io(dir.join("metrics.csv")))?;
    let (mut acc, mut active) = (Vec::new(), Vec::new());
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let step: f64 = f[0].parse().unwrap_or(f64::NAN);
        if let Ok(a) = f[3].parse::<f64>() {
            acc.push((step, 100.0 * a));
        }
        if let Ok(a) = f[4].parse::<f64>() {
            active.push((step, a));
        }
    }
    let k = cfg.config.privacy.steps as f64;
    let mut panels = vec![Panel {
        title: format!("{} — test accuracy", cfg.config.name),
        x_label: "step".into(),
        y_label: "test accuracy (%)".into(),
        series: vec![Series { label: "test accuracy".into(), points: acc }],
        markers: vec![k],
    }];
    if !active.is_empty() {
        let label = match cfg.config.release.active_count {
            ActiveRelease::ExactNonPrivate => "active points (exact, NON-PRIVATE)",
            _ => "active points (noisy count)",
        };
        panels.push(Panel {
            title: "active points".into(),
            x_label: "step".into(),
            y_label: "active points".into(),
            series: vec![Series { label: label.into(), points: active }],
            markers: vec![k],
        });
    }
    line_charts(&dir.join("accuracy.png"), &panels)
}
