//! Crash safety of `dpgd train`: SIGKILL the binary at random instants (during steps, during
//! state and record writes, right after a resume starts), resume it, and repeat until it
//! finishes. After every kill: every file parses, no example is over budget, no released row
//! was lost or changed; at the end, the result is the uninterrupted run's, bit for bit.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dpgd::arch::Preset;
use dpgd::per_example::Network;
use dpgd::train::outputs::{MetricsRow, RunResult};
use dpgd::train::state::{self, Expect, Snapshot};
use dpgd::train::{RunFolder, read_json};

const EXAMPLES: usize = 600;
const MAX_STEPS: usize = 30;
const BUDGET: f64 = 12.0; // k = 12 steps at C = 1

/// DP-SGD (`privacy.method = "sgd"`): a Poisson sample of rate 0.2 per step, MAX_STEPS steps;
/// no per-example budget (the ledger is unlimited), no releases but the model.
fn sgd_config(data: &Path) -> String {
    format!(
        "name = \"kill-sgd\"\n[data]\ndir = \"{}\"\ntrain_subset = {EXAMPLES}\n[model]\npreset = \"logistic\"\n\
         [privacy]\nmethod = \"sgd\"\nsample_rate = 0.2\nsigma = 1.0\ndelta = 1e-5\nclip = 1.0\n\
         worst_case_steps = {MAX_STEPS}\n[train]\nlr = 1.0\nseed = 7\neval_every = 3\nchunk = 16\n",
        data.display()
    )
}

/// DP-SGD with individual accounting: every example charged every step in a Rényi ledger,
/// dropped when 12 full steps' worth is spent, up to MAX_STEPS steps.
fn sgd_filtered_config(data: &Path) -> String {
    sgd_config(data)
        .replace("method = \"sgd\"", "method = \"sgd-filtered\"")
        .replace("worst_case_steps = 30", "worst_case_steps = 12")
        .replace("clip = 1.0", "clip = 20.0")
        .replace("[train]\n", &format!("[train]\nmax_steps = {MAX_STEPS}\n"))
}

fn config(data: &Path) -> String {
    format!(
        "name = \"kill\"\n[data]\ndir = \"{}\"\ntrain_subset = {EXAMPLES}\n[model]\npreset = \"logistic\"\n\
         [privacy]\nmethod = \"filtered\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 12\n\
         [train]\nlr = 1.0\nseed = 7\neval_every = 3\nchunk = 16\nmax_steps = {MAX_STEPS}\n\
         [release]\nactive_count = \"noisy\"\nactive_count_sigma = 20.0\nactive_count_every = 2\n\
         [stopping]\nrule = \"best-train-accuracy\"\nevery = 3\nsigma = 30.0\n",
        data.display()
    )
}

/// `config`'s filtered run on a model the fast engine cannot express (GroupNorm), so that it
/// trains on the burn engine: 2 GroupNorm parameters and a 784 × 10 linear layer.
fn burn_config(data: &Path) -> String {
    config(data).replace(
        "preset = \"logistic\"",
        "layers = [{ kind = \"group_norm\", groups = 1 }, { kind = \"flatten\" }, { kind = \"linear\", out_features = 10 }]",
    )
}
const BURN_PARAMS: usize = 2 + 784 * 10 + 10;

fn dpgd(args: &[&str], extra: &[&Path]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dpgd"));
    cmd.args(args).args(extra).stdout(Stdio::null()).stderr(Stdio::null());
    cmd
}

fn start(cfg: &Path, run: &Path) -> Command {
    let mut c = dpgd(&["train", "--quiet", "--config"], &[cfg]);
    c.arg("--out").arg(run);
    c
}

fn resume(run: &Path) -> Command {
    dpgd(&["train", "--quiet", "--resume"], &[run])
}

fn logistic_params() -> usize {
    Network::new(&Preset::Logistic.spec()).unwrap().num_params()
}

fn expect(params: usize) -> Expect {
    Expect { params, examples: EXAMPLES, max_steps: MAX_STEPS }
}

