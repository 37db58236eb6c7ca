//! Private hyperparameter search (`dpgd sweep --select private`): the whole search within its
//! target, recomputed independently; only the chosen candidate published; a killed search
//! resumes to the same choice without redrawing; bad search files refused before anything
//! trains.

mod common;

use std::path::{Path, PathBuf};

use dpgd::accounting::selection::Repetitions;
use dpgd::accounting::{Conversion, Rdp, ToApproxDp};
use dpgd::sweep::search::{Search, SearchObserver, SearchResult, prepare, run_search};
use dpgd::train::{Observer, Silent, TrainConfig};

struct Quiet;

impl SearchObserver for Quiet {
    fn candidate(&mut self, _i: usize) -> Box<dyn Observer + '_> {
        Box::new(Silent)
    }
}

const PRIVACY: &str = "method = \"plain\"\nepsilon = 1.0\ndelta = 1e-5\nclip = 1.0\nsteps = 4";

/// A sweep file over `grid` with `search` as its `[search]` section, on the synthetic fixture.
fn setup(dir: &Path, privacy: &str, grid: &str, search: &str) -> PathBuf {
    let base = dir.join("base.toml");
    std::fs::write(&base, common::fixture_config("base", "logistic", (600, 300), privacy, "lr = 1.0\neval_every = 0"))
        .unwrap();
    setup_with_base(dir, &base, grid, search)
}

/// A sweep file over `grid` with `search` as its `[search]` section and the config `base`.
fn setup_with_base(dir: &Path, base: &Path, grid: &str, search: &str) -> PathBuf {
    let sweep = dir.join("sweep.toml");
    std::fs::write(
        &sweep,
        format!(
            "name = \"search\"\nbase = \"{}\"\n[set]\n\"train.chunk\" = 8\n\"release.active_count\" = \"none\"\n[grid]\n{grid}\n[search]\n{search}\n",
            base.display()
        ),
    )
    .unwrap();
    sweep
}

const GRID: &str = "\"train.lr\" = [0.5, 2.0]\n\"privacy.clip\" = [0.5, 1.0]";
const SEARCH: &str = "validation = 100\nvalidation_seed = 3\nseed = 11\n[search.candidates]\nmean = 3";

fn search(dir: &Path) -> (Search, SearchResult) {
    let file = setup(dir, PRIVACY, GRID, SEARCH);
    let s = prepare(&file, (2.0, 1e-5)).unwrap();
    let r = run_search(&s, &dir.join("out"), &mut Quiet, None).unwrap().unwrap();
    (s, r)
}

/// [PS22, Thm 2] by hand, in plain f64, from each grid point's own curve.
fn by_hand(s: &Search) -> f64 {
    let curves: Vec<Rdp> = s.points.iter().map(|p| p.config.accounting().unwrap().rdp().unwrap()).collect();
    theorem_2(&s.guarantee, &curves)
}

/// [PS22, Thm 2] by hand for the candidates' run curves `curves` (each with the score's λρ_v
/// beside it), converted at δ less the published share that covers K's sampling.
fn theorem_2(g: &dpgd::sweep::search::SearchGuarantee, curves: &[Rdp]) -> f64 {
    let Repetitions::TruncatedNegativeBinomial { eta, gamma } = g.repetitions else { panic!("negative binomial") };
    let orders = curves[0].orders().to_vec();
    let one: Vec<f64> = (0..orders.len())
        .map(|i| curves.iter().map(|c| c.epsilons()[i]).fold(orders[i] * g.score_rho, f64::max))
        .collect();
    let mean = eta * (1.0 - gamma) / (gamma * (1.0 - gamma.powf(eta)));
    let c = orders
        .iter()
        .zip(&one)
        .map(|(&l, &e)| (1.0 + eta) * (1.0 - 1.0 / l) * e + (1.0 + eta) * (1.0 / gamma).ln() / l)
        .fold((1.0 + eta) * (1.0 / gamma).ln(), f64::min);
    let search: Vec<f64> = orders.iter().zip(&one).map(|(&l, &e)| e + c + mean.ln() / (l - 1.0)).collect();
    assert!(g.sampling_delta > 0.0 && g.sampling_delta < g.delta * 1e-4, "{g:?}");
    Rdp::new(orders, search).unwrap().epsilon(g.delta - g.sampling_delta, Conversion::Cks).unwrap()
}

