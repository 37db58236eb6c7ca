//! A whole training run: the step loop, progress, metrics, privacy report, checkpoints,
//! resume, the model record and the plot.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use super::checkpoint::{self, Best, Meta};
use super::config::{ACTIVE_COUNT, ActiveRelease, Method, StopRule, TRAIN_ACCURACY, ValidConfig};
use super::privacy::{self, RunSession};
use super::step::{Combine, GradientPlan, apply_update, correct};
use crate::accounting::ToApproxDp;
use crate::accounting::filter::IndividualFilter;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::model::BurnModel;
use crate::noise::NoiseSeed;
use crate::per_example::Network;
use crate::plot::{Panel, Series, SeriesLabelPosition, line_charts};

/// What a finished run reports.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// The run folder.
    pub dir: PathBuf,
    /// Steps completed.
    pub steps: usize,
    /// The step whose model the run returns: the last one, or the best-train-accuracy
    /// stopping rule's choice.
    pub selected_step: usize,
    /// Test accuracy of the returned model (held-out test set).
    pub test_accuracy: f64,
    /// Test accuracy after B_norm/C² steps (`privacy.steps`). Up to that step a filtered run
    /// is exactly plain private GD with the same σ (no example can run out of budget before
    /// it), so this is plain GD's result.
    pub test_accuracy_at_k: Option<f64>,
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
    /// Worker threads, overriding `train.threads` (e.g. when a sweep trains runs side by side).
    pub threads: Option<usize>,
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
    let (mut theta, mut ledger, start, mut best) = match checkpoint::read(&checkpoint::state_path(dir))? {
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
            let best = snap.meta.best.map(|b| (b, snap.best_theta));
            (snap.theta, IndividualFilter::from_spent(b_norm, spent)?, snap.meta.step, best)
        }
        None => {
            let theta = net.init_params(&mut ChaCha8Rng::seed_from_u64(c.model.init_seed));
            std::fs::write(dir.join("config.toml"), resolved_config(cfg))
                .map_err(Error::io(dir.join("config.toml")))?;
            (theta, IndividualFilter::new(n, b_norm)?, 0, None)
        }
    };
    let seed = c.train.seed.map_or(NoiseSeed::Os, NoiseSeed::Fixed);
    let session = if private { Some(RunSession::open(cfg, start)?) } else { None };
    announce(cfg, session.as_ref(), seed, n, start);

    let metrics_path = dir.join("metrics.csv");
    let mut metrics = open_metrics(&metrics_path, start, c.release.active_count)?;
    let combine = if private { Combine::Clip { clip, on_nonfinite: c.privacy.on_nonfinite } } else { Combine::Sum };
    let noise_std = cfg.sigma.map_or(0.0, |s| s * clip);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads.unwrap_or(c.train.threads))
        .build()
        .expect("thread pool");
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
    let patience = c.stopping.patience;
    let exhausted = |b: &Best| patience > 0 && b.stale >= patience;
    let mut stopped = best.as_ref().is_some_and(|(b, _)| exhausted(b));
    let mut done = start;

    for step in start + 1..=end {
        if stopped {
            break;
        }
        let t0 = Instant::now();
        let sum = pool.install(|| plan.gradient_sum(&theta, &mut ledger, step))?;
        // The ledger is durable before this step's result is released.
        if private {
            checkpoint::write(
                &checkpoint::journal_path(dir),
                &meta(step, &hash, b_norm, None),
                &[],
                &[],
                ledger.spent_all(),
            )?;
        }
        apply_update(&mut theta, sum, noise_std, cfg.lr_at(step), n, &mut seed.rng_for_step(step as u64));
        let released = match &session {
            Some(s) => s.release(step, seed, |m| match m {
                ACTIVE_COUNT => ledger.active_count_non_private() as f64,
                _ => pool.install(|| correct(&net, &theta, &train, norm)) as f64,
            })?,
            None => Vec::new(),
        };
        let value = |name: &str| released.iter().find(|(m, _)| *m == name).map(|r| r.1);
        let active = value(ACTIVE_COUNT).or_else(|| {
            (c.release.active_count == ActiveRelease::ExactNonPrivate
                && step.is_multiple_of(c.release.active_count_every.max(1)))
            .then(|| ledger.active_count_non_private() as f64)
        });
        let train_acc = value(TRAIN_ACCURACY).map(|count| count / n as f64);
        if let Some(a) = train_acc {
            match &mut best {
                Some((b, _)) if a <= b.noisy_train_accuracy => b.stale += 1,
                _ => best = Some((Best { step, noisy_train_accuracy: a, stale: 0 }, theta.clone())),
            }
            stopped = best.as_ref().is_some_and(|(b, _)| exhausted(b));
        }
        let eval_now = step == cfg.max_steps
            || step == c.privacy.steps
            || stopped
            || (c.train.eval_every > 0 && step.is_multiple_of(c.train.eval_every));
        if eval_now {
            last_acc = pool.install(|| correct(&net, &theta, &test, norm)) as f64 / test.len().max(1) as f64;
        }
        // A step whose noisy statistics were released is checkpointed before they are written
        // out: a resumed run never releases them a second time (their cost is counted once).
        // The stopping rule's state goes with it.
        if step.is_multiple_of(c.train.checkpoint_every.max(1)) || step == cfg.max_steps || !released.is_empty() {
            let (b, bt) = best.as_ref().map_or((None, &[][..]), |(b, t)| (Some(*b), &t[..]));
            checkpoint::write(
                &checkpoint::state_path(dir),
                &meta(step, &hash, b_norm, b),
                &theta,
                bt,
                ledger.spent_all(),
            )?;
        }
        let eps_so_far = privacy::epsilon_so_far(cfg, step);
        let cell = |v: Option<f64>, digits: usize| v.map_or(String::new(), |v| format!("{v:.digits$}"));
        writeln!(
            metrics,
            "{step},{:.4},{},{},{},{}",
            t0.elapsed().as_secs_f64(),
            cell(eps_so_far, 6),
            cell(eval_now.then_some(last_acc), 6),
            cell(active, 1),
            cell(train_acc, 6)
        )
        .map_err(Error::io(&metrics_path))?;
        metrics.flush().map_err(Error::io(&metrics_path))?;
        done = step;
        bar.set_position(step as u64);
        bar.set_message(format!(
            "eps<={} test acc {:.2}%{}{}",
            eps_so_far.map_or("n/a (NOT PRIVATE)".into(), |e| format!("{e:.3}")),
            100.0 * last_acc,
            active.map_or(String::new(), |a| format!(" active~{a:.0}")),
            best.as_ref().map_or(String::new(), |(b, _)| format!(" best@{}", b.step))
        ));
    }
    bar.finish_and_clear();
    if !stopped && done < cfg.max_steps {
        return Ok(RunSummary {
            dir: dir.into(),
            steps: done,
            selected_step: done,
            test_accuracy: last_acc,
            test_accuracy_at_k: None,
            privacy: Value::Null,
        });
    }
    let (selected_step, model) = match (c.stopping.rule, &best) {
        (StopRule::BestTrainAccuracy, Some((b, t))) => (b.step, t),
        _ => (done, &theta),
    };
    let test_accuracy = correct(&net, model, &test, norm) as f64 / test.len().max(1) as f64;
    let test_accuracy_at_k = accuracy_at(&metrics_path, c.privacy.steps)?;
    BurnModel::from_params(&net, model, &cfg.device()).save(&dir.join("model.bpk"))?;
    let privacy = privacy::report(cfg, session.as_ref(), n, done, seed);
    let result = json!({
        "steps_run": done, "stopped_early": done < cfg.max_steps, "selected_step": selected_step,
        "test_accuracy": test_accuracy, "test_accuracy_at_k": test_accuracy_at_k, "k": c.privacy.steps,
        "epsilon": privacy["epsilon"], "seconds": started.elapsed().as_secs_f64(),
    });
    write_json(&dir.join("result.json"), &result)?;
    // privacy.json last: its presence marks the run finished.
    write_json(&dir.join("privacy.json"), &privacy)?;
    plot_run(dir, cfg)?;
    eprintln!(
        "done: {done} steps in {:.1}s, model of step {selected_step}: test accuracy {:.2}%, {}",
        started.elapsed().as_secs_f64(),
        100.0 * test_accuracy,
        privacy["summary"].as_str().unwrap_or("")
    );
    Ok(RunSummary { dir: dir.into(), steps: done, selected_step, test_accuracy, test_accuracy_at_k, privacy })
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(value).expect("json")).map_err(Error::io(path))
}

