//! Personalized budgets (`[privacy.budgets]`): each tier's guarantee recomputed independently by
//! the accounting crate, no example ever over its own budget across a kill and a resume, what is
//! published and what is not, and bad input refused before anything trains.

mod common;

use std::path::Path;

use common::{snapshot, train, try_train};
use dpgd::accounting::event::{Accountant, DpEvent, GdpAccountant};
use dpgd::accounting::{Conversion, Rdp, ToApproxDp};
use dpgd::train::{RunFolder, TrainConfig, ValidConfig};

const TIERS: &str = "epsilons = [4.0, 6.0, 12.0]";

/// A small filtered (or `sgd-filtered`) run at ε = 4 whose examples hold the tiers 4, 6 and 12
/// as `assignment` says, with a noisy active count for full-batch GD.
fn config(method: &str, assignment: &str) -> String {
    let sgd = method.starts_with("sgd");
    let rate = if sgd { "sample_rate = 0.2\nconversion = \"cks\"\n" } else { "" };
    let privacy = format!(
        "method = \"{method}\"\n{rate}epsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 4\n\
         [privacy.budgets]\n{TIERS}\n{assignment}"
    );
    let counts = if sgd { "" } else { "[release]\nactive_count = \"noisy\"\nactive_count_every = 2\n" };
    let train = format!("lr = 1.0\nseed = 7\nchunk = 16\nmax_steps = 14\n{counts}");
    common::fixture_config(&format!("tiers-{method}"), "logistic", (300, 100), &privacy, &train)
}

fn valid(text: &str) -> ValidConfig {
    TrainConfig::from_toml(text, &[]).unwrap().validate().unwrap()
}

/// A budget file for the 300 examples: tiers 4, 6, 12 in turn.
fn budget_file(dir: &Path) -> String {
    let path = dir.join("budgets.csv");
    let lines: String = (0..300).map(|i| format!("{}\n", [4, 6, 12][i % 3])).collect();
    std::fs::write(&path, format!("epsilon\n{lines}")).unwrap();
    format!("file = \"{}\"", path.display())
}

/// Each full-batch tier's ε, recomputed from its budget alone: k_j = B_j/C² Gaussian steps of
/// multiplier σ composed with the run's noisy counts (their events), by the Gaussian-DP
/// accountant; within the tier's ε, and one more step would not be.
#[test]
fn each_tier_of_full_batch_gd_is_recomputed_by_the_accountant() {
    let cfg = valid(&config("filtered", "shares = [0.34, 0.43, 0.23]\nseed = 1"));
    let sigma = cfg.sigma().unwrap();
    let counts: Vec<DpEvent> = match cfg.event().unwrap() {
        DpEvent::Composed { events } => events[1..].to_vec(),
        other => panic!("not a composition: {other:?}"),
    };
    assert!(!counts.is_empty(), "the run releases noisy counts");
    let epsilon_of = |steps: u64| {
        let mut events = vec![DpEvent::gaussian(sigma).repeated(steps)];
        events.extend(counts.iter().cloned());
        let mut gdp = GdpAccountant::new(Conversion::GaussianExact);
        gdp.compose(&DpEvent::Composed { events }).unwrap();
        gdp.epsilon(cfg.delta()).unwrap()
    };
    let tiers = cfg.tiers();
    assert_eq!(tiers.len(), 3);
    for (t, want) in tiers.iter().zip([4.0, 6.0, 12.0]) {
        let k = t.worst_case_steps.unwrap();
        assert_eq!(t.budget, k as f64, "B = k C^2 with C = 1");
        let eps = epsilon_of(k);
        assert!(eps <= want && (eps - t.guaranteed_epsilon).abs() < 1e-9, "tier {want}: {eps}");
        assert!(epsilon_of(k + 1) > want, "tier {want}: one more step would still fit");
    }
    assert!(tiers[0].worst_case_steps.unwrap() >= 4 && tiers[2].worst_case_steps > tiers[1].worst_case_steps);
    // What holds for every example is the loosest tier's guarantee.
    assert_eq!(cfg.epsilon().unwrap(), tiers[2].guaranteed_epsilon);
}