#[test]
fn a_search_publishes_one_model_within_its_target_recomputed_by_hand() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, r) = search(tmp.path());
    let g = &r.guarantee;
    assert!(g.epsilon <= 2.0, "{}", g.epsilon);
    let hand = by_hand(&s);
    assert!(g.epsilon >= hand && g.epsilon <= hand * (1.0 + 1e-9), "{} against {hand} by hand", g.epsilon);
    // The calibration leaves little on the table: candidates 10⁻³ looser would exceed the target.
    assert!(g.epsilon > 2.0 * 0.99, "{}", g.epsilon);
    assert!(g.candidate_epsilon < 2.0 && g.candidate_epsilon > 0.1, "{}", g.candidate_epsilon);
    assert!(!r.private && r.summary.starts_with("NOT PRIVATE"), "a fixed seed: {}", r.summary);
    // Every candidate trained without the 100 held-out examples, at the calibrated epsilon.
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("out/confidential/search.json")).unwrap())
            .unwrap();
    let draws = state["draws"].as_array().unwrap();
    assert!(!draws.is_empty());
    assert_eq!(state["scores"].as_array().unwrap().len(), draws.len());
    for entry in std::fs::read_dir(tmp.path().join("out/confidential/candidates")).unwrap() {
        let cfg = TrainConfig::from_file(&entry.unwrap().path().join("outputs/config.toml"), &[]).unwrap();
        assert_eq!(cfg.data.hold_out.map(|h| h.examples), Some(100));
        assert_eq!(cfg.privacy.epsilon, Some(g.candidate_epsilon));
    }
    // Published: the chosen model and the search's report; nothing about K or the others.
    let published = tmp.path().join("out/publishable");
    for file in ["model.safetensors", "config.toml", "search.json", "candidate-privacy.json", "result.json"] {
        assert!(published.join(file).exists(), "{file}");
    }
    let text = std::fs::read_to_string(published.join("search.json")).unwrap();
    for secret in ["\"draws\"", "\"scores\"", "\"k\"", "\"K\""] {
        assert!(!text.contains(secret), "search.json mentions {secret}: {text}");
    }
    // The grid and each point's sigma are public: every point, whether it ran or not.
    assert_eq!(r.grid.len(), 4);
    assert!(r.grid.iter().all(|p| p.sigma.is_some_and(|s| s > 0.0)));
    let chosen = r.chosen.as_ref().unwrap();
    assert!(chosen.test_accuracy > 0.2 && (0.0..=1.2).contains(&chosen.noisy_validation_accuracy), "{chosen:?}");
    // The chosen one has the best noisy score.
    let scores: Vec<i64> = state["scores"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let best = *scores.iter().max().unwrap();
    assert_eq!((chosen.noisy_validation_accuracy * 100.0).round() as i64, best);
    // A finished search is not rerun: the same result.
    let again = run_search(&s, &tmp.path().join("out"), &mut Quiet, None).unwrap().unwrap();
    assert_eq!(again, r);
}

#[test]
fn calibration_never_exceeds_the_target_and_leaves_little_below_it() {
    let tmp = tempfile::tempdir().unwrap();
    for (search, targets) in [
        (SEARCH, [0.7, 1.5, 4.0]),
        ("validation = 100\n[search.candidates]\neta = 0\nmean = 20", [1.0, 2.0, 8.0]),
        ("validation = 100\n[search.candidates]\ndistribution = \"poisson\"\nmean = 5", [1.0, 3.0, 6.0]),
    ] {
        let file = setup(tmp.path(), PRIVACY, GRID, search);
        for target in targets {
            let g = prepare(&file, (target, 1e-5)).unwrap().guarantee;
            assert!(g.epsilon <= target && g.epsilon > 0.99 * target, "{search}: {} for {target}", g.epsilon);
            assert!(g.candidate_epsilon < target, "{search}: candidates at {}", g.candidate_epsilon);
        }
    }
}