/// The test accuracy recorded in `metrics.csv` at `step`, if any.
fn accuracy_at(path: &Path, step: usize) -> Result<Option<f64>> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    Ok(text.lines().skip(1).find_map(|l| {
        let mut f = l.split(',');
        (f.next()?.parse::<usize>().ok()? == step).then(|| f.nth(2)?.parse().ok())?
    }))
}

fn meta(step: usize, hash: &str, budget: f64, best: Option<Best>) -> Meta {
    Meta { step, config_hash: hash.to_string(), budget, best }
}

fn resolved_config(cfg: &ValidConfig) -> String {
    let mut text = toml::to_string_pretty(&cfg.config).expect("config serialises");
    if let Some(s) = cfg.sigma {
        text = format!("# resolved noise multiplier: sigma = {s}\n{text}");
    }
    text
}

fn announce(cfg: &ValidConfig, session: Option<&RunSession>, seed: NoiseSeed, n: usize, start: usize) {
    let c = &cfg.config;
    if let Some(session) = session {
        let eps = session.guarantee().epsilon(c.privacy.delta, c.privacy.conversion).unwrap_or(f64::NAN);
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
        if c.stopping.rule == StopRule::BestTrainAccuracy {
            eprintln!(
                "stopping: from step {} the training accuracy is released every {} steps as a noisy count (std {}), \
                 accounted above; the model with the highest released accuracy is kept",
                c.privacy.steps, c.stopping.every, c.stopping.sigma
            );
        }
    } else {
        eprintln!(
            "WARNING: method = non-private — no clipping, no noise. THIS RUN IS NOT PRIVATE; do not publish its results."
        );
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

fn open_metrics(path: &Path, start: usize, active: ActiveRelease) -> Result<std::io::BufWriter<std::fs::File>> {
    let col = match active {
        ActiveRelease::ExactNonPrivate => "active_count_NON_PRIVATE",
        _ => "active_count_noisy",
    };
    let header = format!("step,seconds,epsilon_so_far,test_accuracy,{col},train_accuracy_noisy");
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

/// `accuracy.png`: test accuracy (and the released active count) against the step.
fn plot_run(dir: &Path, cfg: &ValidConfig) -> Result<()> {
    let text = std::fs::read_to_string(dir.join("metrics.csv")).map_err(Error::io(dir.join("metrics.csv")))?;
    let (mut acc, mut train_acc, mut active) = (Vec::new(), Vec::new(), Vec::new());
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let step: f64 = f[0].parse().unwrap_or(f64::NAN);
        let col = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
        acc.extend(col(3).map(|a| (step, 100.0 * a)));
        active.extend(col(4).map(|a| (step, a)));
        train_acc.extend(col(5).map(|a| (step, 100.0 * a)));
    }
    let mut series = vec![Series { label: "test accuracy".into(), points: acc }];
    if !train_acc.is_empty() {
        series.push(Series { label: "training accuracy (noisy count)".into(), points: train_acc });
    }
    let k = cfg.config.privacy.steps as f64;
    let mut panels = vec![Panel {
        title: format!("{} — test accuracy", cfg.config.name),
        x_label: "step".into(),
        y_label: "accuracy (%)".into(),
        series,
        markers: vec![k],
        y_from_zero: false,
        legend: SeriesLabelPosition::LowerRight,
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
            y_from_zero: true,
            legend: SeriesLabelPosition::LowerLeft,
        });
    }
    line_charts(&dir.join("accuracy.png"), &panels)
}
