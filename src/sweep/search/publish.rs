//! What a search publishes: the chosen candidate's model and files restated under the
//! search's guarantee, a README, and `search.json`.

use std::path::Path;

use super::types::{Chosen, GridPoint, Search, SearchResult, SearchState};
use crate::accounting::selection::Repetitions;
use crate::error::{Error, Result};
use crate::noise::NoiseSeed;
use crate::train::folder::{jsonl, metrics_csv};
use crate::train::outputs::MetricsRow;
use crate::train::{RunFolder, ValidConfig, read_json};

/// Candidate `i`'s configuration (its grid point's, with a derived noise seed when the search
/// has a fixed one) and run folder.
pub(super) fn candidate(
    search: &Search,
    state: &SearchState,
    i: usize,
    dir: &Path,
) -> Result<(ValidConfig, RunFolder)> {
    let point = &search.points[state.draws[i]];
    let folder = RunFolder::candidate(dir.join("confidential").join("candidates").join(format!("{i}-{}", point.id)));
    let cfg = match search.seed {
        NoiseSeed::Os => point.config.clone(),
        NoiseSeed::Fixed(s) => {
            let mut c = point.config.config().clone();
            c.train.seed = Some(s.wrapping_add(i as u64 + 1));
            c.validate()?
        }
    };
    Ok((cfg, folder))
}

/// Writes `publishable/`: the chosen candidate's model and configuration, its other
/// publishable files restated under the search's guarantee ([`publish_candidate`]), a README
/// and `search.json`, beside the folder then renamed into place.
pub(super) fn publish(search: &Search, state: &SearchState, dir: &Path) -> Result<SearchResult> {
    let best = (0..state.draws.len()).fold(None, |b: Option<usize>, i| match (b, state.scores[i]) {
        (Some(j), Some(s)) if state.scores[j].is_some_and(|t| t >= s) => Some(j),
        (_, Some(_)) => Some(i),
        (b, None) => b,
    });
    let partial = dir.join("publishable.partial");
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(Error::io(&partial))?;
    }
    std::fs::create_dir_all(&partial).map_err(Error::io(&partial))?;
    let mut result = search_result(search, None);
    if let Some(i) = best {
        let (_, folder) = candidate(search, state, i, dir)?;
        // The released candidate's audits (gradient canaries, input canaries) against the search's claims.
        let audits = [
            (folder.audit(), super::audit::search_audit_path(dir)),
            (folder.input_audit(), super::audit::search_input_audit_path(dir)),
        ];
        for (report, out) in audits {
            if let Some(audit) = super::audit::audit_search_by(search, &report)? {
                let text =
                    serde_json::to_string_pretty(&audit).map_err(Error::serialise(super::audit::SEARCH_AUDIT))?;
                crate::files::atomic_write(&out, text.as_bytes())?;
            }
        }
        let test_accuracy = publish_candidate(&folder, &partial, &result)?;
        let noisy = state.scores[i].unwrap_or(0) as f64 / search.guarantee.validation.examples as f64;
        result.chosen = Some(Chosen {
            point: search.points[state.draws[i]].json_point(),
            noisy_validation_accuracy: noisy,
            test_accuracy,
        });
    }
    let text = serde_json::to_string_pretty(&result).map_err(Error::serialise("search.json"))?;
    crate::files::atomic_write(&partial.join("search.json"), text.as_bytes())?;
    crate::files::atomic_write(&partial.join("README.txt"), search_readme(&result).as_bytes())?;
    let out = dir.join("publishable");
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(Error::io(&out))?;
    }
    std::fs::rename(&partial, &out).map_err(Error::io(&out))?;
    Ok(result)
}

/// The files of the chosen candidate's run `folder` that the search publishes, into `to`: the
/// model and its configuration as they are; its `result.json` with the search's guarantee in
/// place of the candidate's (`private`, `epsilon`); its `privacy.json` as
/// `candidate-privacy.json` (one candidate of the search: what the search composes), stating
/// the search's guarantee beside it; its metrics without the candidate's running ε. Nothing
/// else of the candidate's folder. Returns its test accuracy.
fn publish_candidate(folder: &RunFolder, to: &Path, search: &SearchResult) -> Result<f64> {
    for name in ["model.safetensors", "model.bpk", "model.json", "config.toml", "accuracy.png"] {
        let from = folder.publishable().join(name);
        if from.exists() {
            std::fs::copy(&from, to.join(name)).map_err(Error::io(&from))?;
        }
    }
    let published = serde_json::Value::String(search.summary.clone());
    let mut result: crate::train::outputs::RunResult = read_json(&folder.result())?;
    let test_accuracy = result.test_accuracy;
    result.private = search.private;
    result.epsilon = search.private.then_some(search.guarantee.epsilon);
    result.epsilon_of_configuration = Some(search.guarantee.epsilon);
    let mut result = serde_json::to_value(result).map_err(Error::serialise("result.json"))?;
    result["delta"] = serde_json::json!(search.guarantee.delta);
    result["guarantee"] = published.clone();
    write_json(&to.join("result.json"), &result)?;
    let mut privacy: serde_json::Value = read_json(&folder.privacy())?;
    privacy["published_model_guarantee"] = serde_json::json!(format!(
        "this file describes one candidate run of a private search, the mechanism the search repeats; the \
         published model's guarantee is the search's (search.json): {}",
        search.summary
    ));
    write_json(&to.join("candidate-privacy.json"), &privacy)?;
    let rows: Vec<MetricsRow> = std::fs::read_to_string(folder.metrics_jsonl())
        .map_err(Error::io(folder.metrics_jsonl()))?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| Error::file(folder.metrics_jsonl(), e.to_string())))
        .collect::<Result<_>>()?;
    let rows: Vec<MetricsRow> = rows.into_iter().map(|r| MetricsRow { epsilon_so_far: None, ..r }).collect();
    let header = std::fs::read_to_string(folder.metrics_csv()).map_err(Error::io(folder.metrics_csv()))?;
    let columns: Vec<&str> =
        header.lines().next().unwrap_or("").split(',').filter(|c| *c != "epsilon_so_far").collect();
    crate::files::atomic_write(&to.join("metrics.csv"), metrics_csv(&rows, &columns).as_bytes())?;
    crate::files::atomic_write(&to.join("metrics.jsonl"), jsonl(&rows)?.as_bytes())?;
    Ok(test_accuracy)
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(Error::serialise("a published JSON file"))?;
    crate::files::atomic_write(path, text.as_bytes())
}