/// DP-SGD with individual accounting: each tier's budget at the filter's order converts to its
/// ε by the CKS conversion (recomputed from the Rényi curve), and a little more would not.
#[test]
fn each_tier_of_individual_dp_sgd_is_recomputed_from_its_renyi_budget() {
    let cfg = valid(&config("sgd-filtered", "shares = [0.34, 0.43, 0.23]\nseed = 1"));
    let run_budget = cfg.ledger_budget().unwrap();
    let alpha = {
        let json = dpgd::train::report::report(&cfg, None, 300, 0).unwrap();
        json.accounting.unwrap().sampling.unwrap().individual.unwrap().order
    };
    let eps =
        |b: f64| Rdp::new(vec![f64::from(alpha)], vec![b]).unwrap().epsilon(cfg.delta(), Conversion::Cks).unwrap();
    for (t, want) in cfg.tiers().iter().zip([4.0, 6.0, 12.0]) {
        assert!(t.budget >= run_budget && eps(t.budget) <= want, "tier {want}");
        assert!(eps(t.budget * (1.0 + 1e-9)) > want - 1e-6, "tier {want}: the budget could be larger");
        assert_eq!(t.worst_case_steps, None);
    }
}

/// σ calibrated for a looser tier than the strictest: the stricter tier gets a smaller budget
/// (fewer worst-case steps), recomputed the same way, and the run is no longer plain GD at k.
#[test]
fn a_tier_stricter_than_the_calibration_stops_sooner() {
    let text =
        config("filtered", "shares = [0.34, 0.43, 0.23]\nseed = 1").replace(TIERS, "epsilons = [2.0, 4.0, 12.0]");
    let cfg = valid(&text);
    let (strict, run) = (&cfg.tiers()[0], &cfg.tiers()[1]);
    assert!(strict.worst_case_steps.unwrap() < 4 && run.worst_case_steps.unwrap() >= 4, "{:?}", cfg.tiers());
    assert!(strict.guaranteed_epsilon <= 2.0 && strict.budget < cfg.ledger_budget().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let s = train(&text, dir.path(), None);
    assert_eq!(s.result.unwrap().test_accuracy_at_k, None, "examples could be dropped before k");
    let state = snapshot(&text, dir.path());
    let of = cfg.config().privacy.budgets.as_ref().unwrap().assignment_by_row(&cfg.config().data, 300).unwrap();
    for (i, &s) in state.spent.iter().enumerate() {
        assert!(s <= cfg.tiers()[usize::from(of[i])].budget, "example {i}");
    }
}

/// An observer that ends the process (a panic) once step `at` is shown: the state of that step
/// is durable, nothing after it ran.
struct KilledAt(usize);

impl dpgd::train::Observer for KilledAt {
    fn step(&mut self, report: &dpgd::train::observer::StepReport) {
        if report.step == self.0 {
            panic!("killed after step {}", self.0);
        }
    }
}

/// No example ever spends more than its own budget, the looser tiers do spend past the
/// strictest one, and a run killed mid-way and resumed ends with the ledger, model and
/// published files of one that ran through — for both methods with a ledger.
#[test]
fn no_example_exceeds_its_own_budget_across_a_kill_and_a_resume() {
    let files = tempfile::tempdir().unwrap();
    let assignment = budget_file(files.path());
    for method in ["filtered", "sgd-filtered"] {
        let text = config(method, &assignment);
        let cfg = valid(&text);
        let budgets: Vec<f64> = (0..300).map(|i| cfg.tiers()[i % 3].budget).collect();
        let whole = tempfile::tempdir().unwrap();
        train(&text, whole.path(), None);
        let killed = tempfile::tempdir().unwrap();
        let data = cfg.config().data.load().unwrap();
        let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            dpgd::train::run(&cfg, &data, killed.path(), &Default::default(), &mut KilledAt(6))
        }));
        assert!(died.is_err(), "{method}: the run was killed");
        let mid = snapshot(&text, killed.path());
        assert_eq!(mid.meta.step, 6);
        for (i, (&s, &b)) in mid.spent.iter().zip(&budgets).enumerate() {
            assert!(s <= b, "{method}: example {i} spent {s} of its own {b} by the kill");
        }
        train(&text, killed.path(), None);
        let (a, b) = (snapshot(&text, whole.path()), snapshot(&text, killed.path()));
        assert_eq!(a.spent, b.spent, "{method}: the resumed ledger differs");
        assert_eq!(a.theta, b.theta, "{method}: the resumed model differs");
        for f in ["privacy.json", "result.json", "metrics.jsonl"] {
            let read = |d: &Path| std::fs::read(RunFolder::new(d).publishable().join(f)).unwrap();
            assert_eq!(read(whole.path()), read(killed.path()), "{method}: {f}");
        }
        let strictest = cfg.tiers()[0].budget;
        for (i, (&s, &b)) in a.spent.iter().zip(&budgets).enumerate() {
            assert!(s <= b, "{method}: example {i} spent {s} of its own {b}");
        }
        assert!(
            a.spent.iter().any(|&s| s > strictest),
            "{method}: no example of a looser tier spent past the strictest budget"
        );
        assert!(
            a.spent.iter().zip(&budgets).any(|(&s, &b)| b == strictest && s >= b),
            "{method}: no example of the strictest tier ran out in 14 steps"
        );
    }
}