#[test]
fn a_killed_search_resumes_to_the_same_draws_scores_and_choice() {
    let (straight, killed) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_, want) = search(straight.path());
    let file = setup(killed.path(), PRIVACY, GRID, SEARCH);
    let s = prepare(&file, (2.0, 1e-5)).unwrap();
    let out = killed.path().join("out");
    // Killed inside the first candidate, then (after a resume) inside the second if there is one.
    assert!(run_search(&s, &out, &mut Quiet, Some((0, 2))).unwrap().is_none());
    let drawn = std::fs::read_to_string(out.join("confidential/search.json")).unwrap();
    let k = serde_json::from_str::<serde_json::Value>(&drawn).unwrap()["draws"].as_array().unwrap().len();
    if k > 1 {
        assert!(run_search(&s, &out, &mut Quiet, Some((1, 1))).unwrap().is_none());
        let later = std::fs::read_to_string(out.join("confidential/search.json")).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&later).unwrap()["draws"],
            serde_json::from_str::<serde_json::Value>(&drawn).unwrap()["draws"],
            "a resume never redraws"
        );
    }
    let got = run_search(&s, &out, &mut Quiet, None).unwrap().unwrap();
    assert_eq!(got, want);
    let read = |d: &Path, f: &str| std::fs::read(d.join(f)).unwrap();
    for f in ["out/confidential/search.json", "out/publishable/search.json", "out/publishable/model.safetensors"] {
        assert_eq!(read(killed.path(), f), read(straight.path(), f), "{f}");
    }
    // Another target in the same folder is refused, not mixed in.
    let other = prepare(&file, (3.0, 1e-5)).unwrap();
    std::fs::remove_dir_all(out.join("publishable")).unwrap();
    let err = run_search(&other, &out, &mut Quiet, None).unwrap_err().to_string();
    assert!(err.contains("other settings"), "{err}");
}

#[test]
fn a_poisson_search_that_draws_no_candidate_publishes_only_its_guarantee() {
    let tmp = tempfile::tempdir().unwrap();
    let search = "validation = 100\nseed = 1\n[search.candidates]\ndistribution = \"poisson\"\nmean = 0.001";
    let file = setup(tmp.path(), PRIVACY, GRID, search);
    let s = prepare(&file, (3.0, 1e-5)).unwrap();
    assert!(matches!(s.guarantee.repetitions, Repetitions::Poisson { .. }));
    let r = run_search(&s, &tmp.path().join("out"), &mut Quiet, None).unwrap().unwrap();
    assert!(r.chosen.is_none() && r.guarantee.epsilon <= 3.0);
    assert!(!tmp.path().join("out/publishable/model.safetensors").exists());
}

#[test]
fn bad_search_files_are_refused_by_field_before_anything_trains() {
    let tmp = tempfile::tempdir().unwrap();
    let refused = |privacy: &str, grid: &str, search: &str, target: (f64, f64), says: &str| {
        let file = setup(tmp.path(), privacy, grid, search);
        let err = prepare(&file, target).map(|s| s.guarantee).unwrap_err().to_string();
        assert!(err.contains(says), "{grid} / {search}: `{err}` should say `{says}`");
        assert!(!tmp.path().join("results").exists());
    };
    refused(PRIVACY, "\"train.lr\" = [0.5]", "", (1.0, 1e-5), "grid of one");
    refused(PRIVACY, GRID, "validation = 600", (1.0, 1e-5), "data.hold_out.examples");
    refused(PRIVACY, GRID, "validation = 0", (1.0, 1e-5), "data.hold_out.examples");
    refused(PRIVACY, GRID, "[search.candidates]\nmean = 100", (0.001, 1e-5), "out of reach");
    refused(PRIVACY, GRID, "[search.candidates]\nmean = 1000", (1.0, 1e-5), "search.candidates");
    refused(PRIVACY, GRID, "[search.candidates]\neta = -2", (1.0, 1e-5), "search.candidates");
    refused(PRIVACY, &format!("{GRID}\nseeds = [1, 2]"), "", (1.0, 1e-5), "grid.train.seed");
    refused(PRIVACY, "\"privacy.epsilon\" = [0.5, 1.0]", "", (1.0, 1e-5), "grid.privacy.epsilon");
    refused(PRIVACY, GRID, "score_noise = -1", (1.0, 1e-5), "search.score_noise");
    // A score as loud as this makes any target below its own cost unreachable.
    refused(PRIVACY, GRID, "score_noise = 0.5", (1.0, 1e-5), "out of reach");
    refused(PRIVACY, GRID, "", (1.0, 2.0), "delta");
    refused("method = \"non-private\"\ndelta = 1e-5\nsteps = 4", GRID, "", (1.0, 1e-5), "private method");
    refused(PRIVACY, GRID, "unknown = 1", (1.0, 1e-5), "unknown");
}

