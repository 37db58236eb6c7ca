//! The worked example of `docs/own-data.md` is what dpgd does: its data commands and its config,
//! taken from the page, train; the page's guarantee line, σ and each tier's count and budget are
//! the run's (the accuracies vary with the noise and are not checked).

mod common;

use std::path::Path;

use dpgd::train::{RunFolder, TrainConfig};

/// The page's indented `awk` commands and its ```toml block.
fn page() -> (Vec<String>, String) {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/own-data.md")).unwrap();
    let commands = text.lines().filter_map(|l| l.strip_prefix("    awk ")).map(|c| format!("awk {c}")).collect();
    let toml = text.split("```toml\n").nth(1).and_then(|t| t.split("```").next()).unwrap().to_string();
    (commands, toml)
}

#[test]
fn the_own_data_walkthrough_runs_as_the_page_says() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/own-data.md")).unwrap();
    let (commands, toml) = page();
    assert_eq!(commands.len(), 2, "the page writes train.csv and test.csv");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("mydata")).unwrap();
    for c in &commands {
        let status = std::process::Command::new("sh").arg("-c").arg(c).current_dir(dir.path()).status().unwrap();
        assert!(status.success(), "{c}");
    }
    let data = dir.path().join("mydata");
    let toml = toml.replace("dir = \"mydata\"", &format!("dir = \"{}\"", data.display()));
    let cfg = TrainConfig::from_toml(&toml, &[]).unwrap().validate().unwrap();
    let summary = dpgd::train::report::summary(&cfg);
    assert!(text.contains(&summary), "the page's guarantee is not the run's: {summary}");
    assert!(text.contains(&format!("sigma = {:.4}", cfg.sigma().unwrap())), "sigma {}", cfg.sigma().unwrap());
    let run = dir.path().join("runs/my-data");
    common::try_train(&toml, &run, None).unwrap();
    let report = dpgd::train::budget::report(&RunFolder::new(&run), &cfg, 3 * 2 + 2).unwrap();
    for t in &report.tiers {
        let line = format!("epsilon = {}: {} of them, budget {} each", t.epsilon, t.examples, t.budget);
        assert!(text.contains(&line), "the page does not say: {line}");
    }
}
