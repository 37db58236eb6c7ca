//! `dpgd account`: JSON output contract and one-line errors naming the bad argument.

use std::process::Command;

use serde_json::Value;

fn dpgd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dpgd")).args(args).output().expect("run dpgd")
}

fn json(args: &[&str]) -> Value {
    let out = dpgd(args);
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.trim().lines().count(), 1, "exactly one JSON object expected: {stdout}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn convert_prints_epsilon_and_echoes_inputs() {
    let v = json(&["account", "convert", "--zcdp", "0.05", "--delta", "1e-5", "--method", "cks", "--json"]);
    assert_eq!(v["zcdp"], 0.05);
    assert_eq!(v["delta"], 1e-5);
    assert_eq!(v["method"], "cks");
    // mpmath reference (tests/reference/accounting_refs.txt)
    assert!((v["epsilon"].as_f64().unwrap() - 1.308_118_342_906_438).abs() < 1e-9);
    let g = json(&["account", "convert", "--gdp", "1", "--delta", "1e-5", "--json"]);
    assert_eq!(g["method"], "gaussian-exact");
}

#[test]
fn calibrate_meets_the_target() {
    let v = json(&[
        "account",
        "calibrate",
        "--epsilon",
        "0.5",
        "--delta",
        "1e-5",
        "--steps",
        "100",
        "--clip",
        "1.0",
        "--method",
        "cks",
        "--json",
    ]);
    let sigma = v["sigma"].as_f64().unwrap();
    let achieved = v["epsilon_achieved"].as_f64().unwrap();
    assert!(achieved <= 0.5 && achieved > 0.4999999);
    // σ = √(k/2ρ*) with the reference ρ* for (0.5, 1e-5) under cks.
    assert!((sigma - (100.0f64 / (2.0 * 0.008_505_530_591_181_91)).sqrt()).abs() < 1e-6 * sigma);
    assert_eq!(v["steps"], 100.0);
}

#[test]
fn budget_lists_every_conversion_side_by_side() {
    let v = json(&["account", "budget", "--sigma", "8", "--steps", "100", "--delta", "1e-5", "--json"]);
    let e = &v["epsilon"];
    let (bs, cks, gx) =
        (e["bun-steinke"].as_f64().unwrap(), e["cks"].as_f64().unwrap(), e["gaussian-exact"].as_f64().unwrap());
    assert!((bs - 6.779_407_390_235_101).abs() < 1e-9);
    assert!(gx < cks && cks < bs);
    assert_eq!(v["rho"], 0.78125);
    let human = dpgd(&["account", "budget", "--sigma", "8", "--steps", "100", "--delta", "1e-5"]);
    assert!(String::from_utf8_lossy(&human.stdout).contains("gaussian-exact"));
}

#[test]
fn max_rho_inverts_convert() {
    let v = json(&["account", "max-rho", "--epsilon", "1", "--delta", "1e-5", "--method", "bun-steinke", "--json"]);
    assert!((v["rho"].as_f64().unwrap() - 0.020_819_938_339_535_461).abs() < 1e-12);
}