#[test]
fn dp_sgd_candidates_with_and_without_individual_accounting_share_the_filters_order() {
    let tmp = tempfile::tempdir().unwrap();
    let privacy = "method = \"sgd\"\nsample_rate = 0.1\nepsilon = 1.0\ndelta = 1e-5\nclip = 1.0\nsteps = 20";
    let file = setup(
        tmp.path(),
        privacy,
        "\"privacy.method\" = [\"sgd\", \"sgd-filtered\"]",
        "validation = 100\n[search.candidates]\nmean = 2",
    );
    let s = prepare(&file, (3.0, 1e-5)).unwrap();
    assert!(s.guarantee.epsilon <= 3.0 && s.guarantee.epsilon > 2.9, "{:?}", s.guarantee);
    // The filter holds its examples at one order: the grid's curve is there alone.
    let filter = s.points.iter().find(|p| p.has("privacy.method", "sgd-filtered")).unwrap();
    let order = filter.config.accounting().unwrap().rdp().unwrap().orders().to_vec();
    assert_eq!(order.len(), 1);
    assert_eq!(s.guarantee.order, order[0]);
    let r = run_search(&s, &tmp.path().join("out"), &mut Quiet, None).unwrap().unwrap();
    assert!(r.private && r.chosen.is_some(), "{}", r.summary);
}

#[test]
fn a_damaged_search_state_is_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (s, _) = search(tmp.path());
    let out = tmp.path().join("out");
    let path = out.join("confidential/search.json");
    let good = std::fs::read_to_string(&path).unwrap();
    let mut state: serde_json::Value = serde_json::from_str(&good).unwrap();
    state["draws"][0] = serde_json::json!(99);
    for bad in [state.to_string(), good.replace('[', "{"), String::new()] {
        std::fs::write(&path, bad).unwrap();
        let err = run_search(&s, &out, &mut Quiet, None).unwrap_err().to_string();
        assert!(err.contains("search.json"), "{err}");
    }
}

