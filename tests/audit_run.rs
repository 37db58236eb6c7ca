//! A run's own one-run audit (`[audit] canaries = M`): it leaves the run's publishable files as
//! they are, bounds every tier below its claim, survives a kill and a resume bit for bit, is the
//! one-process audit on several ranks, and is refused where it cannot run.

mod common;

use std::path::Path;

use common::{fixture_config, train, try_train};
use dpgd::audit::one_run::OneRunReport;
use dpgd::collective::InProcess;
use dpgd::train::{Run, RunFolder, TrainConfig, read_json};

/// `method` on 300 fixture examples, logistic, ε = 4, k = 6, a fixed seed, momentum (so the
/// method's state covers the canaries), with `extra` privacy fields and `audit` after.
fn config(method: &str, extra: &str, audit: &str) -> String {
    let privacy =
        format!("method = \"{method}\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 6\n{extra}");
    // Plain DP-SGD runs exactly k steps; the others go on to 9.
    let steps = if method == "sgd" { "" } else { "max_steps = 9\n" };
    fixture_config(
        "audit",
        "logistic",
        (300, 100),
        &privacy,
        &format!("lr = 0.5\n{steps}momentum = 0.5\nseed = 5\n{audit}"),
    )
}

const AUDIT: &str = "[audit]\ncanaries = 600\n";

fn report(dir: &Path) -> OneRunReport {
    read_json(&RunFolder::new(dir).audit()).unwrap()
}