#[test]
fn invalid_input_fails_with_one_line_naming_the_argument() {
    let cases: &[(&[&str], &str)] = &[
        (&["account", "convert", "--zcdp", "-1", "--delta", "1e-5"], "--zcdp"),
        (&["account", "convert", "--zcdp", "0", "--delta", "1e-5"], "--zcdp"),
        (&["account", "convert", "--zcdp", "NaN", "--delta", "1e-5"], "--zcdp"),
        (&["account", "convert", "--zcdp", "0.1", "--delta", "1"], "--delta"),
        (&["account", "convert", "--zcdp", "0.1", "--delta", "0"], "--delta"),
        (&["account", "convert", "--zcdp", "0.1", "--delta", "1e-5", "--method", "magic"], "--method"),
        (&["account", "budget", "--sigma", "0", "--steps", "10", "--delta", "1e-5"], "--sigma"),
        (&["account", "calibrate", "--epsilon", "1", "--delta", "2", "--steps", "10"], "--delta"),
        (&["account", "calibrate", "--epsilon", "inf", "--delta", "1e-5", "--steps", "10"], "--epsilon"),
    ];
    for (args, name) in cases {
        let out = dpgd(args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line expected, got {err}");
        assert!(err.contains(name), "{args:?}: error should name {name}: {err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn filter_reports_rounds_for_every_kind() {
    let mut rounds = std::collections::HashMap::new();
    for kind in ["basic", "rogers", "fz", "fz-cks", "whitehouse"] {
        let v = json(&[
            "account",
            "filter",
            "--kind",
            kind,
            "--epsilon",
            "1",
            "--delta",
            "1e-6",
            "--per-round",
            "0.01",
            "--json",
        ]);
        assert_eq!(v["kind"], kind);
        assert_eq!(v["per_round"], 0.01);
        rounds.insert(kind, v["rounds"].as_u64().unwrap());
    }
    // 100 rounds of the double nearest 0.01 sum to slightly more than 1, so the (rounding-up)
    // basic filter allows 99.
    assert_eq!(rounds["basic"], 99);
    // Printed FZ and Whitehouse coincide for pure mechanisms: Σε² ≤ (√(2L+2ε) − √(2L))².
    let l = (1e6f64).ln();
    let y = ((2.0 * l + 2.0).sqrt() - (2.0 * l).sqrt()).powi(2);
    assert_eq!(rounds["whitehouse"], (y / 1e-4).floor() as u64);
    assert!(rounds["fz-cks"] > rounds["whitehouse"] && rounds["whitehouse"] > rounds["rogers"]);
}

#[test]
fn odometer_reports_bounds_series_and_needs_its_options() {
    let v = json(&[
        "account",
        "odometer",
        "--kind",
        "mixture",
        "--per-round",
        "0.01",
        "--rounds",
        "5000",
        "--delta",
        "1e-6",
        "--gamma",
        "0.1",
        "--json",
    ]);
    let (vv, g, l) = (0.5f64, 0.1f64, (1e6f64).ln());
    let want = (2.0 * (g + vv) * (l + 0.5 * ((vv + g) / g).ln())).sqrt() + vv / 2.0;
    assert!((v["bound"].as_f64().unwrap() - want).abs() < 1e-9);
    let s = json(&[
        "account",
        "odometer",
        "--kind",
        "stitched",
        "--per-round",
        "0.1",
        "--rounds",
        "5",
        "--delta",
        "1e-6",
        "--v0",
        "0.03",
        "--json",
    ]);
    assert!(s["bound"].as_f64().is_some());
    let trivial = json(&[
        "account",
        "odometer",
        "--kind",
        "stitched",
        "--per-round",
        "0.1",
        "--rounds",
        "1",
        "--delta",
        "1e-6",
        "--v0",
        "0.03",
        "--json",
    ]);
    assert!(trivial["bound"].is_null(), "trivial before v0");
    let out = dpgd(&[
        "account",
        "odometer",
        "--kind",
        "filter",
        "--per-round",
        "0.1",
        "--rounds",
        "3",
        "--delta",
        "1e-6",
        "--target-epsilon",
        "1",
        "--series",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1 + 3);
    let err =
        dpgd(&["account", "odometer", "--kind", "rogers", "--per-round", "0.1", "--rounds", "3", "--delta", "1e-6"]);
    assert!(!err.status.success());
    assert!(String::from_utf8_lossy(&err.stderr).contains("--dataset-size"));
}

#[test]
fn compare_writes_both_plots() {
    let dir = tempfile::tempdir().unwrap();
    let v = json(&["account", "compare", "--out", dir.path().to_str().unwrap(), "--json"]);
    for key in ["filters_plot", "odometers_plot"] {
        let p = std::path::PathBuf::from(v[key].as_str().unwrap());
        assert!(std::fs::metadata(&p).unwrap().len() > 10_000, "{key} missing or empty");
    }
}