/// Personalized budgets in a search: each tier's examples stay within their own ε for the whole
/// search. The search used to account the base budget only, while each candidate kept the
/// tiers' absolute ε: the ε = 8 tier's examples were (11.2, 10⁻⁵)-DP under a headline of 2.
/// Recomputed by hand for each tier from the published σ of every grid point and the tier's
/// published candidate ε (its whole number of worst-case steps by the accounting crate's
/// Gaussian-DP conversion), and checked against the chosen candidate's published tiers.
#[test]
fn a_search_over_personalized_budgets_keeps_every_tier_within_its_own_epsilon() {
    let tmp = tempfile::tempdir().unwrap();
    let privacy = "method = \"filtered\"\nepsilon = 1.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 4\n\
                   [privacy.budgets]\nepsilons = [0.5, 8.0]\nshares = [0.5, 0.5]\nseed = 1";
    let base = tmp.path().join("base.toml");
    let train = "lr = 1.0\neval_every = 0\nmax_steps = 8\n[stopping]\nrule = \"max-steps\"";
    std::fs::write(&base, common::fixture_config("base", "logistic", (600, 300), privacy, train)).unwrap();
    let file = setup_with_base(tmp.path(), &base, GRID, SEARCH);
    // σ for the strictest tier, as a run with tiers calibrates it.
    let s = prepare(&file, (0.5, 1e-5)).unwrap();
    let g = &s.guarantee;
    assert_eq!(g.tiers.len(), 2, "{g:?}");
    for (j, t) in g.tiers.iter().enumerate() {
        assert!(t.guaranteed_epsilon <= t.epsilon && t.candidate_epsilon < t.epsilon, "tier {j}: {t:?}");
        // Each grid point's tier steps: the most whose Gaussian-DP guarantee is within the
        // candidate ε; its curve λk/(2σ²).
        let curves: Vec<Rdp> = s
            .points
            .iter()
            .map(|p| {
                let sigma = p.config.sigma().unwrap();
                let fits = |k: u64| {
                    let mu = (k as f64).sqrt() / sigma;
                    dpgd::accounting::GaussianDp::new(mu).unwrap().epsilon(1e-5, Conversion::GaussianExact).unwrap()
                        <= t.candidate_epsilon
                };
                let k = (1..100_000u64).take_while(|&k| fits(k)).last().unwrap();
                assert_eq!(p.config.tiers()[j].worst_case_steps, Some(k), "tier {j}");
                let orders = dpgd::accounting::subsampled::dp_accounting_orders();
                let eps = orders.iter().map(|a| a * k as f64 / (2.0 * sigma * sigma)).collect();
                Rdp::new(orders, eps).unwrap()
            })
            .collect();
        let hand =
            theorem_2(&dpgd::sweep::search::SearchGuarantee { sampling_delta: t.sampling_delta, ..g.clone() }, &curves);
        assert!(
            t.guaranteed_epsilon >= hand && t.guaranteed_epsilon <= hand * (1.0 + 1e-9),
            "tier {j}: {} against {hand} by hand",
            t.guaranteed_epsilon
        );
    }
    assert_eq!(g.epsilon, g.tiers[1].guaranteed_epsilon, "the headline is the loosest tier's");
    assert!(g.tiers[1].guaranteed_epsilon > 4.0, "the loose tier trains on past the base: {g:?}");
    let r = run_search(&s, &tmp.path().join("out"), &mut Quiet, None).unwrap().unwrap();
    assert!(r.summary.contains("epsilon 0.5: (") && r.summary.contains("epsilon 8: ("), "{}", r.summary);
    let candidate: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("out/publishable/candidate-privacy.json")).unwrap(),
    )
    .unwrap();
    let tiers = candidate["personalized"]["tiers"].as_array().unwrap();
    for (t, published) in g.tiers.iter().zip(tiers) {
        assert_eq!(published["epsilon"].as_f64().unwrap(), t.candidate_epsilon);
    }
}

/// A search is private only if every candidate run is: a fixed `train.seed` in the base, or
/// exact counts, made every candidate not private while search.json said `private: true`.
#[test]
fn a_search_whose_candidates_are_not_private_says_so_with_every_reason() {
    for (set, says) in [
        ("\"train.seed\" = 5", "train.seed = 5 is fixed"),
        ("\"release.active_count\" = \"exact-non-private\"", "exact-non-private"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let file = setup(tmp.path(), PRIVACY, GRID, "validation = 100\n[search.candidates]\nmean = 2");
        let text = std::fs::read_to_string(&file).unwrap();
        let text = if set.starts_with("\"release") {
            text.replace("\"release.active_count\" = \"none\"", set)
        } else {
            text.replace("[set]\n", &format!("[set]\n{set}\n"))
        };
        std::fs::write(&file, text).unwrap();
        let s = prepare(&file, (3.0, 1e-5)).unwrap();
        let r = run_search(&s, &tmp.path().join("out"), &mut Quiet, None).unwrap().unwrap();
        assert!(!r.private && r.summary.starts_with("NOT PRIVATE"), "{set}: {}", r.summary);
        assert!(r.not_private_because.iter().any(|w| w.contains(says)), "{set}: {:?}", r.not_private_because);
        assert!(!r.not_private_because.iter().any(|w| w.contains("search.seed")), "{set}: the search seed is the OS's");
        let result: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(tmp.path().join("out/publishable/result.json")).unwrap())
                .unwrap();
        assert_eq!(result["private"], serde_json::json!(false), "{set}");
    }
}

