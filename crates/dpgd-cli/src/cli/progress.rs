//! The CLI's observers: an indicatif bar when stderr is a terminal, plain periodic lines when
//! it is not (nohup, Slurm, CI), and the run's end summary.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dpgd::sweep::{PlannedRun, SweepObserver};
use dpgd::train::Observer;
use dpgd::train::observer::{FinishInfo, StartInfo, StepReport, Warning};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How a run shows progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A bar (stderr is a terminal).
    Bar,
    /// A plain line every [`LINE_EVERY`] (stderr is a file or a pipe).
    Lines,
    /// Nothing but warnings and the end summary (`--quiet`).
    Quiet,
}

/// Seconds between two plain progress lines.
const LINE_EVERY: Duration = Duration::from_secs(30);

impl Mode {
    pub(crate) fn detect(quiet: bool) -> Self {
        if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Bar
        } else {
            Mode::Lines
        }
    }
}

/// One run's progress on stderr.
pub(crate) struct RunProgress {
    mode: Mode,
    bar: ProgressBar,
    started: Instant,
    last_line: Option<Instant>,
    first_step: usize,
    skipped: usize,
    prefix: String,
    /// Set once the NOT PRIVATE sentence was printed (shared by a sweep's runs: once per sweep).
    said_not_private: Arc<AtomicBool>,
}

impl RunProgress {
    pub(crate) fn new(mode: Mode, multi: Option<&MultiProgress>, prefix: String) -> Self {
        Self::sharing(mode, multi, prefix, Arc::new(AtomicBool::new(false)))
    }

    fn sharing(mode: Mode, multi: Option<&MultiProgress>, prefix: String, said: Arc<AtomicBool>) -> Self {
        let bar = match mode {
            Mode::Bar => {
                let bar = ProgressBar::new(0);
                bar.set_style(
                    ProgressStyle::with_template(
                        "{prefix}step {pos}/{len} [{bar:30}] {msg} | confidential: {elapsed} ETA {eta}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                bar.set_prefix(prefix.clone());
                match multi {
                    Some(m) => m.add(bar),
                    None => bar,
                }
            }
            _ => ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::hidden()),
        };
        Self {
            mode,
            bar,
            started: Instant::now(),
            last_line: None,
            first_step: 0,
            skipped: 0,
            prefix,
            said_not_private: said,
        }
    }

    fn say(&self, line: &str) {
        if self.mode == Mode::Bar {
            self.bar.println(line);
        } else {
            eprintln!("{}{line}", self.prefix);
        }
    }
}

/// `95.12%`, or `–` before the first evaluation.
fn percent(v: Option<f64>) -> String {
    v.map_or("–".into(), |a| format!("{:.2}%", 100.0 * a))
}

fn message(r: &StepReport) -> String {
    let mut m = format!(
        "eps<={} test acc {}",
        r.epsilon_so_far.map_or("n/a (NOT PRIVATE)".into(), |e| format!("{e:.3}")),
        percent(r.test_accuracy)
    );
    if let Some(a) = r.active_count_noisy {
        m += &format!(" active~{a:.0}");
    }
    if let Some(b) = r.best_step {
        m += &format!(" best@{b}");
    }
    m
}

impl Observer for RunProgress {
    fn started(&mut self, info: &StartInfo) {
        self.first_step = info.resumed_after;
        self.started = Instant::now();
        let what = info.method.describe();
        self.bar.set_length(info.max_steps as u64);
        self.bar.set_position(info.resumed_after as u64);
        if self.mode == Mode::Quiet {
            return;
        }
        let sigma = info.sigma.map_or(String::new(), |s| format!(", sigma = {s:.4}"));
        // The reasons follow in the warning; here only the verdict.
        let guarantee = if info.guarantee.starts_with("NOT PRIVATE") { "NOT PRIVATE" } else { &info.guarantee };
        let schedule = match info.sample_rate {
            Some(q) => format!(
                "{} steps, each on a Poisson sample of rate {q} (expected batch {})",
                info.max_steps,
                q * info.examples as f64
            ),
            None => format!("k = {}, up to {} steps", info.worst_case_steps, info.max_steps),
        };
        let on = info.device.as_ref().map_or(String::new(), |d| format!(" on {d}"));
        self.say(&format!(
            "{}: {what} on {} examples ({}{on}), {schedule}{sigma}; {guarantee}",
            info.name, info.examples, info.engine
        ));
        self.say(&format!("noise: {}", info.noise));
        if info.resumed_after > 0 {
            self.say(&format!("resuming after step {}", info.resumed_after));
        }
    }