fn rows(run: &Path) -> Vec<MetricsRow> {
    let path = RunFolder::new(run).metrics_jsonl();
    match std::fs::read_to_string(&path) {
        Ok(text) => text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Every invariant that must hold after a kill at any instant; returns the released rows.
fn check(run: &Path, before: &[MetricsRow], budget: f64, params: usize) -> Vec<MetricsRow> {
    let folder = RunFolder::new(run);
    let snap: Option<Snapshot> = state::read(&folder.state(), expect(params)).expect("the state must never be torn");
    let in_files = rows(run).len();
    // The released rows: the record files', then those the state keeps until the files catch up.
    let mut rows = rows(run);
    for r in snap.iter().flat_map(|s| s.meta.unflushed.metrics.iter()) {
        if r.step > rows.len() {
            rows.push(r.clone());
        }
    }
    if let Some(s) = &snap {
        assert!(s.spent.iter().all(|&x| x <= budget), "an example exceeded its budget");
        // The state holds its own step's releases: nothing is shown that a kill could lose.
        let last = rows.last().map_or(0, |r| r.step);
        assert_eq!(last, s.meta.step, "records end at {last}, state at {}", s.meta.step);
    } else {
        assert!(rows.is_empty(), "rows released without a durable state");
    }
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.step, i + 1, "rows are not the steps 1, 2, … in order");
    }
    assert!(rows.len() >= before.len(), "released rows vanished: {} before, {} now", before.len(), rows.len());
    assert_eq!(&rows[..before.len()], before, "a released row changed");
    let csv = std::fs::read_to_string(folder.metrics_csv()).unwrap_or_default();
    assert!(csv.is_empty() || csv.lines().count() > in_files, "metrics.csv is behind metrics.jsonl");
    for f in [folder.result(), folder.privacy()] {
        if f.exists() {
            let _: serde_json::Value = read_json(&f).unwrap();
        }
    }
    rows
}

/// A small deterministic generator for the kill delays.
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n.max(1)
    }
}

#[test]
fn kills_at_random_instants_never_lose_a_release_or_overspend_and_resume_to_the_same_result() {
    kill_trials(config, BUDGET, 8);
}

/// The same on the burn engine (a GroupNorm model): its ledger, releases and state are the
/// trainer's, so a kill at any instant never overspends and a resume ends bit for bit where the
/// uninterrupted run does.
#[test]
fn kills_on_the_burn_engine_never_lose_a_release_or_overspend_and_resume_to_the_same_result() {
    kill_trials_of(burn_config, BUDGET, 3, BURN_PARAMS);
}

/// DP-SGD's step draws its sample before its update: a killed and resumed run redraws the same
/// sample (fixed seed) and ends where the uninterrupted one does.
#[test]
fn kills_during_dp_sgd_resume_to_the_same_result() {
    kill_trials(sgd_config, f64::MAX, 4);
}

/// DP-SGD with individual accounting charges its Rényi ledger in the step, before the state
/// is durable: a kill never lets an example's charges pass its budget, and a resume ends where
/// the uninterrupted run does.
#[test]
fn kills_during_dp_sgd_with_individual_accounting_never_overspend_and_resume_to_the_same_result() {
    let budget = dpgd::accounting::individual_sgd::IndividualSgd::for_steps(
        0.2,
        1.0,
        12,
        1e-5,
        dpgd::accounting::Conversion::Cks,
    )
    .unwrap()
    .budget();
    kill_trials(sgd_filtered_config, budget, 4);
    // The same on the burn engine (`train.engine = "burn"`: the same model, as burn modules).
    let on_burn: fn(&Path) -> String = |data| {
        let text = sgd_filtered_config(data).replace("[train]\n", "[train]\nengine = \"burn\"\n");
        assert!(text.contains("engine = \"burn\""), "the trial must run on the burn engine");
        text
    };
    kill_trials(on_burn, budget, 2);
}

/// Runs the config `make(data)` once whole, then `trials` times with SIGKILLs at random
/// instants and resumes, checking every invariant after each kill and the end result.
fn kill_trials(make: fn(&Path) -> String, budget: f64, trials: usize) {
    kill_trials_of(make, budget, trials, logistic_params());
}

