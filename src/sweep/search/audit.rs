//! A search audited as a whole (`dpgd sweep --select private --audit canaries=M`): the released
//! candidate's own one-run audit, each tier's canaries judged again against the search's claim
//! for that tier, into `confidential/search-audit.json`.
//!
//! **Why it holds.** The released candidate's canaries see every iterate of the released run,
//! and the search's guarantee covers what it releases (its candidates' runs are accounted with
//! every iterate). So the candidate's lower bounds are lower bounds for the search's mechanism
//! too, and one above the search's claim for a tier refutes that claim.
//!
//! **What it catches, and what it cannot.** Every candidate already audits itself against its
//! own ε, which a correct search's claims exceed (the search composes its candidates). The
//! search's audit adds the search's own accounting: a claim for a tier below what the
//! candidates spend on it — as when the search accounted the base tier's budget only (tested, by
//! re-introducing it). It does not see what the selection alone leaks: each candidate draws its
//! own coins, so no canary is in every candidate's data, and a selection that leaked through the
//! scores would go unseen here (the scores' noise is the accountant's, checked by the search's
//! tests).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::types::Search;
use crate::error::{Error, Result};
use crate::train::canaries::OneRunReport;
use crate::train::{RunFolder, read_json};

/// The file's name, in the search folder's `confidential/`, beside the candidates' own audits
/// (its bounds come from the released candidate's canary coordinates, which no example touches;
/// it is kept with the audits whose coins it rests on).
pub const SEARCH_AUDIT: &str = "search-audit.json";

/// The file of the search's audit by the released candidate's input canaries (black-box).
pub const SEARCH_AUDIT_INPUTS: &str = "search-audit-inputs.json";

/// Where the audit of the search in `dir` is.
#[must_use]
pub fn search_audit_path(dir: &Path) -> PathBuf {
    dir.join("confidential").join(SEARCH_AUDIT)
}

/// Where the audit of the search in `dir` by its released candidate's input canaries is.
#[must_use]
pub fn search_input_audit_path(dir: &Path) -> PathBuf {
    dir.join("confidential").join(SEARCH_AUDIT_INPUTS)
}

/// The audit of a search as a whole, from its released candidate's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SearchAudit {
    /// The threat model: the released candidate's.
    pub threat_model: String,
    /// The canaries of the released candidate.
    pub canaries: usize,
    /// One audit per tier (one for a search without tiers); groups below the clip are the
    /// candidate's own to audit (their claim is what they spent in that run).
    pub groups: Vec<SearchAuditGroup>,
    /// Whether every group's bounds stay at or below the search's claim.
    pub consistent: bool,
}

/// One tier's canaries against the search's claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SearchAuditGroup {
    /// The candidate's group: "the run" or "tier epsilon = …".
    pub group: String,
    /// The search's ε for these canaries' tier at its δ (the headline without tiers).
    pub claimed_epsilon: f64,
    /// The candidate's own claim for them.
    pub candidate_epsilon: f64,
    /// The (ε, δ) analysis's lower bound (Steinke, Nasr & Jagielski 2023).
    pub epsilon_lower: f64,
    /// The f-DP analysis's (Mahloujifar, Melis & Chaudhuri 2025), where the candidate has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epsilon_lower_fdp: Option<f64>,
    /// Whether both bounds are at most the search's claim.
    pub consistent: bool,
}

/// The search's audit from the released candidate's run `folder`, by its gradient canaries
/// (`audit.json`); `None` if that run was not audited so.
///
/// # Errors
/// An unreadable audit file, or a group whose tier the search does not have (a file that is not
/// this search's candidate's), naming the file.
pub fn audit_search(search: &Search, folder: &RunFolder) -> Result<Option<SearchAudit>> {
    audit_search_by(search, &folder.audit())
}