    fn step(&mut self, r: &StepReport) {
        self.bar.set_position(r.step as u64);
        self.bar.set_message(message(r));
        if self.mode != Mode::Lines {
            return;
        }
        let due = self.last_line.is_none_or(|t| t.elapsed() >= LINE_EVERY) || r.step == r.max_steps;
        if due {
            self.last_line = Some(Instant::now());
            let done = r.step.saturating_sub(self.first_step).max(1) as f64;
            let per_step = self.started.elapsed().as_secs_f64() / done;
            let eta = per_step * r.max_steps.saturating_sub(r.step) as f64;
            // The ETA tracks how many examples still train: the operator's, not for a published log.
            eprintln!(
                "{}step {}/{} {} | confidential: ETA {}",
                self.prefix,
                r.step,
                r.max_steps,
                message(r),
                duration(eta)
            );
        }
    }

    fn warning(&mut self, w: &Warning) {
        // Once per sweep, and the first skip only (the rest are counted in the run's files).
        match w {
            Warning::NotPrivate(_) if self.said_not_private.swap(true, Ordering::Relaxed) => return,
            Warning::NonFiniteSkipped { count, .. } => {
                self.skipped += count;
                if self.skipped > *count {
                    return;
                }
            }
            _ => {}
        }
        self.say(&w.to_string());
    }

    fn finished(&mut self, f: &FinishInfo) {
        self.bar.finish_and_clear();
        let took = duration(self.started.elapsed().as_secs_f64());
        self.say(&format!(
            "done: {} steps; returned model of step {}: test accuracy {:.2}%",
            f.steps,
            f.selected_step,
            100.0 * f.test_accuracy
        ));
        let beyond_k = f.method.training().beyond_k().filter(|_| f.steps > f.worst_case_steps);
        if let (Some(at_k), Some((first_k, ours))) = (f.test_accuracy_at_k, beyond_k) {
            let kept = f.active_after_k.map_or(String::new(), |(step, n)| {
                format!("; ~{n:.0} of {} examples (noisy count) were still training at step {step}", f.examples)
            });
            // Two models near chance level (a diverged run) differ by noise: no gain is claimed.
            let gain = if f.near_chance(f.test_accuracy.max(at_k)) {
                format!(
                    "both near chance level ({:.2}%, always answering the test split's most common class): the run \
                     did not learn (lower train.lr?), so no gain is claimed",
                    100.0 * f.chance
                )
            } else {
                format!("{:+.2} points", 100.0 * (f.test_accuracy - at_k))
            };
            self.say(&format!(
                "{first_k} at step k = {} (same sigma): {:.2}%; {ours}: {:.2}% ({gain}){kept}",
                f.worst_case_steps,
                100.0 * at_k,
                100.0 * f.test_accuracy,
            ));
        }
        let guarantee = if f.guarantee.starts_with("NOT PRIVATE") { "NOT PRIVATE (see above)" } else { &f.guarantee };
        self.say(guarantee);
        // Wall time tracks how many examples are still training: the operator's only.
        self.say(&format!("confidential (operator only, do not publish): wall time {took}"));
    }
}

fn duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// A sweep's progress: an overall bar (or lines) above each run's.
pub(crate) struct SweepProgress {
    mode: Mode,
    multi: MultiProgress,
    overall: ProgressBar,
    said_not_private: Arc<AtomicBool>,
}

impl SweepProgress {
    pub(crate) fn new(mode: Mode) -> Self {
        let multi = MultiProgress::new();
        let overall = if mode == Mode::Bar { multi.add(ProgressBar::new(0)) } else { ProgressBar::hidden() };
        overall.set_style(
            ProgressStyle::with_template("sweep: {pos}/{len} runs [{bar:30}] | ETA {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Self { mode, multi, overall, said_not_private: Arc::new(AtomicBool::new(false)) }
    }

    pub(crate) fn finish(&self) {
        self.overall.finish_and_clear();
    }
}

impl SweepObserver for SweepProgress {
    fn planned(&self, selected: usize, to_train: usize) {
        self.overall.set_length(selected as u64);
        self.overall.set_position((selected - to_train) as u64);
        if self.mode != Mode::Bar {
            eprintln!("sweep: {selected} runs selected, {to_train} to train");
        }
    }

    fn run_observer(&self, run: &PlannedRun) -> Box<dyn Observer + Send + '_> {
        let mode = if self.mode == Mode::Lines { Mode::Lines } else { self.mode };
        let said = Arc::clone(&self.said_not_private);
        Box::new(RunProgress::sharing(mode, Some(&self.multi), format!("[{}] ", run.id), said))
    }

    fn run_done(&self, run: &PlannedRun) {
        self.overall.inc(1);
        if self.mode == Mode::Lines {
            eprintln!("sweep: {} done ({}/{})", run.id, self.overall.position(), self.overall.length().unwrap_or(0));
        }
    }
}
