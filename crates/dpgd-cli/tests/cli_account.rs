//! `dpgd account`: JSON output contract and one-line errors naming the bad argument.

use std::process::Command;

use serde_json::Value;

fn dpgd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dpgd")).args(args).output().expect("run dpgd")
}

/// The words of a command line.
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
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

/// A general ρ-zCDP guarantee (a discrete-Gaussian run's) is
/// converted by a rule valid for any zCDP mechanism unless the Gaussian curve is asked for; and
/// pure ε-DP is never answered with a larger ε than ε itself.
#[test]
fn convert_defaults_to_conversions_valid_for_the_guarantee_given() {
    let z = json(&["account", "convert", "--zcdp", "0.05", "--delta", "1e-5", "--json"]);
    assert_eq!(z["method"], "cks", "{z}");
    assert!((z["epsilon"].as_f64().unwrap() - 1.308_118_342_906_438).abs() < 1e-9);
    let g = json(&["account", "convert", "--zcdp", "0.05", "--delta", "1e-5", "--method", "gaussian-exact", "--json"]);
    assert!(g["assumes"].as_str().unwrap().contains("Gaussian"), "{g}");
    let p = json(&["account", "convert", "--pure", "1", "--delta", "1e-5", "--json"]);
    assert_eq!((p["epsilon"].as_f64(), &p["method"]), (Some(1.0), &serde_json::json!("pure")), "{p}");
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
    assert_eq!(v["steps"], 100);
}

