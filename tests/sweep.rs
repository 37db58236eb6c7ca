//! Sweeps: a 2 × 2 grid on a synthetic fixture end to end, resumable, extendable, and bad
//! sweep files rejected before any run starts.

mod common;

use std::path::{Path, PathBuf};

use dpgd::sweep::{ExecuteOptions, QuietSweep, execute, plan, plan_with, report};
use dpgd::train::{Override, RunFolder, RunOptions, Silent, run};

fn setup(dir: &Path, grid: &str) -> PathBuf {
    let base = dir.join("base.toml");
    let privacy = "method = \"plain\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nsteps = 4";
    std::fs::write(&base, common::fixture_config("base", "logistic", (600, 300), privacy, "lr = 1.0\neval_every = 2"))
        .unwrap();
    let sweep = dir.join("sweep.toml");
    std::fs::write(
        &sweep,
        format!("name = \"tiny\"\nbase = \"{}\"\n[set]\n\"train.chunk\" = 8\n[grid]\n{grid}", base.display()),
    )
    .unwrap();
    sweep
}

#[test]
fn a_tiny_grid_runs_resumes_and_extends() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("results");
    let sweep = setup(tmp.path(), "\"privacy.method\" = [\"plain\", \"filtered\"]\nseeds = [1, 2]\n");
    let (_, runs) = plan(&sweep).unwrap();
    assert_eq!(runs.len(), 4);
    // Interrupt one run half way, as a killed sweep would leave it.
    let first = &runs[0];
    let data = dpgd::data::Dataset::load(&first.config.config().data.dir, Some(10)).unwrap();
    let partial = run(
        &first.config,
        &data,
        &out.join("runs").join(&first.id),
        &RunOptions { stop_after: Some(2), ..Default::default() },
        &mut Silent,
    )
    .unwrap();
    assert_eq!(partial.steps, 2);
    assert_eq!(
        execute(&out, &runs, &ExecuteOptions::default(), &QuietSweep).unwrap(),
        4,
        "three fresh runs and the resumed one"
    );
    let rows = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    assert_eq!(rows.lines().count(), 4);
    assert!(
        std::fs::read_to_string(out.join("results.csv"))
            .unwrap()
            .starts_with("id,privacy.method,train.seed,private,epsilon,epsilon_of_configuration,sigma,test_accuracy")
    );
    // Nothing finished is redone.
    assert_eq!(execute(&out, &runs, &ExecuteOptions::default(), &QuietSweep).unwrap(), 0);
    // Editing the sweep under finished runs is refused, naming run and field, and loses nothing.
    let edited = std::fs::read_to_string(&sweep).unwrap().replace("\"train.chunk\" = 8", "\"train.lr\" = 0.5");
    std::fs::write(&sweep, edited).unwrap();
    let (_, changed) = plan(&sweep).unwrap();
    let e = execute(&out, &changed, &ExecuteOptions::default(), &QuietSweep).unwrap_err().to_string();
    assert!(e.contains(&changed[0].id) && e.contains("train.lr: 1.0 -> 0.5"), "{e}");
    assert_eq!(std::fs::read_to_string(out.join("results.jsonl")).unwrap(), rows);
    // Adding grid points runs only the new ones.
    let sweep = setup(tmp.path(), "\"privacy.method\" = [\"plain\", \"filtered\"]\nseeds = [1, 2, 3]\n");
    let (_, runs) = plan(&sweep).unwrap();
    assert_eq!(execute(&out, &runs, &ExecuteOptions::default(), &QuietSweep).unwrap(), 2);
    let table = report(&out).unwrap();
    assert!(table.contains("privacy.method=filtered | 3 |"), "{table}");
    assert!(table.contains("privacy.method=plain | 3 |"), "{table}");
}