/// `publishable/README.txt` of a search.
fn search_readme(result: &SearchResult) -> String {
    format!(
        "PUBLISHABLE outputs of a dpgd private hyperparameter search: the chosen candidate's model and \
         configuration, its test accuracy and noisy validation accuracy, and the search's guarantee.\n\n\
         Safe to publish exactly when search.json says \"private\": true. Every file here is covered by the \
         search's guarantee, not by one candidate's: {}\n\n\
         candidate-privacy.json describes one candidate run (the mechanism the search repeats a random number \
         of times); result.json and metrics.* are the chosen candidate's, restated under the search's guarantee \
         (metrics without the candidate's running epsilon). How many candidates ran, which won and every other \
         candidate's score stay in ../confidential/.\n",
        result.summary
    )
}

/// Why the search is not private (empty when it is): a fixed search seed, and every reason any
/// candidate run is not private (a fixed `train.seed`, exact counts, a non-private method, …).
fn not_private_reasons(search: &Search) -> Vec<String> {
    let mut why = Vec::new();
    if let NoiseSeed::Fixed(s) = search.seed {
        why.push(format!(
            "search.seed = {s} is fixed: K, the draws, the scores' noise and every candidate's noise are a public \
             function of it"
        ));
    }
    for p in &search.points {
        for reason in p.config.non_private_reasons() {
            let reason = format!("a candidate's {reason}");
            if !why.contains(&reason) {
                why.push(reason);
            }
        }
    }
    why
}

fn search_result(search: &Search, chosen: Option<Chosen>) -> SearchResult {
    let g = &search.guarantee;
    let not_private_because = not_private_reasons(search);
    let private = not_private_because.is_empty();
    let k = match g.repetitions {
        Repetitions::TruncatedNegativeBinomial { eta, .. } => format!("a truncated negative binomial (eta {eta})"),
        Repetitions::Poisson { .. } => "a Poisson".to_string(),
    };
    let mut guarantee = format!(
        "({}, {:e})-DP for the whole search, the choice included: {k} number of candidates (mean {:.3}), each a \
         grid point of {} chosen at random, calibrated for epsilon = {} and scored on {} held-out examples with \
         discrete Gaussian noise of std {:.3}; via Renyi DP at order {} and the CKS conversion",
        crate::train::significant(g.epsilon),
        g.delta,
        g.mean_candidates,
        search.points.len(),
        crate::train::significant(g.candidate_epsilon),
        g.validation.examples,
        g.score_sigma,
        g.order
    );
    if !g.tiers.is_empty() {
        let tiers: Vec<String> = g
            .tiers
            .iter()
            .map(|t| {
                format!(
                    "epsilon {}: ({}, {:e})-DP",
                    t.epsilon,
                    crate::train::significant(t.guaranteed_epsilon),
                    g.delta
                )
            })
            .collect();
        guarantee += &format!(
            "; with personalized budgets, each example within its own tier's epsilon for the whole search: {}",
            tiers.join(", ")
        );
    }
    let summary = if private {
        guarantee
    } else {
        format!(
            "NOT PRIVATE: {}; with OS noise and private candidates it would be {guarantee}",
            not_private_because.join("; ")
        )
    };
    let neighbours =
        search.points[0].config.accounting().map_or_else(String::new, |a| a.neighbours(&search.points[0].config));
    SearchResult {
        private,
        not_private_because,
        summary,
        guarantee: g.clone(),
        neighbours,
        rests_on: "Papernot & Steinke 2022 (Thm 2: truncated negative binomial; Thm 6: Poisson) applied to one \
                   candidate's Renyi DP curve: the largest over the grid of max(the run's own curve, the noisy \
                   score's), the score being a count with sensitivity 1 over examples the run never trains on; \
                   with personalized budgets, each tier's from that tier's own curve in every candidate. delta \
                   includes (1 + e^epsilon) times the gap between K as drawn and K's distribution in the theorem \
                   (sampling_delta). Published: the chosen model, its configuration, its noisy validation accuracy \
                   and its test accuracy. Confidential: how many candidates ran, which won, and every other \
                   candidate."
            .into(),
        grid: search.points.iter().map(|p| GridPoint { point: p.json_point(), sigma: p.config.sigma() }).collect(),
        chosen,
    }
}