/// As [`audit_search`], from the candidate's audit report at `path` (its gradient canaries' or
/// its input canaries', [`RunFolder::input_audit`]).
///
/// # Errors
/// As [`audit_search`].
pub fn audit_search_by(search: &Search, path: &Path) -> Result<Option<SearchAudit>> {
    if !path.exists() {
        return Ok(None);
    }
    let report: OneRunReport = read_json(path)?;
    let g = &search.guarantee;
    let claims: Vec<f64> =
        if g.tiers.is_empty() { vec![g.epsilon] } else { g.tiers.iter().map(|t| t.guaranteed_epsilon).collect() };
    let mut groups = Vec::new();
    for a in report.groups.iter().filter(|a| a.gradient_norm.is_none_or(|n| n >= 1.0)) {
        let claim = claims
            .get(a.tier.unwrap_or(0))
            .copied()
            .ok_or_else(|| Error::file(path, format!("its group {} has a tier the search does not have", a.group)))?;
        let fdp = a.fdp.as_ref().map(|f| f.epsilon_lower);
        groups.push(SearchAuditGroup {
            group: a.group.clone(),
            claimed_epsilon: claim,
            candidate_epsilon: a.claimed_epsilon,
            epsilon_lower: a.bound.epsilon_lower,
            epsilon_lower_fdp: fdp,
            consistent: a.bound.epsilon_lower <= claim && fdp.is_none_or(|e| e <= claim),
        });
    }
    Ok(Some(SearchAudit {
        threat_model: report.threat_model,
        canaries: report.canaries,
        consistent: groups.iter().all(|g| g.consistent),
        groups,
    }))
}

#[cfg(test)]
mod tests {
    use super::super::prepare::BASE_TIER_ONLY;
    use super::super::{SearchObserver, prepare, run_search};
    use super::*;
    use crate::train::{Observer, Silent};

    struct Quiet;

    impl SearchObserver for Quiet {
        fn candidate(&mut self, _i: usize) -> Box<dyn Observer + '_> {
            Box::new(Silent)
        }
    }

    /// A search over personalized budgets (tiers ε = 0.5 and 8), every candidate filtered GD run to
    /// 1,500 steps (the loose tier's canaries spend most of their budget) and audited with 4,000
    /// canaries: the search's audit stands. With the search's guarantee computed from the base
    /// tier's curve alone (the bug the search once had), the loose tier's claim is 0.5 while its
    /// candidates spend 6: its canaries refute it (measured: 1.6 and 2.0 by the two analyses).
    #[test]
    fn a_search_that_accounts_only_the_base_tier_is_caught_by_its_audit() {
        let tmp = tempfile::tempdir().unwrap();
        crate::data::synthetic::Synthetic::default().write(tmp.path()).unwrap();
        let base = tmp.path().join("base.toml");
        std::fs::write(
            &base,
            format!(
                "name = \"base\"\n[data]\ndir = \"{}\"\ntrain_subset = 600\ntest_subset = 300\n[model]\npreset = \
                 \"logistic\"\n[privacy]\nmethod = \"filtered\"\nepsilon = 1.0\ndelta = 1e-5\nclip = 1.0\n\
                 worst_case_steps = 4\n[privacy.budgets]\nepsilons = [0.5, 8.0]\nshares = [0.5, 0.5]\nseed = 1\n\
                 [train]\nlr = 1.0\neval_every = 0\nmax_steps = 1500\n[stopping]\nrule = \"max-steps\"\n[audit]\n\
                 canaries = 4000\n",
                tmp.path().display()
            ),
        )
        .unwrap();
        let sweep = tmp.path().join("sweep.toml");
        std::fs::write(
            &sweep,
            format!(
                "name = \"search\"\nbase = \"{}\"\n[set]\n\"train.chunk\" = 8\n\"release.active_count\" = \"none\"\n\
                 [grid]\n\"train.lr\" = [0.5, 2.0]\n[search]\nvalidation = 100\nvalidation_seed = 3\nseed = 11\n\
                 [search.candidates]\nmean = 2\n",
                base.display()
            ),
        )
        .unwrap();
        let mut audits = Vec::new();
        for bug in [false, true] {
            BASE_TIER_ONLY.with(|b| b.set(bug));
            let search = prepare(&sweep, (0.5, 1e-5));
            BASE_TIER_ONLY.with(|b| b.set(false));
            let out = tmp.path().join(format!("out-{bug}"));
            run_search(&search.unwrap(), &out, &mut Quiet, None).unwrap().unwrap();
            let audit: SearchAudit = read_json(&search_audit_path(&out)).unwrap();
            audits.push(audit);
        }
        let [right, wrong] = &audits[..] else { unreachable!() };
        assert_eq!(right.groups.len(), 2, "{right:?}");
        assert!(right.consistent, "{right:?}");
        assert!(right.groups.iter().all(|g| g.claimed_epsilon >= g.candidate_epsilon), "{right:?}");
        assert!(wrong.groups[0].consistent && !wrong.groups[1].consistent, "{wrong:?}");
        assert!(wrong.groups[1].claimed_epsilon < wrong.groups[1].candidate_epsilon, "{wrong:?}");
    }
}