#[test]
fn cases_cross_the_grid_run_two_at_a_time_and_are_reused_by_other_sweeps() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("results");
    let cases = "[cases.small]\n\"privacy.clip\" = 0.5\n[cases.noisy-count]\n\"privacy.method\" = \"filtered\"\n\
                 \"train.max_steps\" = 6\n\"release.active_count\" = \"noisy\"\n\"release.active_count_every\" = 2\n";
    let sweep = setup(tmp.path(), &format!("seeds = [1, 2]\n{cases}"));
    let (file, runs) = plan(&sweep).unwrap();
    assert_eq!(file.cases.len(), 2);
    let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["case-noisy-count_seed-1", "case-small_seed-1", "case-noisy-count_seed-2", "case-small_seed-2"]);
    assert_eq!(runs[1].config.config().privacy.clip, 0.5);
    assert_eq!(runs[0].config.max_steps(), 6);
    // A subset first (as when a table is filled in over several invocations), then the rest.
    let only = ExecuteOptions { only: vec![("case".into(), "small".into())], ..Default::default() };
    assert_eq!(execute(&out, &runs, &only, &QuietSweep).unwrap(), 2);
    assert_eq!(std::fs::read_to_string(out.join("results.jsonl")).unwrap().lines().count(), 2);
    let opts = ExecuteOptions { jobs: 2, ..Default::default() };
    assert_eq!(execute(&out, &runs, &opts, &QuietSweep).unwrap(), 2);
    let table = report(&out).unwrap();
    assert!(table.contains("case=small | 2 |"), "{table}");
    assert!(out.join("report.png").exists());
    assert!(out.join("active.png").exists(), "the noisy active counts are plotted");
    // Two at a time gives the same results as one at a time (fixed seeds, deterministic sums).
    let serial = tmp.path().join("serial");
    execute(&serial, &runs, &ExecuteOptions::default(), &QuietSweep).unwrap();
    let acc = |dir: &Path| std::fs::read_to_string(dir.join("results.csv")).unwrap();
    assert_eq!(acc(&out), acc(&serial));
    // Another sweep with one identical run copies it instead of training it.
    let other = tmp.path().join("other.toml");
    let text = std::fs::read_to_string(&sweep).unwrap().replace("seeds = [1, 2]", "seeds = [2]");
    let header = format!("name = \"other\"\nreuse = [\"{}\"]", out.display());
    std::fs::write(&other, text.replace("name = \"tiny\"", &header)).unwrap();
    let (file, runs) = plan(&other).unwrap();
    let opts = ExecuteOptions { reuse: file.reuse.clone(), ..Default::default() };
    assert_eq!(execute(&tmp.path().join("other"), &runs, &opts, &QuietSweep).unwrap(), 0, "both runs were copied");
    assert_eq!(std::fs::read_to_string(tmp.path().join("other/results.jsonl")).unwrap().lines().count(), 2);
}

/// `dpgd sweep --audit canaries=M`: every run audits itself, the sweep file unchanged.
#[test]
fn every_run_of_an_audited_sweep_audits_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("results");
    let sweep = setup(tmp.path(), "\"privacy.method\" = [\"plain\", \"filtered\"]\nseeds = [1]\n");
    let audit = [Override::parse_set("audit.canaries=100").unwrap()];
    let (_, runs) = plan_with(&sweep, &audit).unwrap();
    assert!(runs.iter().all(|r| r.config.config().audit.as_ref().is_some_and(|a| a.canaries == 100)));
    execute(&out, &runs, &ExecuteOptions::default(), &QuietSweep).unwrap();
    for r in &runs {
        let folder = RunFolder::new(out.join("runs").join(&r.id));
        let report: serde_json::Value = dpgd::train::read_json(&folder.audit()).unwrap();
        assert_eq!(report["consistent"], true, "{}: {report}", r.id);
    }
    let (_, plain) = plan(&sweep).unwrap();
    assert!(plain.iter().all(|r| r.config.config().audit.is_none()));
}

#[test]
fn a_case_with_its_own_seeds_runs_at_those_instead_of_the_grids() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = "[cases.more]\nseeds = [1, 2, 3]\n\"privacy.clip\" = 0.5\n[cases.usual]\n\"privacy.clip\" = 2.0\n";
    let sweep = setup(tmp.path(), &format!("seeds = [1, 2]\n{cases}"));
    let (_, runs) = plan(&sweep).unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    // Seeds still vary slowest: every case at its first seed, then at its second, ...
    assert_eq!(
        ids,
        ["case-more_seed-1", "case-usual_seed-1", "case-more_seed-2", "case-usual_seed-2", "case-more_seed-3"]
    );
    let seeds: Vec<Option<u64>> = runs.iter().map(|r| r.config.config().train.seed).collect();
    assert_eq!(seeds, [Some(1), Some(1), Some(2), Some(2), Some(3)]);
    assert_eq!(runs[4].config.config().privacy.clip, 0.5);
    assert_eq!(runs[3].config.config().privacy.clip, 2.0);
}