/// `privacy.json` states each tier's guarantee and what it assumes, and no count of the
/// training data; the confidential budget report counts each tier against its own budget.
#[test]
fn tiers_are_published_without_counts_and_reported_to_the_owner() {
    let files = tempfile::tempdir().unwrap();
    let text = config("filtered", &budget_file(files.path()));
    let dir = tempfile::tempdir().unwrap();
    let s = train(&text, dir.path(), None);
    let privacy = s.privacy.unwrap();
    let personalized = privacy.personalized.expect("a run with tiers publishes them");
    assert_eq!(personalized.tiers.iter().map(|t| t.epsilon).collect::<Vec<_>>(), [4.0, 6.0, 12.0]);
    assert!(personalized.rests_on.contains("Jorgensen") && personalized.rests_on.contains("public choice"));
    assert!(privacy.accounting.unwrap().rests_on["personalized"].contains("loosest tier"));
    assert!(privacy.summary.starts_with("NOT PRIVATE"), "a fixed seed");
    let line = dpgd::train::report::summary(&valid(&text.replace("seed = 7\n", "")));
    // Whole steps of budget: a tier's guarantee may fall a little short of its ε, never past it.
    let loosest = dpgd::train::significant(personalized.tiers[2].guaranteed_epsilon);
    assert!(line.starts_with(&format!("({loosest}, 1e-5)-DP")), "{line}");
    assert!(line.contains("epsilon 4: (4, 1e-5)-DP, epsilon 6: (") && line.contains("epsilon 12: ("), "{line}");
    let published = std::fs::read_to_string(RunFolder::new(dir.path()).publishable().join("privacy.json")).unwrap();
    assert!(!published.contains("\"examples\": 100") && !published.contains("exhausted"), "{published}");
    let report: dpgd::train::budget::BudgetReport =
        serde_json::from_str(&std::fs::read_to_string(RunFolder::new(dir.path()).budget()).unwrap()).unwrap();
    let per_tier: Vec<usize> = report.tiers.iter().map(|t| t.examples).collect();
    assert_eq!(per_tier, [100, 100, 100]);
}

/// A changed assignment is another run: its resume is refused.
#[test]
fn a_resume_with_another_assignment_is_refused() {
    let files = tempfile::tempdir().unwrap();
    let assignment = budget_file(files.path());
    let text = config("filtered", &assignment);
    let dir = tempfile::tempdir().unwrap();
    train(&text, dir.path(), Some(2));
    let path = files.path().join("budgets.csv");
    let swapped = std::fs::read_to_string(&path).unwrap().replacen("\n4\n6\n", "\n6\n4\n", 1);
    std::fs::write(&path, swapped).unwrap();
    let e = try_train(&text, dir.path(), None).unwrap_err().to_string();
    assert!(e.contains("privacy.budgets"), "{e}");
}

