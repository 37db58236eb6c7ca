//! `dpgd audit` end to end: a small schedule, its report and plot.

use std::process::Command;

#[test]
fn audit_writes_its_report_and_plot_and_is_consistent_for_a_correct_run() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("cfg.toml");
    std::fs::write(
        &cfg,
        "[model]\npreset = \"logistic\"\n[privacy]\nmethod = \"filtered\"\nepsilon = 1.0\ndelta = 1e-5\nclip = 1.0\n\
         worst_case_steps = 5\n[train]\nlr = 1.0\nmax_steps = 10\nseed = 3\n",
    )
    .unwrap();
    let out = tmp.path().join("audit");
    let o = Command::new(env!("CARGO_BIN_EXE_dpgd"))
        .args(["audit", "--trials", "2000", "--json", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["consistent"], true);
    assert!(v["epsilon_lower_bound"].as_f64().unwrap() <= v["claimed_epsilon"].as_f64().unwrap());
    assert!(out.join("audit.json").exists() && out.join("audit.png").exists());
}