/// [`kill_trials`] for a model of `params` parameters.
fn kill_trials_of(make: fn(&Path) -> String, budget: f64, trials: usize, params: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    dpgd::data::synthetic::Synthetic { train: EXAMPLES, test: 200, side: 28, seed: 3 }.write(&data).unwrap();
    let cfg = tmp.path().join("cfg.toml");
    std::fs::write(&cfg, make(&data)).unwrap();

    let reference = tmp.path().join("reference");
    let t0 = Instant::now();
    assert!(start(&cfg, &reference).status().unwrap().success());
    let whole = t0.elapsed().as_millis() as u64;
    let want_result: RunResult = read_json(&RunFolder::new(&reference).result()).unwrap();
    let want_rows = rows(&reference);
    let want_state = state::read(&RunFolder::new(&reference).state(), expect(params)).unwrap().unwrap();

    let mut rng = Lcg(0x5eed);
    let mut kills = 0;
    for trial in 0..trials {
        let run: PathBuf = tmp.path().join(format!("trial-{trial}"));
        let mut seen = Vec::new();
        for attempt in 0.. {
            if RunFolder::new(&run).is_finished() {
                break;
            }
            let mut cmd = if RunFolder::new(&run).config().exists() { resume(&run) } else { start(&cfg, &run) };
            if attempt >= 30 {
                assert!(cmd.status().unwrap().success(), "trial {trial}: the final resume failed");
                continue;
            }
            // Half the kills early (process start, resume, first writes), half anywhere.
            let delay = if rng.below(2) == 0 { rng.below(whole / 4 + 1) } else { rng.below(whole + 1) };
            let mut child = cmd.spawn().unwrap();
            std::thread::sleep(Duration::from_millis(delay));
            let _ = child.kill(); // SIGKILL: no chance to clean up
            let status = child.wait().unwrap();
            kills += usize::from(!status.success());
            seen = check(&run, &seen, budget, params);
        }
        let got: RunResult = read_json(&RunFolder::new(&run).result()).unwrap();
        assert_eq!(got, want_result, "trial {trial}: the resumed run's result differs");
        assert_eq!(rows(&run), want_rows, "trial {trial}: the released rows differ");
        let s = state::read(&RunFolder::new(&run).state(), expect(params)).unwrap().unwrap();
        assert_eq!(
            (s.theta, s.spent),
            (want_state.theta.clone(), want_state.spent.clone()),
            "trial {trial}: state differs"
        );
    }
    assert!(kills >= trials, "only {kills} kills landed before a run finished: the test did not test much");
}

#[test]
fn a_folder_without_state_but_with_a_journal_from_the_old_format_is_refused_not_restarted() {
    // A run folder whose records exist but whose state is gone cannot be resumed silently.
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    dpgd::data::synthetic::Synthetic { train: EXAMPLES, test: 200, side: 28, seed: 3 }.write(&data).unwrap();
    let cfg = tmp.path().join("cfg.toml");
    std::fs::write(&cfg, config(&data)).unwrap();
    let run = tmp.path().join("run");
    let mut c = start(&cfg, &run);
    c.arg("--stop-after").arg("4");
    assert!(c.status().unwrap().success());
    std::fs::remove_file(RunFolder::new(&run).state()).unwrap();
    let out = resume(&run).stderr(Stdio::piped()).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no training state"), "{err}");
}

/// The count a progress line shows is the count the record keeps, across a kill right after
/// the line: OS-keyed noise (no `train.seed`), plain progress lines on a pipe, SIGKILL as soon
/// as the line for step 1 arrives, then a resume. Before the releases were made durable ahead
/// of the line, the resumed run drew step 1's count again (a second, uncharged release).
#[test]
fn a_count_shown_in_a_progress_line_survives_a_kill_right_after_it() {
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    dpgd::data::synthetic::Synthetic { train: 4000, test: 200, side: 28, seed: 3 }.write(&data).unwrap();
    let cfg = tmp.path().join("cfg.toml");
    let text = config(&data).replace("seed = 7\n", "").replace("active_count_every = 2", "active_count_every = 1");
    let text = text.replace("train_subset = 600", "train_subset = 4000").replace("\"logistic\"", "\"opacus-cnn\"");
    assert!(!text.contains("seed") && text.contains("opacus-cnn"), "{text}");
    std::fs::write(&cfg, text).unwrap();
    let run = tmp.path().join("run");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dpgd"))
        .args(["train", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(&run)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let shown = loop {
        let line = lines.next().expect("the run ended before its first progress line").unwrap();
        if line.starts_with("step 1/") {
            let _ = child.kill();
            break line;
        }
    };
    child.wait().unwrap();
    let shown = shown.split_whitespace().find_map(|w| w.strip_prefix("active~")).expect("the line shows the count");
    assert!(resume(&run).status().unwrap().success(), "the resumed run failed");
    let recorded = rows(&run)[0].active_count_noisy.expect("step 1 released a count");
    assert_eq!(shown, format!("{recorded:.0}"), "the line showed ~{shown}; the record says {recorded}");
}