#[test]
fn calibrate_for_humans_answers_first_and_keeps_releases_apart() {
    let args = ["account", "calibrate", "--epsilon", "0.3", "--delta", "1e-5", "--steps", "44"];
    let out = dpgd(&[&args[..], &["--release", "1000:22", "--release", "500:12"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("sigma = "), "{text}");
    let releases = text.lines().find(|l| l.trim_start().starts_with("releases:")).unwrap_or_default();
    assert_eq!(releases.matches("; ").count(), 1, "two releases, one separator: {releases}");
    assert!(!text.contains("null"), "{text}");
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

/// The DP-SGD question gets a DP-SGD answer (Opacus 1.6's accountant says
/// ε = 0.922 at α = 17 for its MNIST example; tests/reference/subsampled_refs.txt), and the
/// full-batch calculator says which setting it answers for.
#[test]
fn sgd_answers_the_opacus_question_and_budget_says_it_is_full_batch() {
    let args = ["account", "sgd", "--sample-rate", "0.004", "--sigma", "1.3", "--steps", "3750", "--delta", "1e-5"];
    let v = json(&[&args[..], &["--json"]].concat());
    assert!((v["epsilon"].as_f64().unwrap() - 0.922_048_942_769_669_9).abs() < 1e-6, "{v}");
    assert_eq!((v["alpha"].as_f64(), v["neighbours"].as_str()), (Some(17.0), Some("add-or-remove-one")));
    let (orders, rdp) = (v["orders"].as_array().unwrap(), v["rdp"].as_array().unwrap());
    assert_eq!((orders.len(), rdp.len()), (151, 151), "per-step RDP aligned with the orders");
    // Epochs instead of steps; the classic conversion is looser; orders by name or listed.
    let e = json(&[
        "account",
        "sgd",
        "--sample-rate",
        "0.004",
        "--sigma",
        "1.3",
        "--epochs",
        "15",
        "--delta",
        "1e-5",
        "--json",
    ]);
    assert_eq!((e["steps"].as_u64(), e["epsilon"].as_f64()), (Some(3750), v["epsilon"].as_f64()));
    let classic = json(&[&args[..], &["--conversion", "classic", "--json"]].concat());
    assert!(classic["epsilon"].as_f64() > v["epsilon"].as_f64(), "{classic}");
    let listed = json(&[&args[..], &["--orders", "8,16,17,32", "--json"]].concat());
    assert_eq!(
        (listed["epsilon"].as_f64(), listed["orders"].as_array().map(Vec::len)),
        (v["epsilon"].as_f64(), Some(4))
    );
    // The human answer keeps to the answer and what it rests on: long lists by their ends.
    let human = String::from_utf8_lossy(&dpgd(&args).stdout).to_string();
    assert!(human.starts_with("epsilon = 0.92") && human.len() < 1200, "{human}");
    assert!(human.contains("151 values; --json lists them"), "{human}");
    let dpa = json(&[&args[..], &["--orders", "dp-accounting", "--json"]].concat());
    assert_eq!(dpa["orders"].as_array().map(Vec::len), Some(156));
    // Calibration: the σ printed meets the target.
    let c = json(&words("account sgd --sample-rate 0.004 --epsilon 1 --steps 3750 --delta 1e-5 --json"));
    let sigma = c["sigma"].as_f64().unwrap();
    assert!(c["epsilon"].as_f64().unwrap() <= 1.0 && sigma < 1.3 && sigma > 1.0, "{c}");
    // For humans: the answer first. The full-batch calculator names its setting.
    let human = String::from_utf8(dpgd(&args).stdout).unwrap();
    assert!(human.starts_with("epsilon = 0.92"), "{human}");
    let budget =
        String::from_utf8(dpgd(&["account", "budget", "--sigma", "1.3", "--steps", "3750", "--delta", "1e-5"]).stdout)
            .unwrap();
    assert!(budget.contains("full-batch") && budget.contains("dpgd account sgd"), "{budget}");
    // The PLD accountant: tighter than RDP (dp_accounting's PLD says 0.8336 here), with a
    // lower estimate beside it.
    let pld = json(&[&args[..], &["--accountant", "pld", "--json"]].concat());
    let (eps, lower) = (pld["epsilon"].as_f64().unwrap(), pld["epsilon_lower_estimate"].as_f64().unwrap());
    assert!(lower < eps && eps < 0.8345 && eps > 0.8335 && lower > 0.8, "{pld}");
    // Calibration by either accountant meets the target; the tighter PLD needs less noise.
    let calibrated = |extra: &str| {
        let v =
            json(&words(&format!("account sgd --sample-rate 0.01 --epsilon 1 --steps 50 --delta 1e-5 --json {extra}")));
        (v["sigma"].as_f64().unwrap(), v["epsilon"].as_f64().unwrap())
    };
    let ((s_rdp, e_rdp), (s_pld, e_pld)) = (calibrated(""), calibrated("--accountant pld --pld-interval 1e-3"));
    assert!(e_rdp <= 1.0 && e_pld <= 1.0 && s_pld < s_rdp, "rdp {s_rdp} {e_rdp}, pld {s_pld} {e_pld}");
    for (bad, want) in [
        (vec!["--sample-rate", "0"], "--sample-rate"),
        (vec!["--orders", "1,2"], "--orders"),
        (vec!["--accountant", "pld", "--pld-interval", "1e-9"], "--pld-interval"),
    ] {
        let mut a = vec!["account", "sgd", "--sample-rate", "0.01", "--sigma", "1", "--steps", "10", "--delta", "1e-5"];
        a.extend(bad);
        let e = fails(&a);
        assert!(e.contains(want), "{a:?}: {e}");
    }
}

/// BandMF's calculator: T steps in b bands are ⌈T/b⌉ rounds of DP-SGD at the partition's rate
/// (recomputed with the accounting crate), and --epochs counts b steps per pass of a partition.
#[test]
fn sgd_with_bands_accounts_bandmf_as_rounds_of_dp_sgd() {
    use dpgd::accounting::Conversion;
    use dpgd::accounting::event::{Accountant, DpEvent, RdpAccountant};
    let v = json(&[
        "account",
        "sgd",
        "--sample-rate",
        "0.016",
        "--sigma",
        "0.9",
        "--steps",
        "3750",
        "--bands",
        "4",
        "--delta",
        "1e-5",
        "--orders",
        "dp-accounting",
        "--json",
    ]);
    assert_eq!((v["bands"].as_u64(), v["rounds"].as_u64(), v["steps"].as_u64()), (Some(4), Some(938), Some(3750)));
    let mut acc = RdpAccountant::new(dpgd::accounting::subsampled::dp_accounting_orders(), Conversion::Cks).unwrap();
    acc.compose(&DpEvent::poisson_sampled(0.016, DpEvent::gaussian(0.9)).repeated(938)).unwrap();
    let by_hand = acc.epsilon(1e-5).unwrap();
    assert!((v["epsilon"].as_f64().unwrap() - by_hand).abs() <= 1e-12 * by_hand, "{v} against {by_hand}");
    let e = json(&[
        "account",
        "sgd",
        "--sample-rate",
        "0.016",
        "--sigma",
        "0.9",
        "--epochs",
        "15",
        "--bands",
        "4",
        "--delta",
        "1e-5",
        "--orders",
        "dp-accounting",
        "--json",
    ]);
    assert_eq!(e["steps"].as_u64(), Some(3750));
    // One band is DP-SGD.
    let one = json(&[
        "account",
        "sgd",
        "--sample-rate",
        "0.004",
        "--sigma",
        "1.3",
        "--steps",
        "3750",
        "--delta",
        "1e-5",
        "--json",
    ]);
    let b1 = json(&[
        "account",
        "sgd",
        "--sample-rate",
        "0.004",
        "--sigma",
        "1.3",
        "--steps",
        "3750",
        "--bands",
        "1",
        "--delta",
        "1e-5",
        "--json",
    ]);
    assert_eq!((one["epsilon"].clone(), b1.get("bands")), (b1["epsilon"].clone(), None));
    // `account bandmf` is `account sgd --bands b`, and wants its bands.
    let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let tail = "--sample-rate 0.016 --sigma 0.9 --steps 3750 --bands 4 --delta 1e-5 --orders dp-accounting --json";
    let as_sgd = json(&words(&format!("account sgd {tail}")).iter().map(String::as_str).collect::<Vec<_>>());
    let as_bandmf = json(&words(&format!("account bandmf {tail}")).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(as_sgd, as_bandmf);
    let e =
        fails(&["account", "bandmf", "--sample-rate", "0.016", "--sigma", "0.9", "--steps", "10", "--delta", "1e-5"]);
    assert!(e.contains("--bands"), "{e}");
}

/// Little noise over many steps: the PLD's losses would span more points than its grid holds at
/// the default interval, and the calculator moves to the next coarser one that fits and says so
/// (σ = 0.5, q = 0.05, 200 steps: 10⁻⁴ and 2·10⁻⁴ overflow).
#[test]
fn the_pld_calculator_takes_a_coarser_grid_where_the_losses_do_not_fit() {
    let run = |accountant: &[&str]| {
        let base = ["account", "sgd", "--sample-rate", "0.05", "--sigma", "0.5", "--steps", "200", "--delta", "1e-5"];
        json(&[&base[..], accountant, &["--json"]].concat())
    };
    let v = run(&["--accountant", "pld"]);
    let (eps, lower, h) = (
        v["epsilon"].as_f64().unwrap(),
        v["epsilon_lower_estimate"].as_f64().unwrap(),
        v["pld_interval"].as_f64().unwrap(),
    );
    assert!(h > 1e-4 && h <= 1e-3 && lower <= eps && eps.is_finite(), "{v}");
    // Tighter than the RDP accountant, as a PLD is.
    let rdp = run(&[]);
    assert!(eps <= rdp["epsilon"].as_f64().unwrap(), "PLD {eps} above RDP {rdp}");
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
    // Typed budgets are exact decimals: 100 rounds of 0.01 are exactly 1 (summed as floats
    // nearest 0.01, rounding up, they were slightly more, and basic composition allowed 99).
    assert_eq!(rounds["basic"], 100);
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

fn fails(args: &[&str]) -> String {
    let out = dpgd(args);
    assert!(!out.status.success(), "{args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    err
}

#[test]
fn pure_dp_is_not_converted_as_if_it_were_gaussian() {
    // ε₀-DP is not ε₀-GDP: randomized response at ε₀ = 1 needs ε = 0.472 at δ = 0.3, and the
    // Gaussian curve would say 0.277.
    let e = fails(&["account", "convert", "--pure", "1", "--delta", "0.3", "--method", "gaussian-exact"]);
    assert!(e.contains("gaussian-exact") && e.contains("cks") && e.contains("bun-steinke"), "{e}");
    let v = json(&["account", "convert", "--pure", "1", "--delta", "0.3", "--json"]);
    assert!(v["epsilon"].as_f64().unwrap() >= 0.472 - 1e-9 || v["method"] == "cks", "{v}");
}

#[test]
fn odd_arguments_are_refused_by_name_without_hanging() {
    for (args, want) in [
        (vec!["account", "convert", "--zcdp", "0.5", "--delta", "-1e-5"], "--delta"),
        (vec!["account", "calibrate", "--epsilon", "1", "--delta", "1e-5", "--steps", "2.5"], "--steps"),
        (vec!["account", "calibrate", "--epsilon", "1e-200", "--delta", "1e-5", "--steps", "10"], "epsilon"),
        (vec!["account", "max-rho", "--epsilon", "1e-300", "--delta", "1e-5"], "epsilon"),
        (vec!["account", "budget", "--sigma", "1e-300", "--steps", "10", "--delta", "1e-5"], "sigma"),
        (vec!["account", "convert", "--gdp", "1e200", "--delta", "1e-5"], "epsilon"),
        (vec!["account", "compare", "--out", "Cargo.toml"], "--out Cargo.toml"),
        (
            vec![
                "account",
                "odometer",
                "--kind",
                "rogers",
                "--per-round",
                "0.01",
                "--rounds",
                "18446744073709551615",
                "--delta",
                "1e-6",
                "--dataset-size",
                "5",
                "--series",
            ],
            "--rounds",
        ),
    ] {
        let e = fails(&args);
        assert!(e.contains(want), "{args:?}: {e}");
    }
}

/// A number as a user might type it, including the ones that break naive code.
fn any_number() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        any::<f64>().prop_map(|v| format!("{v:e}")),
        Just("nan".to_string()),
        Just("inf".to_string()),
        Just("-inf".to_string()),
        Just("0".to_string()),
        Just("-1e-5".to_string()),
        Just("1e-320".to_string()),
        Just("1e-300".to_string()),
        Just("1e300".to_string()),
        Just("18446744073709551615".to_string()),
        (1e-6f64..100.0).prop_map(|v| v.to_string()),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Every `account` subcommand answers or refuses within a second, never panics.
    #[test]
    fn account_commands_answer_or_refuse_any_number(a in any_number(), b in any_number(), c in any_number(), which in 0usize..8) {
        let args: Vec<&str> = match which {
            0 => vec!["account", "convert", "--zcdp", &a, "--delta", &b],
            1 => vec!["account", "convert", "--gdp", &a, "--delta", &b],
            2 => vec!["account", "max-rho", "--epsilon", &a, "--delta", &b, "--method", "gaussian-exact"],
            3 => vec!["account", "calibrate", "--epsilon", &a, "--delta", &b, "--steps", "100", "--clip", &c],
            4 => vec!["account", "budget", "--sigma", &a, "--steps", "100", "--delta", &b, "--clip", &c],
            5 => vec!["account", "filter", "--kind", "rogers", "--epsilon", &a, "--delta", &b, "--per-round", &c],
            6 => vec!["account", "sgd", "--sample-rate", &c, "--sigma", &a, "--steps", "1000", "--delta", &b],
            _ => vec!["account", "odometer", "--kind", "mixture", "--per-round", &a, "--rounds", "1000", "--delta", &b, "--target-epsilon", &c],
        };
        let start = std::time::Instant::now();
        let out = dpgd(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        proptest::prop_assert!(!err.contains("panicked"), "{args:?}: {err}");
        proptest::prop_assert!(out.status.code().is_some_and(|c| c <= 2), "{args:?}: {:?}", out.status);
        proptest::prop_assert!(start.elapsed() < std::time::Duration::from_secs(2), "{args:?} took {:?}", start.elapsed());
    }
}
