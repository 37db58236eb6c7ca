//! Kill the `dpgd` binary while it trains and resume it.

use std::path::{Path, PathBuf};
use std::process::Command;

use dpgd::train::checkpoint;

fn fixture(dir: &Path) -> PathBuf {
    let d = dir.join("data");
    dpgd::data::synthetic::Synthetic::default().write(&d).unwrap();
    d
}

fn config(data: &Path, method: &str, extra: &str) -> String {
    let privacy = format!("method = \"{method}\"\nepsilon = 8.0\ndelta = 1e-5\nclip = 1.0\nsteps = 30");
    let train = format!("lr = 2.0\nseed = 3\neval_every = 4\ncheckpoint_every = 4\nchunk = 8\n{extra}");
    format!(
        "name = \"test-{method}\"\n[data]\ndir = \"{}\"\ntrain_subset = 2000\ntest_subset = 1000\n[model]\npreset = \"opacus-cnn\"\n[privacy]\n{privacy}\n[train]\n{train}\n",
        data.display()
    )
}

/// Kill the trainer at arbitrary moments: the checkpoint is never torn, the ledger never
/// exceeds the budget, and the run resumes to completion.
#[test]
fn killed_runs_leave_valid_checkpoints_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = dir.path().join("cfg.toml");
    let text = config(&fixture(dir.path()), "filtered", "max_steps = 36")
        .replace("checkpoint_every = 4", "checkpoint_every = 1");
    std::fs::write(&cfg_path, text).unwrap();
    let run_dir = dir.path().join("run");
    let bin = env!("CARGO_BIN_EXE_dpgd");
    for (i, delay_ms) in [700u64, 1100, 1500].into_iter().enumerate() {
        let mut cmd = Command::new(bin);
        if i == 0 {
            cmd.args(["train", "--quiet", "--config"]).arg(&cfg_path).arg("--out").arg(&run_dir);
        } else {
            cmd.args(["train", "--quiet", "--resume"]).arg(&run_dir);
        }
        let mut child = cmd.spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill(); // SIGKILL: no chance to clean up
        let _ = child.wait();
        if let Some(state) =
            checkpoint::read(&checkpoint::state_path(&run_dir)).expect("checkpoint must never be corrupt")
        {
            assert!(state.spent.iter().all(|&s| s <= 30.0));
            if let Some(j) =
                checkpoint::read(&checkpoint::journal_path(&run_dir)).expect("journal must never be corrupt")
            {
                assert!(j.meta.step >= state.meta.step);
            }
        }
    }
    let out = Command::new(bin).args(["train", "--quiet", "--resume"]).arg(&run_dir).output().unwrap();
    if !out.status.success() {
        // The first kill may have come before any checkpoint: then start it afresh.
        assert!(
            checkpoint::read(&checkpoint::state_path(&run_dir)).unwrap().is_none(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = Command::new(bin)
            .args(["train", "--quiet", "--config"])
            .arg(&cfg_path)
            .arg("--out")
            .arg(&run_dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let state = checkpoint::read(&checkpoint::state_path(&run_dir)).unwrap().unwrap();
    assert_eq!(state.meta.step, 36);
    assert!(state.spent.iter().all(|&s| s <= 30.0));
    assert!(run_dir.join("privacy.json").exists());
}