#[test]
fn a_sweep_removes_the_base_fields_it_unsets_before_it_sets_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("sgd.toml");
    let privacy = "method = \"sgd\"\nsample_rate = 0.1\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nsteps = 4";
    std::fs::write(&base, common::fixture_config("sgd", "logistic", (600, 300), privacy, "lr = 1.0")).unwrap();
    let sweep = tmp.path().join("sweep.toml");
    let write = |unset: &str| {
        let set = "[set]\n\"privacy.method\" = \"filtered\"\n[grid]\n\"train.lr\" = [0.5, 1.0]\n";
        std::fs::write(&sweep, format!("name = \"u\"\nbase = \"{}\"\n{unset}{set}", base.display())).unwrap();
    };
    // Without `unset`, the DP-SGD base's sample rate stays and the filtered method refuses it.
    write("");
    assert!(plan(&sweep).unwrap_err().to_string().contains("sample_rate"));
    write("unset = [\"privacy.sample_rate\"]\n");
    let (_, runs) = plan(&sweep).unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.config.config().privacy.sample_rate.is_none()));
}

#[test]
fn bad_sweep_files_fail_before_any_run_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    for (grid, want) in [
        ("\"privacy.epsilonn\" = [1.0]\n", "epsilonn"),
        ("\"privacy.epsilon\" = []\n", "grid.privacy.epsilon"),
        ("\"privacy.epsilon\" = [-1.0]\n", "privacy.epsilon"),
        ("\"privacy.method\" = \"plain\"\n", "grid.privacy.method"),
        ("seeds = [1]\n[cases.a]\n\"privacy.clipp\" = 1.0\n", "case-a"),
        ("seeds = [1]\n[cases.a]\n\"privacy.clip\" = -1.0\n", "privacy.clip"),
        ("seeds = [1]\n[cases.a]\nseeds = []\n", "cases.a.seeds"),
    ] {
        let sweep = setup(tmp.path(), grid);
        let e = plan(&sweep).unwrap_err().to_string();
        assert!(e.contains(want), "expected `{want}` in: {e}");
    }
    // A misspelt field set by the sweep file is placed there, not on the command line.
    let sweep = setup(tmp.path(), "\"train.lrr\" = [1.0]\n");
    let e = plan(&sweep).unwrap_err().to_string();
    assert!(e.contains(&format!("(set in {})", sweep.display())) && !e.contains("command line"), "{e}");
    let sweep = tmp.path().join("bad.toml");
    std::fs::write(&sweep, "name = \"x\"\nbase = \"b.toml\"\ngird = 1\n").unwrap();
    assert!(plan(&sweep).unwrap_err().to_string().contains("gird"));
    assert!(!tmp.path().join("results").exists(), "no run may start");
}

#[test]
fn the_committed_configs_and_sweep_files_are_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    let sorted = |mut files: Vec<PathBuf>| {
        files.sort();
        files
    };
    let tomls = |dir: &Path| {
        sorted(
            std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "toml"))
                .collect(),
        )
    };
    // The training configs, and the base configs the studies pin (experiments/base-*.toml).
    let configs = tomls(&root.join("configs"));
    assert!(!configs.is_empty());
    let bases = tomls(&root.join("experiments"));
    assert!(bases.iter().any(|p| p.ends_with("base-filtered.toml")), "{bases:?}");
    for path in configs.iter().chain(&bases) {
        let cfg = dpgd::train::TrainConfig::from_file(path, &[]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        cfg.validate().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    // One folder per study: experiments/<study>/sweep.toml. Its base and reuse paths resolve
    // beside it, whatever the working directory.
    let sweeps = sorted(
        std::fs::read_dir(root.join("experiments"))
            .unwrap()
            .map(|e| e.unwrap().path().join("sweep.toml"))
            .filter(|p| p.is_file())
            .collect(),
    );
    assert!(sweeps.iter().any(|p| p.ends_with("paper-table/sweep.toml")), "{sweeps:?}");
    for path in sweeps {
        let (sweep, runs) = plan(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!runs.is_empty(), "{}", path.display());
        assert!(sweep.base.is_file(), "{}: base {}", path.display(), sweep.base.display());
        for r in &sweep.reuse {
            assert!(r.is_dir(), "{}: reuse {}", path.display(), r.display());
        }
    }
}
