//! A run through the command line as a user makes it: train, inspect, eval, predict, resume,
//! and the errors a user meets on the way.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn dpgd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dpgd")).args(args).output().expect("run dpgd")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn setup(dir: &Path) -> String {
    let data = dir.join("data");
    dpgd::data::synthetic::Synthetic { train: 500, test: 100, side: 28, seed: 2 }.write(&data).unwrap();
    let cfg = dir.join("cfg.toml");
    std::fs::write(
        &cfg,
        format!(
            "name = \"cli\"\n[data]\ndir = \"{}\"\n[model]\npreset = \"logistic\"\n[privacy]\nmethod = \"filtered\"\n\
             epsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 6\n[train]\nlr = 1.0\nmax_steps = 10\n\
             [release]\nactive_count = \"noisy\"\nactive_count_sigma = 20.0\n",
            data.display()
        ),
    )
    .unwrap();
    cfg.display().to_string()
}

#[test]
fn train_inspect_eval_predict() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    let run = tmp.path().join("run");
    let run_s = run.display().to_string();
    let o = dpgd(&["train", "--config", &cfg, "--out", &run_s]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("plain private GD at step k = 6") && t.contains("with individual filtering"), "{t}");
    assert!(t.contains("(") && t.contains("zero-out neighbours"), "the guarantee and its relation: {t}");
    assert!(t.contains("examples (the fast CPU engine)"), "which engine computes: {t}");
    assert!(!t.contains("NaN"), "{t}");
    // Non-terminal stderr gets plain progress lines, not silence.
    assert!(t.contains("step 1/10") || t.contains("step 10/10"), "{t}");
    let o = dpgd(&["inspect", &run_s, "--example", "3"]);
    let t = text(&o);
    assert!(o.status.success() && t.starts_with("CONFIDENTIAL") && t.contains("example 3: spent"), "{t}");
    assert!(run.join("confidential/budget.json").exists() && run.join("confidential/budget.png").exists());
    let o = dpgd(&["eval", &run_s]);
    assert!(o.status.success() && text(&o).contains("test accuracy"), "{}", text(&o));
    // Predict from an IDX file and from CSV: the same classes.
    let images = tmp.path().join("data/t10k-images-idx3-ubyte.gz");
    let o = dpgd(&[
        "predict",
        &run.join("publishable/model.safetensors").display().to_string(),
        "--input",
        &images.display().to_string(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let from_idx: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect();
    assert_eq!(from_idx.len(), 100);
    let d = dpgd::data::Dataset::load(&tmp.path().join("data"), Some(10)).unwrap();
    let csv: String = d
        .test
        .images
        .chunks(784)
        .take(5)
        .map(|r| r.iter().map(u8::to_string).collect::<Vec<_>>().join(",") + "\n")
        .collect();
    let csv_path = tmp.path().join("five.csv");
    std::fs::write(&csv_path, csv).unwrap();
    let o = dpgd(&["predict", &run_s, "--input", &csv_path.display().to_string()]);
    let from_csv: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect();
    assert_eq!(from_csv, from_idx[..5]);
}

#[test]
fn resume_refuses_what_it_cannot_honour_and_the_cli_helps() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    let run = tmp.path().join("run").display().to_string();
    assert!(dpgd(&["train", "--quiet", "--config", &cfg, "--out", &run, "--stop-after", "3"]).status.success());
    let o = dpgd(&["train", "--resume", &run, "--set", "train.lr=0.1"]);
    assert!(!o.status.success() && text(&o).contains("train.lr"), "{}", text(&o));
    let o = dpgd(&["train", "--resume", &run, "--set", "data.test_subset=10"]);
    assert!(!o.status.success() && text(&o).contains("data.test_subset"), "{}", text(&o));
    let o = dpgd(&["train", "--resume", &run, "--config", &cfg]);
    assert!(!o.status.success() && text(&o).contains("--config"), "{}", text(&o));
    let o = dpgd(&["train", "--config", &cfg, "--out", &run]);
    assert!(!o.status.success() && text(&o).contains("--resume"), "{}", text(&o));
    // Every field the library lets a resume change, the command line lets it change: here the
    // data moved (their contents are checked).
    let moved = tmp.path().join("moved");
    std::fs::rename(tmp.path().join("data"), &moved).unwrap();
    let o = dpgd(&[
        "train",
        "--quiet",
        "--resume",
        &run,
        "--stop-after",
        "4",
        "--set",
        &format!("data.dir={}", moved.display()),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::rename(&moved, tmp.path().join("data")).unwrap();
    let o = dpgd(&["train", "--quiet", "--resume", &run, "--set", "train.threads=1"]);
    assert!(o.status.success(), "{}", text(&o));
    // σ instead of ε on the command line replaces the file's ε.
    let o = dpgd(&[
        "train",
        "--quiet",
        "--config",
        &cfg,
        "--out",
        &tmp.path().join("sigma").display().to_string(),
        "--set",
        "privacy.sigma=3",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // A σ that loosens the file's ε = 4 is said loudly.
    assert!(!text(&o).contains("loosens"), "sigma = 3 gives epsilon below 4: {}", text(&o));
    let loose = tmp.path().join("loose").display().to_string();
    let o = dpgd(&["train", "--quiet", "--config", &cfg, "--out", &loose, "--set", "privacy.sigma=0.3"]);
    assert!(text(&o).contains("WARNING: the command line loosens the privacy"), "{}", text(&o));
    // A command without its subcommand shows its help.
    for args in [vec![], vec!["account"], vec!["data"]] {
        let o = dpgd(&args);
        assert_eq!(o.status.code(), Some(2));
        assert!(text(&o).contains("Usage:") && text(&o).contains("Commands:"), "{args:?}: {}", text(&o));
    }
    // A missing file is named once.
    let o = dpgd(&["train", "--config", "nothere.toml"]);
    assert_eq!(text(&o).matches("No such file").count(), 1, "{}", text(&o));
}

/// Ctrl-C ends a run as a kill would, and says how to continue.
#[test]
fn ctrl_c_says_how_to_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    // Plain GD for 2,000 steps, no releases: long enough to be interrupted.
    let long = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("method = \"filtered\"", "method = \"plain\"")
        .replace("worst_case_steps = 6", "worst_case_steps = 2000")
        .replace("max_steps = 10\n", "")
        .replace("[release]\nactive_count = \"noisy\"\nactive_count_sigma = 20.0\n", "");
    std::fs::write(&cfg, long).unwrap();
    let run = tmp.path().join("run");
    let child = Command::new(env!("CARGO_BIN_EXE_dpgd"))
        .args(["train", "--quiet", "--config", &cfg, "--out", &run.display().to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !run.join("confidential/state.bin").exists() && start.elapsed() < std::time::Duration::from_secs(120) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains(&format!("--resume {}", run.display())), "{err}");
}

/// A config model with a kind only the burn engine trains (group norm)
/// publishes `model.safetensors` too, and `dpgd eval` and `dpgd predict` read it without the
/// config: the same test accuracy as the run's result.json.
#[test]
fn a_burn_engine_run_publishes_a_safetensors_model_that_eval_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("csv");
    std::fs::create_dir_all(&data).unwrap();
    for (file, n) in [("train.csv", 120), ("test.csv", 40)] {
        let rows: String = (0..n)
            .map(|i| format!("{},{},{},{}\n", i % 2, (i % 2) as f64 * 3.0 - 1.0, (i % 7) as f64, (i % 3) as f64))
            .collect();
        std::fs::write(data.join(file), format!("label,a,b,c\n{rows}")).unwrap();
    }
    let cfg = tmp.path().join("gn.toml");
    std::fs::write(
        &cfg,
        format!(
            "name = \"gn\"\n[data]\ndir = \"{}\"\n[model]\nlayers = [{{ kind = \"group_norm\", groups = 1 }}, \
             {{ kind = \"flatten\" }}, {{ kind = \"linear\", out_features = 2 }}]\n[privacy]\nmethod = \"plain\"\n\
             epsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 5\n[train]\nlr = 1.0\n",
            data.display()
        ),
    )
    .unwrap();
    let run = tmp.path().join("run");
    let o = dpgd(&["train", "--quiet", "--config", &cfg.display().to_string(), "--out", &run.display().to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("publishable/result.json")).unwrap()).unwrap();
    let accuracy = result["test_accuracy"].as_f64().unwrap();
    let o = dpgd(&["eval", &run.display().to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains(&format!("test accuracy {:.2} %", 100.0 * accuracy)), "{accuracy}: {}", text(&o));
}

/// `dpgd train` on a folder of CSV files, then `dpgd eval` on it.
#[test]
fn train_and_eval_on_csv_features() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("csv");
    std::fs::create_dir_all(&data).unwrap();
    for (file, n) in [("train.csv", 200), ("test.csv", 50)] {
        let rows: String =
            (0..n).map(|i| format!("{},{},{}\n", i % 2, (i % 2) as f64 * 3.0 - 1.0, (i % 7) as f64)).collect();
        std::fs::write(data.join(file), format!("kind,a,b\n{rows}")).unwrap();
    }
    let cfg = tmp.path().join("csv.toml");
    std::fs::write(
        &cfg,
        format!(
            "name = \"csv\"\n[data]\ndir = \"{}\"\nlabel_column = \"kind\"\n[model]\npreset = \"logistic\"\n[privacy]\n\
             method = \"plain\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 10\n[train]\nlr = 1.0\n",
            data.display()
        ),
    )
    .unwrap();
    let run = tmp.path().join("run").display().to_string();
    let o = dpgd(&["train", "--quiet", "--config", &cfg.display().to_string(), "--out", &run]);
    assert!(o.status.success(), "{}", text(&o));
    let o = dpgd(&["eval", &run]);
    assert!(o.status.success() && text(&o).contains("test accuracy"), "{}", text(&o));
}

/// A run on scattering features (`[data.features]`): trains, writes its features to the cache
/// (`DPGD_CACHE`), and `eval` and `predict` on its run folder transform the images the same way;
/// so does `predict` on the bare model file (it carries the transform), which refuses images
/// of another size instead of classifying features of the wrong meaning.
#[test]
fn a_run_on_scattering_features_trains_evaluates_and_predicts() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    dpgd::data::synthetic::Synthetic { train: 300, test: 60, side: 28, seed: 3 }.write(&data).unwrap();
    let cfg = tmp.path().join("cfg.toml");
    std::fs::write(
        &cfg,
        format!(
            "name = \"scatter\"\n[data]\ndir = \"{}\"\n[data.features]\nkind = \"scattering\"\n[model]\n\
             preset = \"logistic\"\n[privacy]\nmethod = \"plain\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\n\
             worst_case_steps = 8\n[train]\nlr = 4.0\nchunk = 4\n",
            data.display()
        ),
    )
    .unwrap();
    let cache = tmp.path().join("cache");
    let run = tmp.path().join("run");
    let with_cache = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_dpgd")).env("DPGD_CACHE", &cache).args(args).output().expect("run dpgd")
    };
    let o = with_cache(&["train", "--config", &cfg.display().to_string(), "--out", &run.display().to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_dir(cache.join("features")).unwrap().count(), 1, "one cached file");
    let spec: dpgd::arch::ModelSpec = dpgd::train::read_json(&dpgd::train::RunFolder::new(&run).model_spec()).unwrap();
    assert_eq!(spec.input, [81, 7, 7], "the model reads the features");
    let o = with_cache(&["eval", &run.display().to_string()]);
    let accuracy = text(&o);
    assert!(o.status.success() && accuracy.contains("test accuracy"), "{accuracy}");
    let images = data.join("t10k-images-idx3-ubyte.gz").display().to_string();
    let o = with_cache(&["predict", &run.display().to_string(), "--input", &images]);
    assert!(o.status.success(), "{}", text(&o));
    let predicted: Vec<usize> = String::from_utf8_lossy(&o.stdout).lines().map(|l| l.parse().unwrap()).collect();
    let labels = dpgd::data::Dataset::load(&data, Some(10)).unwrap().test.labels;
    let correct = predicted.iter().zip(&labels).filter(|(p, y)| **p == usize::from(**y)).count();
    // predict's classes agree with eval's accuracy: the same transform on the same images.
    assert!(accuracy.contains(&format!("({correct} of 60 test examples")), "{accuracy}: predict got {correct}");
    let file = run.join("publishable/model.safetensors").display().to_string();
    let o = with_cache(&["predict", &file, "--input", &images]);
    assert!(o.status.success(), "{}", text(&o));
    let from_file: Vec<usize> = String::from_utf8_lossy(&o.stdout).lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(from_file, predicted, "the model file alone predicts as its run folder does");
    // 30 × 30 images give 7 × 7 scattering planes too (the model would take their features):
    // refused by their shape.
    let other = tmp.path().join("other");
    dpgd::data::synthetic::Synthetic { train: 10, test: 10, side: 30, seed: 4 }.write(&other).unwrap();
    let (_, out) = dpgd::data::features::Features {
        kind: dpgd::data::features::FeatureKind::Scattering,
        j: 2,
        angles: 8,
        groups: 27,
    }
    .build([1, 30, 30])
    .unwrap();
    assert_eq!(out, [81, 7, 7], "the test needs images whose features fit the model");
    let smaller = other.join("t10k-images-idx3-ubyte.gz").display().to_string();
    let o = with_cache(&["predict", &file, "--input", &smaller]);
    let e = text(&o);
    assert!(!o.status.success() && e.contains("[1, 30, 30]") && e.contains("[1, 28, 28]"), "{e}");
}

/// The end summary of DP-SGD with individual accounting compares with DP-SGD at step k, not
/// with plain private GD (which it never was). It named plain private GD and individual
/// filtering before.
#[test]
fn the_end_summary_of_dp_sgd_with_individual_accounting_names_its_own_baseline() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    dpgd::data::synthetic::Synthetic { train: 500, test: 100, side: 28, seed: 2 }.write(&data).unwrap();
    let cfg = tmp.path().join("cfg.toml");
    std::fs::write(
        &cfg,
        format!(
            "name = \"sgdf\"\n[data]\ndir = \"{}\"\n[model]\npreset = \"logistic\"\n[privacy]\n\
             method = \"sgd-filtered\"\nsample_rate = 0.2\nsigma = 1.0\ndelta = 1e-5\nclip = 20.0\n\
             worst_case_steps = 6\n[train]\nlr = 1.0\nmax_steps = 10\n",
            data.display()
        ),
    )
    .unwrap();
    let run = tmp.path().join("run").display().to_string();
    let o = dpgd(&["train", "--config", &cfg.display().to_string(), "--out", &run]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("DP-SGD at step k = 6 (same sigma)") && t.contains("with individual accounting:"), "{t}");
    assert!(!t.contains("plain private GD") && !t.contains("individual filtering"), "{t}");
}

/// A dataset of `classes` classes whose examples differ by class (learnable), `n` training and
/// `m` test examples of `[h, w, c]` (channels last in the file when `c > 1`).
fn write_idx(dir: &Path, (n, m): (u32, u32), [h, w, c]: [u32; 3], classes: u8) {
    use dpgd::data::{FILES, idx};
    std::fs::create_dir_all(dir).unwrap();
    let px = (h * w * c) as usize;
    let dims = |k: u32| if c > 1 { vec![k, h, w, c] } else { vec![k, h, w] };
    for (count, images, labels) in [(n, FILES[0], FILES[1]), (m, FILES[2], FILES[3])] {
        let ys: Vec<u8> = (0..count).map(|i| ((i * 7 + i / 5) % u32::from(classes)) as u8).collect();
        let xs: Vec<u8> = ys
            .iter()
            .enumerate()
            .flat_map(|(i, &y)| (0..px).map(move |k| (u32::from(y) * 70 + ((i * 13 + k * 7) % 50) as u32) as u8))
            .collect();
        idx::write_gz(&dir.join(format!("{images}.gz")), &dims(count), &xs).unwrap();
        idx::write_gz(&dir.join(format!("{labels}.gz")), &[count], &ys).unwrap();
    }
}

/// Tabular data as a user has it: decimals of different scales, a header row, the label in a
/// column named `target` between the features.
fn write_table(dir: &Path, (n, m): (usize, usize)) {
    std::fs::create_dir_all(dir).unwrap();
    for (file, count) in [("train.csv", n), ("test.csv", m)] {
        let mut text = String::from("age,target,income,ratio\n");
        for i in 0..count {
            let y = (i * 7 + i / 3) % 2;
            let age = 30.0 + 15.0 * y as f64 + (i % 11) as f64;
            let income = 40_000.0 + 9_000.0 * (i % 7) as f64 - 5_000.0 * y as f64;
            text += &format!("{age:.1},{y},{income:.2},{:.4}\n", 0.1 + 0.05 * (i % 5) as f64 + 0.2 * y as f64);
        }
        std::fs::write(dir.join(file), text).unwrap();
    }
}

/// `dpgd predict` applies exactly the transform training and `dpgd eval` applied, for every data
/// form `dpgd train` accepts: its labels on a run's test file give the accuracy `eval` reports —
/// IDX grey images, IDX channels-last images, scattering features of images, and CSV columns
/// (with a header, in any order, other columns ignored; and without one). Before, a model
/// trained on CSV predicted one class for every row and refused decimals and header rows.
#[test]
fn predict_agrees_with_eval_on_every_data_form() {
    let tmp = tempfile::tempdir().unwrap();
    let (grey, colour, table) = (tmp.path().join("grey"), tmp.path().join("colour"), tmp.path().join("table"));
    write_idx(&grey, (300, 120), [16, 16, 1], 3);
    write_idx(&colour, (300, 120), [8, 8, 3], 3);
    write_table(&table, (400, 150));
    let test_images = |d: &Path| d.join("t10k-images-idx3-ubyte.gz");
    let labels_of = |d: &Path| dpgd::data::Dataset::load(d, None).unwrap().test.labels;
    let csv_labels: Vec<u8> = std::fs::read_to_string(table.join("test.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap().parse().unwrap())
        .collect();
    let features = "[data.features]\nkind = \"scattering\"\nj = 2\nangles = 8\ngroups = 0\n";
    let forms: [(&str, &Path, &str, PathBuf, Vec<u8>); 4] = [
        ("grey", &grey, "", test_images(&grey), labels_of(&grey)),
        ("colour", &colour, "", test_images(&colour), labels_of(&colour)),
        ("scattering", &grey, features, test_images(&grey), labels_of(&grey)),
        ("csv", &table, "label_column = \"target\"\n", table.join("test.csv"), csv_labels.clone()),
    ];
    for (name, data, extra, input, labels) in forms {
        let cfg = tmp.path().join(format!("{name}.toml"));
        let (data_extra, features) = extra.split_once("[data.features]").map_or((extra, ""), |(a, b)| (a, b));
        let features = if features.is_empty() { String::new() } else { format!("[data.features]{features}") };
        std::fs::write(
            &cfg,
            format!(
                "name = \"{name}\"\n[data]\ndir = \"{}\"\n{data_extra}{features}[model]\npreset = \"mlp\"\n[privacy]\n\
                 method = \"plain\"\nepsilon = 8.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 15\n[train]\nlr = 2.0\n\
                 seed = 1\n",
                data.display()
            ),
        )
        .unwrap();
        let run = tmp.path().join(format!("run-{name}")).display().to_string();
        let o = dpgd(&["train", "--quiet", "--config", &cfg.display().to_string(), "--out", &run]);
        assert!(o.status.success(), "{name}: {}", text(&o));
        let o = dpgd(&["eval", &run]);
        assert!(o.status.success(), "{name}: {}", text(&o));
        let out = text(&o);
        let correct: usize = out.split('(').nth(1).and_then(|r| r.split_whitespace().next()).unwrap().parse().unwrap();
        let o = dpgd(&["predict", &run, "--input", &input.display().to_string()]);
        assert!(o.status.success(), "{name}: {}", text(&o));
        let predicted: Vec<u8> = String::from_utf8_lossy(&o.stdout).lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(predicted.len(), labels.len(), "{name}");
        let agree = predicted.iter().zip(&labels).filter(|(p, y)| p == y).count();
        assert_eq!(agree, correct, "{name}: predict's labels give {agree} correct, eval says {out}");
        assert!(correct * 10 > labels.len() * 6, "{name}: the model should learn these data ({out})");
    }
    // The CSV model's columns without a header, in the model's order: the same labels.
    let rows: String = std::fs::read_to_string(table.join("test.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            format!("{},{},{}\n", cells[0], cells[2], cells[3])
        })
        .collect();
    let plain = tmp.path().join("plain.csv");
    std::fs::write(&plain, rows).unwrap();
    let run = tmp.path().join("run-csv").display().to_string();
    let with_header = dpgd(&["predict", &run, "--input", &table.join("test.csv").display().to_string()]);
    let without = dpgd(&["predict", &run, "--input", &plain.display().to_string()]);
    assert!(without.status.success(), "{}", text(&without));
    assert_eq!(without.stdout, with_header.stdout);
    // An IDX file for a model of CSV columns: named, refused.
    let o = dpgd(&["predict", &run, "--input", &test_images(&grey).display().to_string()]);
    assert!(!o.status.success() && text(&o).contains("CSV columns"), "{}", text(&o));
}

/// A run on the burn engine says which device it computes on, in its first line and in its
/// confidential record (on a GPU backend: the adapter, and loudly when it is a software
/// rasteriser — `.ci/wgpu-smoke` runs on one).
#[test]
fn a_burn_engine_run_names_its_device() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    let run = tmp.path().join("run");
    let o = dpgd(&[
        "train",
        "--config",
        &cfg,
        "--out",
        &run.display().to_string(),
        "--set",
        "train.engine=\"burn\"",
        "--set",
        "train.max_steps=7",
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("(the burn engine on flex (CPU))"), "{t}");
    let diagnostics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("confidential/diagnostics.json")).unwrap()).unwrap();
    assert_eq!(diagnostics["device"], "flex (CPU)");
}

#[test]
fn bench_step_phases_times_one_micro_batch_of_the_device_path() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    dpgd::data::synthetic::Synthetic { train: 64, test: 10, side: 28, seed: 3 }.write(&data).unwrap();
    let data = data.display().to_string();
    let args = ["bench-step", "--data", &data, "--device", "flex", "--chunk", "16", "--reps", "2", "--phases"];
    let o = dpgd(&[&args[..], &["--engine", "burn"]].concat());
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let last = String::from_utf8_lossy(&o.stdout).lines().last().unwrap_or_default().to_string();
    let json: serde_json::Value = serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {t}"));
    assert_eq!(json["chunk"], 16, "{t}");
    for phase in ["prepare", "forward", "rows_and_norms", "clip_sum"] {
        let ms = json["ms"][phase].as_f64().unwrap_or_else(|| panic!("no {phase}: {t}"));
        assert!(ms > 0.0 && ms.is_finite(), "{phase}: {ms} ms");
    }
    // The fast engine and the host rows have no device phases: refused, with what to use.
    for engine in ["fast", "burn-host-rows"] {
        let o = dpgd(&[&args[..], &["--engine", engine]].concat());
        assert!(!o.status.success() && text(&o).contains("--engine burn"), "{}", text(&o));
    }
}

/// `--without-kernels` takes dpgd's kernels by name (on the CPU only `host-clip` runs: the others
/// are accepted, no change) and refuses an unknown name with the names it knows.
#[test]
fn bench_step_without_kernels_takes_the_kernels_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    dpgd::data::synthetic::Synthetic { train: 32, test: 10, side: 28, seed: 3 }.write(&data).unwrap();
    let data = data.display().to_string();
    let args = ["bench-step", "--data", &data, "--engine", "burn", "--chunk", "16", "--reps", "1", "--examples", "32"];
    let o = dpgd(&[&args[..], &["--without-kernels", "clip-sum,conv-weight-rows,host-clip"]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let o = dpgd(&[&args[..], &["--without-kernels", "clip"]].concat());
    let t = text(&o);
    assert!(!o.status.success() && t.contains("clip-sum, block-square-sums, conv-weight-rows"), "{t}");
}

/// A private search under `--quiet` shows nothing of its candidates (their lines number them
/// and tell how many ran), and no candidate's folder under `confidential/` holds a
/// `publishable/` half: the search publishes the chosen one itself.
#[test]
fn a_quiet_private_search_shows_no_candidate_and_publishes_only_its_choice() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = setup(tmp.path());
    let sweep = tmp.path().join("search.toml");
    std::fs::write(
        &sweep,
        format!(
            "name = \"s\"\nbase = \"{cfg}\"\n[set]\n\"release.active_count\" = \"none\"\n[grid]\n\"train.lr\" = [0.5, \
             1.0]\n[search]\nvalidation = 50\n[search.candidates]\nmean = 3\n"
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = dpgd(&[
        "sweep",
        sweep.to_str().unwrap(),
        "--select",
        "private",
        "--epsilon",
        "4",
        "--delta",
        "1e-5",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(!t.contains("candidate 1") && !t.contains("[candidate") && !t.contains("done:"), "{t}");
    assert!(t.contains("for the whole search"), "{t}");
    for e in std::fs::read_dir(out.join("confidential/candidates")).unwrap() {
        let e = e.unwrap().path();
        assert!(!e.join("publishable").exists() && e.join("outputs/model.safetensors").exists(), "{}", e.display());
    }
    assert!(out.join("publishable/search.json").exists());
}