/// Bad budgets are refused before anything trains, each naming the field or the file and line.
#[test]
fn bad_budgets_are_refused_before_training() {
    let files = tempfile::tempdir().unwrap();
    let short = files.path().join("short.csv");
    std::fs::write(&short, "4\n6\n").unwrap();
    let bad_line = files.path().join("bad.csv");
    std::fs::write(&bad_line, (0..300).map(|i| if i == 41 { "x\n" } else { "4\n" }).collect::<String>()).unwrap();
    let cases = [
        (config("filtered", &format!("file = \"{}\"", short.display())), "2 epsilons for 300 training examples"),
        (config("filtered", &format!("file = \"{}\"", bad_line.display())), "line 42: `x` is not a number"),
        (config("filtered", "shares = [0.5, 0.5]"), "privacy.budgets.shares"),
        (
            config("filtered", "shares = [0.34, 0.43, 0.23]").replace(TIERS, "epsilons = [0.01, 6.0, 12.0]"),
            "0.01 is below what one step at this sigma costs",
        ),
        (
            config("sgd-filtered", "shares = [0.34, 0.43, 0.23]").replace(TIERS, "epsilons = [0.01, 6.0, 12.0]"),
            "a tier is below what the filter's Renyi order and delta cost",
        ),
        (config("filtered", "shares = [0.34, 0.43, 0.23]").replace("\"filtered\"", "\"plain\""), "sgd-filtered"),
    ];
    for (text, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let e = try_train(&text, dir.path(), None).unwrap_err().to_string();
        assert!(e.contains(want), "want {want}: {e}");
        assert!(!RunFolder::new(dir.path()).state().exists(), "{want}: trained anyway");
    }
}

/// A CSV dataset whose training file holds each example's ε in a column: the column is skipped
/// as a feature (in the training file, and absent from the test file), and gives the tiers.
#[test]
fn a_csv_column_assigns_the_tiers_and_is_not_a_feature() {
    let data = tempfile::tempdir().unwrap();
    for (file, count, eps) in [("train.csv", 240, true), ("test.csv", 60, false)] {
        let mut text = format!("height,label,{}weight\n", if eps { "eps," } else { "" });
        for i in 0..count {
            let y = i % 3;
            let e = if eps { format!("{},", [4, 6, 12][i % 3]) } else { String::new() };
            text += &format!("{},{y},{e}{}\n", 1.5 + y as f64 * 2.0, -0.5 * y as f64);
        }
        std::fs::write(data.path().join(file), text).unwrap();
    }
    let text = format!(
        "name = \"csv-tiers\"\n[data]\ndir = \"{}\"\nignore_columns = [\"eps\"]\n[model]\npreset = \"logistic\"\n\
         [privacy]\nmethod = \"filtered\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 4\n\
         [privacy.budgets]\n{TIERS}\ncolumn = \"eps\"\n[train]\nlr = 1.0\nseed = 2\nmax_steps = 10\n",
        data.path().display()
    );
    let dir = tempfile::tempdir().unwrap();
    train(&text, dir.path(), None);
    let cfg = valid(&text);
    assert_eq!(cfg.config().data.load().unwrap().shape(), [2, 1, 1], "two features: eps is not one");
    let state = snapshot_of(&text, dir.path(), 2 * 3 + 3);
    for (i, &s) in state.spent.iter().enumerate() {
        assert!(s <= cfg.tiers()[i % 3].budget, "example {i} spent {s}");
    }
    assert!(state.spent.iter().any(|&s| s > cfg.tiers()[0].budget), "the looser tiers trained on");
    // Without data.ignore_columns the column would be a feature: refused, naming the fix.
    let e = try_train(&text.replace("ignore_columns = [\"eps\"]\n", ""), dir.path(), None).unwrap_err().to_string();
    assert!(e.contains("data.ignore_columns"), "{e}");
}

/// The training state of a run whose model has `params` parameters.
fn snapshot_of(text: &str, dir: &Path, params: usize) -> dpgd::train::state::Snapshot {
    let cfg = valid(text);
    let n = cfg.config().data.load().unwrap().train.len();
    let expect = dpgd::train::state::Expect { params, examples: n, max_steps: cfg.max_steps() };
    dpgd::train::state::read(&RunFolder::new(dir).state(), expect).unwrap().unwrap()
}