fn bytes(path: impl AsRef<Path>) -> Vec<u8> {
    std::fs::read(path.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", path.as_ref().display()))
}

/// With the same seed, the audited run trains the same model and releases the same values: its
/// publishable files (but the config, which names the audit) are the unaudited run's.
#[test]
fn the_audit_leaves_the_run_as_it_is() {
    for (method, extra) in [("filtered", ""), ("sgd", "sample_rate = 0.2\n"), ("sgd-filtered", "sample_rate = 0.2\n")] {
        let (plain, audited) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        train(&config(method, extra, ""), plain.path(), None);
        train(&config(method, extra, AUDIT), audited.path(), None);
        let (a, b) = (RunFolder::new(plain.path()), RunFolder::new(audited.path()));
        for (x, y) in [
            (a.model_safetensors(), b.model_safetensors()),
            (a.privacy(), b.privacy()),
            (a.result(), b.result()),
            (a.metrics_jsonl(), b.metrics_jsonl()),
        ] {
            assert!(bytes(&x) == bytes(&y), "{method}: {} differs with the audit", x.display());
        }
        assert!(!a.audit().exists());
        let r = report(audited.path());
        assert_eq!((r.canaries, r.included.len(), r.groups.len()), (600, 600, 1), "{method}");
        assert!(r.consistent, "{method}: {:?}", r.groups);
        // The bound that reads the scores by their means and spreads, below the claim too: full-batch
        // GD's against Gaussian DP, DP-SGD's likelihood scores against its composition; none for
        // the Rényi filter's guarantee (no composition to scale).
        match (method, r.groups[0].gaussian) {
            ("filtered" | "sgd", Some(g)) => assert!(g.epsilon_lower <= r.groups[0].claimed_epsilon, "{g:?}"),
            ("filtered" | "sgd", None) => panic!("{method}: no bound from the scores' means and spreads"),
            (_, g) => assert!(g.is_none(), "{method}: a Rényi filter's claim has no composition to scale"),
        }
        let inc = r.included.iter().filter(|&&b| b).count();
        assert!((200..400).contains(&inc), "{method}: {inc} of 600 included");
        assert!(!b.publishable().join("audit.json").exists(), "the coins are confidential");
    }
}

/// Each tier's canaries against its own ε.
#[test]
fn each_tier_is_audited_against_its_own_epsilon() {
    let dir = tempfile::tempdir().unwrap();
    let tiers = "[privacy.budgets]\nepsilons = [2.0, 4.0]\nshares = [0.5, 0.5]\n";
    train(&config("filtered", tiers, AUDIT), dir.path(), None);
    let r = report(dir.path());
    let groups: Vec<(&str, usize)> = r.groups.iter().map(|g| (g.group.as_str(), g.canaries)).collect();
    assert_eq!(groups, [("tier epsilon = 2", 300), ("tier epsilon = 4", 300)]);
    assert!(r.consistent, "{:?}", r.groups);
    assert!(r.groups[0].claimed_epsilon <= 2.0 && r.groups[1].claimed_epsilon <= 4.0);
}

/// Stopped after 4 steps and resumed, the run's audit is the uninterrupted run's, bit for bit
/// (coins, canaries' coordinates, ledger and momentum come back from the state).
#[test]
fn a_resumed_audit_is_the_uninterrupted_one() {
    let text = config("sgd-filtered", "sample_rate = 0.2\n", AUDIT);
    let (whole, parts) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    train(&text, whole.path(), None);
    let first = train(&text, parts.path(), Some(4));
    assert!(!first.finished);
    assert!(!RunFolder::new(parts.path()).audit().exists(), "nothing before the end");
    train(&text, parts.path(), None);
    assert!(bytes(RunFolder::new(whole.path()).audit()) == bytes(RunFolder::new(parts.path()).audit()));
    let (a, b) = (RunFolder::new(whole.path()), RunFolder::new(parts.path()));
    assert!(bytes(a.model_safetensors()) == bytes(b.model_safetensors()));
}

/// On several ranks the canaries live with rank 0's noise and state: the run, its publishable
/// files and its audit are the one-process run's, bit for bit.
#[test]
fn an_audit_on_several_ranks_is_the_one_process_audit() {
    for (method, extra) in [("filtered", ""), ("sgd", "sample_rate = 0.2\n")] {
        let text = config(method, extra, AUDIT);
        let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
        let data = cfg.config().data.load().unwrap();
        let (one, three) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        train(&text, one.path(), None);
        std::thread::scope(|s| {
            let handles: Vec<_> = InProcess::group(3)
                .into_iter()
                .map(|mut comm| {
                    let (cfg, data, dir) = (&cfg, &data, three.path());
                    s.spawn(move || Run::new(cfg, data, dir).ranks(&mut comm).train().map(|_| ()))
                })
                .collect();
            handles.into_iter().for_each(|h| h.join().unwrap().unwrap());
        });
        let (a, b) = (RunFolder::new(one.path()), RunFolder::new(three.path()));
        assert!(bytes(a.audit()) == bytes(b.audit()), "{method}: audit.json");
        assert!(bytes(a.model_safetensors()) == bytes(b.model_safetensors()), "{method}: the model");
        assert!(bytes(a.privacy()) == bytes(b.privacy()), "{method}: privacy.json");
    }
}

#[test]
fn an_audit_is_refused_where_it_cannot_run() {
    let bad = |text: &str| TrainConfig::from_toml(text, &[]).and_then(|c| c.validate()).unwrap_err().to_string();
    let e = bad(&config("filtered", "", "[audit]\ncanaries = 1\n"));
    assert!(e.contains("audit.canaries") && e.contains("between 2"), "{e}");
    // Two per tier: every tier's canaries are guessed among themselves.
    let tiers = "[privacy.budgets]\nepsilons = [2.0, 3.0, 4.0]\nshares = [0.3, 0.3, 0.4]\n";
    let e = bad(&config("filtered", tiers, "[audit]\ncanaries = 5\n"));
    assert!(e.contains("audit.canaries") && e.contains("between 6 (two per tier"), "{e}");
    train(&config("filtered", tiers, "[audit]\ncanaries = 6\n"), tempfile::tempdir().unwrap().path(), None);
    // Gradient norms: fractions of the clip in (0, 1], each once, two canaries per tier and norm,
    // and below 1 only for the full-batch methods.
    let norms = |n: &str| format!("[audit]\ncanaries = 12\ngradient_norms = {n}\n");
    for (n, why) in [
        ("[]", "0 norms"),
        ("[1.0, 0.0]", "0: each norm is a fraction"),
        ("[1.5]", "1.5: each norm"),
        ("[nan]", "NaN: each norm"),
        ("[0.5, 0.5]", "names a norm twice"),
        ("[1, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]", "9 norms"),
    ] {
        let e = bad(&config("filtered", "", &norms(n)));
        assert!(e.contains("audit.gradient_norms") && e.contains(why), "{n}: {e}");
    }
    let e = bad(&config("filtered", tiers, &norms("[1.0, 0.5]").replace("12", "11")));
    assert!(e.contains("audit.canaries") && e.contains("between 12 (two per tier and gradient norm)"), "{e}");
    let e = bad(&config("sgd-filtered", "sample_rate = 0.2\n", &norms("[1.0, 0.5]")));
    assert!(e.contains("audit.gradient_norms") && e.contains("full-batch"), "{e}");
    TrainConfig::from_toml(&config("sgd-filtered", "sample_rate = 0.2\n", &norms("[1.0]")), &[])
        .and_then(|c| c.validate())
        .unwrap();
    train(&config("filtered", tiers, &norms("[1.0, 0.5]")), tempfile::tempdir().unwrap().path(), None);
    let text = fixture_config(
        "audit",
        "logistic",
        (300, 100),
        "method = \"non-private\"\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 6",
        &format!("lr = 0.5\nmax_steps = 9\n{AUDIT}"),
    );
    let e = bad(&text);
    assert!(e.contains("audit.canaries") && e.contains("non-private"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    assert!(try_train(&config("filtered", "", "[audit]\ncanaries = 0\n"), dir.path(), None).is_err());
}