/// The published folder states the search's guarantee in every file: `result.json` carries the
/// search's ε (not the candidate's), `README.txt` describes the search's files, the metrics
/// carry no candidate ε, and `candidate-privacy.json` says whose guarantee covers the model.
#[test]
fn every_file_a_search_publishes_states_the_searchs_guarantee() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, r) = search(tmp.path());
    let published = tmp.path().join("out/publishable");
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(published.join("result.json")).unwrap()).unwrap();
    assert_eq!(result["epsilon_of_configuration"].as_f64(), Some(r.guarantee.epsilon));
    assert_eq!(result["guarantee"].as_str(), Some(r.summary.as_str()));
    let readme = std::fs::read_to_string(published.join("README.txt")).unwrap();
    assert!(readme.contains("search.json") && !readme.contains("privacy.json says"), "{readme}");
    let csv = std::fs::read_to_string(published.join("metrics.csv")).unwrap();
    assert!(!csv.contains("epsilon"), "{csv}");
    let candidate = std::fs::read_to_string(published.join("candidate-privacy.json")).unwrap();
    assert!(candidate.contains("published_model_guarantee") && candidate.contains(&r.summary));
    let mut names: Vec<String> =
        std::fs::read_dir(&published).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    for name in &names {
        assert!(
            ["README.txt", "accuracy.png", "candidate-privacy.json", "config.toml", "metrics.csv", "metrics.jsonl"]
                .contains(&name.as_str())
                || name.starts_with("model.")
                || name == "result.json"
                || name == "search.json",
            "unexpected published file {name}"
        );
    }
}

/// The noise of counts left to the tool follows each candidate's own ε, as `dpgd train` at that
/// ε resolves it: candidates used to keep the σ the base config's ε gave (too little noise for
/// their smaller ε), or were all refused.
#[test]
fn candidates_resolve_their_count_noise_for_their_own_epsilon() {
    let tmp = tempfile::tempdir().unwrap();
    let privacy = "method = \"filtered\"\nepsilon = 1.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 4";
    let base = tmp.path().join("base.toml");
    let train = "lr = 1.0\neval_every = 0\nmax_steps = 8\n[stopping]\nrule = \"max-steps\"\n[release]\nactive_count = \
                 \"noisy\"\nactive_count_every = 2";
    std::fs::write(&base, common::fixture_config("base", "logistic", (600, 300), privacy, train)).unwrap();
    let file = setup_with_base(tmp.path(), &base, GRID, "validation = 100\n[search.candidates]\nmean = 10");
    let text = std::fs::read_to_string(&file).unwrap().replace("\"release.active_count\" = \"none\"\n", "");
    std::fs::write(&file, text).unwrap();
    let s = prepare(&file, (1.0, 1e-5)).unwrap();
    let eps_c = s.guarantee.candidate_epsilon;
    assert!(eps_c < 0.5, "{eps_c}");
    for p in &s.points {
        // `dpgd train` of the base at this grid point and the candidates' epsilon.
        let mut alone = TrainConfig::from_file(&base, &[]).unwrap();
        alone.privacy.epsilon = Some(eps_c);
        alone.data.hold_out = Some(s.guarantee.validation);
        alone.train.chunk = Some(8);
        alone.train.lr = p.point["train.lr"].as_float().unwrap();
        alone.privacy.clip = p.point["privacy.clip"].as_float().unwrap();
        let alone = alone.validate().unwrap();
        let (got, want) = (p.config.config().release.active_count_sigma, alone.config().release.active_count_sigma);
        assert_eq!(got, want, "{}: the count's noise at epsilon {eps_c}", p.id);
        let at_base = TrainConfig::from_file(&base, &[]).unwrap().validate().unwrap();
        assert!(got > at_base.config().release.active_count_sigma, "{}: more noise than at epsilon 1", p.id);
    }
}