/// A training CSV of `rows` rows whose feature `row` is the row's own index (plus ½: not a
/// byte, so it is read as a number) and whose column `eps` gives rows `strict..` the tier 0.5
/// and the others 8; and a budget file saying the same, line by line.
fn rows_dataset(dir: &Path, rows: usize, strict: usize) -> String {
    let eps = |i: usize| if i >= strict { "0.5" } else { "8" };
    let mut train = "row,eps,label\n".to_string();
    let mut file = "epsilon\n".to_string();
    for i in 0..rows {
        train += &format!("{}.5,{},{}\n", i, eps(i), i % 2);
        file += &format!("{}\n", eps(i));
    }
    std::fs::write(dir.join("train.csv"), train).unwrap();
    std::fs::write(dir.join("test.csv"), "row,label\n0.5,0\n1.5,1\n2.5,0\n3.5,1\n").unwrap();
    std::fs::write(dir.join("budgets.csv"), file).unwrap();
    format!(
        "name = \"rows\"\n[data]\ndir = \"{}\"\nignore_columns = [\"eps\"]\n[data.hold_out]\nexamples = 40\nseed = \
         3\n[model]\npreset = \"logistic\"\n[privacy]\nmethod = \"filtered\"\nepsilon = 0.5\ndelta = 1e-5\nclip = \
         1.0\nworst_case_steps = 4\n[privacy.budgets]\nepsilons = [0.5, 8.0]\n",
        dir.display()
    )
}

/// An example's tier is its own row's through a hold-out (a private search's validation split
/// is one): the examples after the first held-out row used to take the next row's tier, so an
/// example that asked for ε = 0.5 could spend the ε = 8 tier's budget. Checked for a budget
/// file, a column and a random assignment, against each training example's own row, read back
/// from its features; and through a run's confidential budget report.
#[test]
fn an_examples_tier_follows_its_row_through_a_hold_out() {
    let data = tempfile::tempdir().unwrap();
    let base = rows_dataset(data.path(), 400, 300);
    let file = format!("file = \"{}\"\n", data.path().join("budgets.csv").display());
    for assignment in [file.as_str(), "column = \"eps\"\n"] {
        let text = format!("{base}{assignment}[train]\nlr = 1.0\nseed = 2\nmax_steps = 6\n");
        let cfg = valid(&text);
        let loaded = cfg.config().data.load().unwrap();
        let n = loaded.train.len();
        assert_eq!(n, 360, "40 of 400 held out");
        let (budgets, _) = dpgd::train::budget::ledger_budgets(&cfg, n).unwrap();
        let tiers = cfg.tiers();
        let mut strict = 0;
        for i in 0..n {
            let row = loaded.train.features[i] as usize;
            let want = if row >= 300 { tiers[0].budget } else { tiers[1].budget };
            assert_eq!(budgets.get(i), want, "{assignment}: example {i} (row {row})");
            strict += usize::from(row >= 300);
        }
        assert!(strict > 0 && strict < 100, "some of rows 300.. are held out: {strict}");
        // The owner's report counts each tier's own examples.
        let dir = tempfile::tempdir().unwrap();
        train(&text, dir.path(), None);
        let report = dpgd::train::budget::report(&RunFolder::new(dir.path()), &cfg, 2 + 2).unwrap();
        let counts: Vec<usize> = report.tiers.iter().map(|t| t.examples).collect();
        assert_eq!(counts, [strict, n - strict], "{assignment}");
    }
    // A random assignment is drawn over the rows, so a hold-out leaves each row's tier as it was.
    let shares = |hold_out: bool| {
        let text = format!("{base}shares = [0.3, 0.7]\nseed = 9\n[train]\nlr = 1.0\n");
        let text = if hold_out { text } else { text.replace("[data.hold_out]\nexamples = 40\nseed = 3\n", "") };
        let cfg = valid(&text);
        let loaded = cfg.config().data.load().unwrap();
        let (budgets, _) = dpgd::train::budget::ledger_budgets(&cfg, loaded.train.len()).unwrap();
        (0..loaded.train.len()).map(|i| (loaded.train.features[i] as usize, budgets.get(i))).collect::<Vec<_>>()
    };
    let whole: std::collections::BTreeMap<usize, f64> = shares(false).into_iter().collect();
    for (row, budget) in shares(true) {
        assert_eq!(whole[&row], budget, "row {row}");
    }
}
