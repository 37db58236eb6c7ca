//! The composition test: features that are sound alone stay sound together. Every option that
//! changes what a run releases or how it is accounted is a factor below; the test walks every
//! pair of their values (a covering array: each pair in at least one combination, on tiny data),
//! and each combination either is refused — with a message naming both options that meet — or
//! runs, and then:
//!
//! (a) every ε a publishable file states (`privacy.json`, `result.json`, `search.json`, each
//!     tier's) is at least an independent recomputation by the accounting crate from the
//!     published σ, steps, releases, tiers and K's distribution — never from the code's own
//!     curves ([`RunAccounting`](dpgd::train::method::RunAccounting) is not called here);
//! (b) `private` is false whenever any ingredient is not private, each reason listed;
//! (c) each example spent at most its own tier's budget, the example known by its original row
//!     (read back from its features, whatever hold-out, validation split or rank shard moved it);
//! (d) nothing the documentation calls confidential is in `publishable/`, and a run interrupted
//!     after two steps and resumed with a fixed seed publishes byte for byte what the
//!     uninterrupted run publishes (with the operating system's noise, every check here holds
//!     across the resume);
//! (e) the oracle: a one-run audit of the combination's training mechanism
//!     ([`audit_one_run`]: its method, noise, conversion, sampling, ledger and tiers, with
//!     gradient canaries in every tier) never bounds a tier's ε above the ε claimed for it.
//!     Each audit holds at confidence 1 − 0.001/60 and there are fewer than 60 combinations, so
//!     with the noise from the operating system a correct implementation fails this check in
//!     fewer than one CI run in a thousand (a union bound); with a fixed seed it is
//!     deterministic. It does not see the engine, device, ranks, hold-out, counts or the search
//!     (the canaries are the audit's own, on its own model): those meet the accounting in
//!     (a)–(c). A combination with `[audit]` also audits its own run (a search, each candidate,
//!     and its released candidate again against the search's ε) at `audit.confidence` =
//!     1 − 10⁻⁶: about 120 such audits are expected (a search runs 2 candidates on average),
//!     which add at most 1.2·10⁻⁴, so a correct build fails the whole test in fewer than 1.2 CI
//!     runs in a thousand.
//!
//! The model is a factor too: the accounting does not read it, but the per-example rows it
//! yields (a residual join sends a gradient back to an earlier layer; each engine has its own
//! kernels) are what the ledger charges, so a layer kind joins the matrix with its engines.
//!
//! Pairs that may not meet are [`REFUSED`], each with its reason; the test checks that every one
//! of them is refused, naming both options. A new value of an option fails to compile in
//! [`Combo::config`] until it is placed in the matrix.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use dpgd::accounting::event::{Accountant, DpEvent, RdpAccountant};
use dpgd::accounting::selection::Repetitions;
use dpgd::accounting::subsampled::dp_accounting_orders;
use dpgd::accounting::{Conversion, GaussianDp, Rdp, ToApproxDp, Zcdp};
use dpgd::audit::one_run::{OneRunSettings, audit_one_run};
use dpgd::collective::InProcess;
use dpgd::noise::NoiseSampler;
use dpgd::sweep::search::{SearchObserver, prepare, run_search};
use dpgd::train::{ActiveRelease, Factorization, Method, Observer, Run, RunFolder, RunOptions, Silent, TrainConfig};
use serde_json::Value;

/// Training rows of the test's CSV data; every third row (0, 3, …) asks for the strict tier.
const ROWS: usize = 150;
/// The tiers of personalized budgets: strict, loose.
const TIERS: [f64; 2] = [2.0, 6.0];
/// A run's (and a search's) target ε.
const EPSILON: f64 = 2.0;

/// Where each example's budget comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Budgets {
    None,
    Shares,
    File,
    Column,
}

/// Whether the run is one candidate of a private search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Search {
    None,
    Private,
}

/// Whether `data.hold_out` holds training examples out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HoldOut {
    None,
    Some,
}

/// How many ranks (threads of one process, over the in-process collective).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ranks {
    One,
    Three,
}

/// The per-example engine and its device: the fast CPU engine, or the burn engine on each CPU
/// backend (ndarray and wgpu join under their features).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Device {
    Fast,
    Flex,
    Ndarray,
    Wgpu,
}

/// Where the noise comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seed {
    Os,
    Fixed,
}

/// Whether the run audits itself in one run (`[audit]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Audit {
    None,
    Canaries,
    /// Canaries at the clip and at C/4, the small ones audited against the ε of what they
    /// spent (the full-batch methods only).
    Norms,
    /// Input canaries (black-box): rows of the training set, trained and charged as examples.
    Inputs,
}

/// The model: a preset, or a layer list through the model's walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Model {
    /// `preset = "logistic"`.
    Logistic,
    /// Convolutions, GroupNorm, a residual `add` (its join sends a gradient back to an earlier
    /// layer) and average pooling.
    Residual,
    /// An MLP with a `layer_norm`.
    LayerNorm,
}

/// Whether the run is interrupted after its second step (a search: inside its first candidate)
/// and resumed by a second invocation, as after a kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resume {
    None,
    Interrupted,
}

/// One combination of every option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Combo {
    /// Each factor's value, as an index into its values.
    v: [usize; FACTORS],
    method: Method,
    budgets: Budgets,
    search: Search,
    hold_out: HoldOut,
    ranks: Ranks,
    device: Device,
    noise: NoiseSampler,
    conversion: Conversion,
    seed: Seed,
    counts: ActiveRelease,
    audit: Audit,
    factorization: Factorization,
    model: Model,
    resume: Resume,
}

/// The engines and devices this build has.
fn devices() -> Vec<Device> {
    let mut out = vec![Device::Fast, Device::Flex];
    out.extend(cfg!(feature = "ndarray").then_some(Device::Ndarray));
    out.extend(cfg!(feature = "wgpu").then_some(Device::Wgpu));
    out
}

/// The options, each with its values, in [`Combo`]'s order.
const FACTORS: usize = 14;

fn levels() -> [usize; FACTORS] {
    [Method::ALL.len(), 4, 2, 2, 2, devices().len(), 2, 3, 2, 3, 4, 3, 3, 2]
}

/// The option names a refusal may use for each factor (a message names an option by one).
const NAMES: [&[&str]; FACTORS] = [
    &["privacy.method", "method", "DP-SGD", "sgd"],
    &["privacy.budgets"],
    &["search", "--select private"],
    &["data.hold_out", "hold_out", "hold out"],
    &["rank"],
    &["train.engine", "train.device", "engine", "device"],
    &["privacy.noise", "noise"],
    &["privacy.conversion", "conversion"],
    &["train.seed", "seed"],
    &["release.active_count", "active count", "count"],
    &["audit.canaries", "audit"],
    &["privacy.factorization", "factorization"],
    &["model.layers", "layer"],
    &["resume", "resumed"],
];

impl Combo {
    /// The combination whose factor f takes value `v[f]`.
    fn of(v: [usize; FACTORS]) -> Self {
        Self {
            v,
            method: Method::ALL[v[0]],
            budgets: [Budgets::None, Budgets::Shares, Budgets::File, Budgets::Column][v[1]],
            search: [Search::None, Search::Private][v[2]],
            hold_out: [HoldOut::None, HoldOut::Some][v[3]],
            ranks: [Ranks::One, Ranks::Three][v[4]],
            device: devices()[v[5]],
            noise: [NoiseSampler::Gaussian, NoiseSampler::DiscreteGaussian][v[6]],
            conversion: [Conversion::GaussianExact, Conversion::Cks, Conversion::BunSteinke][v[7]],
            seed: [Seed::Os, Seed::Fixed][v[8]],
            counts: [ActiveRelease::None, ActiveRelease::Noisy, ActiveRelease::ExactNonPrivate][v[9]],
            audit: [Audit::None, Audit::Canaries, Audit::Norms, Audit::Inputs][v[10]],
            factorization: [Factorization::Root, Factorization::Optimized, Factorization::Identity][v[11]],
            model: [Model::Logistic, Model::Residual, Model::LayerNorm][v[12]],
            resume: [Resume::None, Resume::Interrupted][v[13]],
        }
    }

    /// The run's config on the data in `data`. Every value of every option is matched here: a
    /// new one does not compile until it is given its config (and so joins the matrix).
    fn config(&self, data: &Path) -> String {
        // k = 4 worst-case steps; up to 6 where the method may go on past k.
        let (method, private_steps, max_steps) = match self.method {
            Method::Plain => ("plain", "worst_case_steps = 4\n", 4),
            Method::Filtered => ("filtered", "worst_case_steps = 4\n", 6),
            Method::Sgd => ("sgd", "sample_rate = 0.3\nworst_case_steps = 4\n", 4),
            Method::SgdFiltered => ("sgd-filtered", "sample_rate = 0.3\nworst_case_steps = 4\n", 6),
            Method::BandMf => ("bandmf", "sample_rate = 0.6\nbands = 2\nworst_case_steps = 4\n", 4),
            Method::BandMfFiltered => ("bandmf-filtered", "bands = 2\nworst_case_steps = 2\n", 6),
            Method::NonPrivate => ("non-private", "worst_case_steps = 4\n", 6),
        };
        let target = if self.method == Method::NonPrivate { String::new() } else { format!("epsilon = {EPSILON}\n") };
        let noise = match self.noise {
            NoiseSampler::Gaussian => "gaussian",
            NoiseSampler::DiscreteGaussian => "discrete-gaussian",
        };
        let conversion = match self.conversion {
            Conversion::GaussianExact => "gaussian-exact",
            Conversion::Cks => "cks",
            Conversion::BunSteinke => "bun-steinke",
        };
        let budgets = match self.budgets {
            Budgets::None => String::new(),
            Budgets::Shares => "shares = [0.34, 0.66]\nseed = 1\n".into(),
            Budgets::File => format!("file = \"{}\"\n", data.join("budgets.csv").display()),
            Budgets::Column => "column = \"eps\"\n".into(),
        };
        let budgets = if budgets.is_empty() {
            budgets
        } else {
            format!("[privacy.budgets]\nepsilons = [{}, {}]\n{budgets}", TIERS[0], TIERS[1])
        };
        let hold_out = match self.hold_out {
            HoldOut::None => "",
            HoldOut::Some => "[data.hold_out]\nexamples = 15\nseed = 2\n",
        };
        let engine = match self.device {
            Device::Fast => "engine = \"fast\"\n",
            Device::Flex => "engine = \"burn\"\ndevice = \"flex\"\n",
            Device::Ndarray => "engine = \"burn\"\ndevice = \"ndarray\"\n",
            Device::Wgpu => "engine = \"burn\"\ndevice = \"wgpu\"\n",
        };
        let seed = match self.seed {
            Seed::Os => "",
            Seed::Fixed => "seed = 7\n",
        };
        let counts = match self.counts {
            ActiveRelease::None => "",
            ActiveRelease::Noisy => "[release]\nactive_count = \"noisy\"\nactive_count_every = 2\n",
            ActiveRelease::ExactNonPrivate => {
                "[release]\nactive_count = \"exact-non-private\"\nactive_count_every = 2\n"
            }
        };
        let audit = match self.audit {
            Audit::None => "",
            Audit::Canaries => "[audit]\ncanaries = 200\nconfidence = 0.999999\n",
            Audit::Norms => "[audit]\ncanaries = 200\nconfidence = 0.999999\ngradient_norms = [1.0, 0.25]\n",
            Audit::Inputs => "[audit]\ninput_canaries = 60\nconfidence = 0.999999\n",
        };
        let factorization = match self.factorization {
            Factorization::Root => "",
            Factorization::Optimized => "factorization = \"optimized\"\n",
            Factorization::Identity => "factorization = \"identity\"\n",
        };
        // Each example is 3 channels of 1 × 1 (the CSV's features).
        let model = match self.model {
            Model::Logistic => "preset = \"logistic\"",
            Model::Residual => {
                "layers = [{ kind = \"conv2d\", out_channels = 4, kernel = 1 }, { kind = \"group_norm\", groups = 2 }, \
                 { kind = \"relu\" }, { kind = \"conv2d\", out_channels = 4, kernel = 1 }, { kind = \"relu\" }, \
                 { kind = \"add\", from = 2 }, { kind = \"avg_pool2d\", kernel = 1, stride = 1 }, { kind = \"flatten\" }, \
                 { kind = \"linear\", out_features = 3 }]"
            }
            Model::LayerNorm => {
                "layers = [{ kind = \"flatten\" }, { kind = \"linear\", out_features = 4 }, { kind = \"layer_norm\" }, \
                 { kind = \"tanh\" }, { kind = \"linear\", out_features = 3 }]"
            }
        };
        // Ranks, the search and a resume are how the config runs, not what it says (see `attempt`).
        let (Ranks::One | Ranks::Three, Search::None | Search::Private, Resume::None | Resume::Interrupted) =
            (self.ranks, self.search, self.resume);
        format!(
            "name = \"combo\"\n[data]\ndir = \"{}\"\nignore_columns = [\"eps\"]\n{hold_out}[model]\n{model}\n[privacy]\nmethod = \"{method}\"\n{private_steps}{target}delta = 1e-5\nclip = 0.1\nnoise = \
             \"{noise}\"\nconversion = \"{conversion}\"\n{factorization}{budgets}[train]\nlr = 0.5\nmax_steps = {max_steps}\nchunk = \
             8\nthreads = 1\neval_every = 3\n{engine}{seed}{counts}{audit}",
            data.display()
        )
    }
}

/// A combination compatible with every single option value but BandMF's own (the factorization):
/// filtered GD, no tiers, no search, no hold-out, one rank, the fast engine, Gaussian noise, the
/// CKS conversion, a fixed seed, no counts, no audit, the default factorization, the logistic
/// model, no resume.
const DEFAULT: [usize; FACTORS] = [1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0];

/// A pair of option values that may not meet, and why (the refusal must say it, naming both).
struct Refusal {
    why: &'static str,
    pair: fn(&Combo) -> Option<(usize, usize)>,
}

fn sgd(m: Method) -> bool {
    matches!(m, Method::Sgd | Method::SgdFiltered | Method::BandMf)
}

/// Every pair that is refused, with its reason; each returns the two factors that meet.
const REFUSED: [Refusal; 13] = [
    Refusal {
        why: "only BandMF's methods have a correlation matrix to choose",
        pair: |c| {
            (c.factorization != Factorization::Root && !matches!(c.method, Method::BandMf | Method::BandMfFiltered))
                .then_some((0, 11))
        },
    },
    Refusal {
        why: "a method without a per-example ledger cannot give examples budgets of their own",
        pair: |c| {
            (c.budgets != Budgets::None
                && matches!(c.method, Method::Plain | Method::Sgd | Method::BandMf | Method::NonPrivate))
            .then_some((0, 1))
        },
    },
    Refusal {
        why: "the subsampled discrete Gaussian has no accountant",
        pair: |c| (sgd(c.method) && c.noise == NoiseSampler::DiscreteGaussian).then_some((0, 6)),
    },
    Refusal {
        why: "DP-SGD is accounted in Renyi DP, which has no exact GDP curve",
        pair: |c| (sgd(c.method) && c.conversion == Conversion::GaussianExact).then_some((0, 7)),
    },
    Refusal {
        why: "a DP-SGD run releases only its model",
        pair: |c| (sgd(c.method) && c.counts != ActiveRelease::None).then_some((0, 9)),
    },
    Refusal {
        why: "the banded noise is the continuous Gaussian, correlated across steps",
        pair: |c| (c.method == Method::BandMfFiltered && c.noise == NoiseSampler::DiscreteGaussian).then_some((0, 6)),
    },
    Refusal {
        why: "discrete-Gaussian noise is accounted through zCDP, not the continuous Gaussian's exact curve",
        pair: |c| {
            (c.noise == NoiseSampler::DiscreteGaussian
                && c.conversion == Conversion::GaussianExact
                && c.method != Method::NonPrivate)
                .then_some((6, 7))
        },
    },
    Refusal {
        why: "a private search needs every candidate's Renyi DP curve",
        pair: |c| (c.search == Search::Private && c.method == Method::NonPrivate).then_some((0, 2)),
    },
    Refusal {
        why: "a private search holds out its own validation split",
        pair: |c| (c.search == Search::Private && c.hold_out == HoldOut::Some).then_some((2, 3)),
    },
    Refusal {
        why: "a private search runs its candidates in one process",
        pair: |c| (c.search == Search::Private && c.ranks == Ranks::Three).then_some((2, 4)),
    },
    Refusal {
        why: "a non-private run has no guarantee to audit",
        pair: |c| (c.audit != Audit::None && c.method == Method::NonPrivate).then_some((0, 10)),
    },
    Refusal {
        why: "a canary group below the clip is audited against what it spent, built for full-batch methods",
        pair: |c| (c.audit == Audit::Norms && sgd(c.method)).then_some((0, 10)),
    },
    Refusal {
        why: "input canaries are rows of one process's training set",
        pair: |c| (c.audit == Audit::Inputs && c.ranks == Ranks::Three).then_some((4, 10)),
    },
];

/// The refusal that applies to `c`, if any.
fn refused(c: &Combo) -> Option<(&'static Refusal, (usize, usize))> {
    REFUSED.iter().find_map(|r| (r.pair)(c).map(|p| (r, p)))
}

/// A covering array of the combinations no refusal applies to: every pair of values that can
/// meet in one is in at least one row. Greedy and deterministic: each row starts from the first
/// uncovered pair and gives each other factor the value that covers the most new pairs.
fn covering_array() -> Vec<Combo> {
    let lv = levels();
    let mut uncovered = BTreeSet::new();
    for f in 0..FACTORS {
        for g in f + 1..FACTORS {
            for a in 0..lv[f] {
                for b in 0..lv[g] {
                    if pair_can_run(f, a, g, b) {
                        uncovered.insert((f, a, g, b));
                    }
                }
            }
        }
    }
    let mut rows = Vec::new();
    while let Some(&(f, a, g, b)) = uncovered.iter().next() {
        let mut row: [Option<usize>; FACTORS] = [None; FACTORS];
        (row[f], row[g]) = (Some(a), Some(b));
        for h in (0..FACTORS).filter(|&h| h != f && h != g) {
            let gain = |v: usize| {
                (0..FACTORS)
                    .filter_map(|k| row[k].map(|w| (k, w)))
                    .filter(|&(k, w)| uncovered.contains(&if k < h { (k, w, h, v) } else { (h, v, k, w) }))
                    .count()
            };
            let fits = |v: usize| {
                let mut probe = row;
                probe[h] = Some(v);
                partial_can_run(&probe)
            };
            let best = (0..lv[h]).filter(|&v| fits(v)).max_by_key(|&v| (gain(v), std::cmp::Reverse(v)));
            row[h] = Some(best.expect("some value of every option composes"));
        }
        let values = row.map(|v| v.unwrap_or(0));
        for p in 0..FACTORS {
            for q in p + 1..FACTORS {
                uncovered.remove(&(p, values[p], q, values[q]));
            }
        }
        rows.push(Combo::of(values));
    }
    rows
}

/// Whether factor f = a and g = b can meet in a combination that runs: no refusal applies to
/// them with every other factor at a value compatible with them.
fn pair_can_run(f: usize, a: usize, g: usize, b: usize) -> bool {
    let mut probe = [None; FACTORS];
    (probe[f], probe[g]) = (Some(a), Some(b));
    partial_can_run(&probe)
}

/// Whether the set factors of `row` can be completed into a combination no refusal applies to
/// (by trying every combination: a few thousand).
fn partial_can_run(row: &[Option<usize>; FACTORS]) -> bool {
    static RUNNABLE: std::sync::OnceLock<Vec<[usize; FACTORS]>> = std::sync::OnceLock::new();
    let all = RUNNABLE.get_or_init(|| {
        let lv = levels();
        let total: usize = lv.iter().product();
        (0..total)
            .map(|mut k| {
                let mut v = [0; FACTORS];
                for (f, x) in v.iter_mut().enumerate() {
                    (*x, k) = (k % lv[f], k / lv[f]);
                }
                v
            })
            .filter(|v| refused(&Combo::of(*v)).is_none())
            .collect()
    });
    all.iter().any(|v| row.iter().zip(v).all(|(r, x)| r.is_none_or(|r| r == *x)))
}

/// The data: `train.csv` whose feature `id` is each row's index plus ½ (so each example's row
/// can be read back after any partition), a column `eps` with each row's tier (every third row
/// strict), and the same tiers in `budgets.csv`; a public `test.csv`.
fn data() -> &'static Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (mut train, mut file) = ("id,x1,x2,eps,label\n".to_string(), "epsilon\n".to_string());
        for r in 0..ROWS {
            let y = r % 3;
            let eps = tier_of_row(r);
            train += &format!("{r}.5,{},{},{eps},{y}\n", y as f64 + 0.1 * (r % 7) as f64, 1.0 - y as f64);
            file += &format!("{eps}\n");
        }
        let mut test = "id,x1,x2,label\n".to_string();
        for r in 0..60 {
            let y = r % 3;
            test += &format!("{r}.5,{},{},{y}\n", y as f64 + 0.1 * (r % 5) as f64, 1.0 - y as f64);
        }
        std::fs::write(dir.path().join("train.csv"), train).unwrap();
        std::fs::write(dir.path().join("test.csv"), test).unwrap();
        std::fs::write(dir.path().join("budgets.csv"), file).unwrap();
        dir
    })
    .path()
}

/// The tier row `r` of the training file asks for.
fn tier_of_row(r: usize) -> f64 {
    if r.is_multiple_of(3) { TIERS[0] } else { TIERS[1] }
}

struct Quiet;

impl SearchObserver for Quiet {
    fn candidate(&mut self, _i: usize) -> Box<dyn Observer + '_> {
        Box::new(Silent)
    }
}

/// Trains `c` into `dir` (a run, on its ranks, or a private search), or the refusal; an
/// interrupted combination stops after its second step and is resumed by a second call.
fn attempt(c: &Combo, dir: &Path) -> Result<(), String> {
    if c.resume == Resume::Interrupted {
        let finished = attempt_part(c, dir, Some(2))?;
        assert!(!finished, "{c:?}: stopped after 2 steps, yet finished");
    }
    let finished = attempt_part(c, dir, None)?;
    assert!(finished, "{c:?}: not finished");
    Ok(())
}

/// One invocation of [`attempt`]: trains (or resumes) `c` in `dir` to the end, or for
/// `stop_after` steps (a search: of its first candidate); whether it finished.
fn attempt_part(c: &Combo, dir: &Path, stop_after: Option<usize>) -> Result<bool, String> {
    let text = c.config(data());
    if c.search == Search::Private {
        dpgd::sweep::one_process(if c.ranks == Ranks::Three { 3 } else { 1 }).map_err(|e| e.to_string())?;
        let base = dir.join("base.toml");
        std::fs::write(&base, &text).unwrap();
        let sweep = dir.join("sweep.toml");
        std::fs::write(
            &sweep,
            format!(
                "name = \"search\"\nbase = \"{}\"\n[grid]\n\"train.lr\" = [0.5, 1.0]\n[search]\nvalidation = 15\n\
                 [search.candidates]\nmean = 2\n",
                base.display()
            ),
        )
        .unwrap();
        let s = prepare(&sweep, (EPSILON, 1e-5)).map_err(|e| e.to_string())?;
        let out = run_search(&s, &dir.join("out"), &mut Quiet, stop_after.map(|n| (0, n)));
        return out.map(|published| published.is_some()).map_err(|e| e.to_string());
    }
    let cfg = TrainConfig::from_toml(&text, &[]).and_then(|c| c.validate()).map_err(|e| e.to_string())?;
    let data = cfg.config().data.load().map_err(|e| e.to_string())?;
    let ranks = if c.ranks == Ranks::Three { 3 } else { 1 };
    let outcomes: Vec<dpgd::Result<_>> = std::thread::scope(|s| {
        let handles: Vec<_> = InProcess::group(ranks)
            .into_iter()
            .map(|mut comm| {
                let (cfg, data) = (&cfg, &data);
                let opts = RunOptions { stop_after, ..Default::default() };
                s.spawn(move || Run::new(cfg, data, dir).ranks(&mut comm).options(opts).train())
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut finished = true;
    for o in outcomes {
        finished &= o.map_err(|e| e.to_string())?.finished;
    }
    Ok(finished)
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The conversions' (ε at δ) of a run whose composition is ρ-zCDP with Gaussian-DP μ where
/// the noise is continuous: by the accounting crate's conversions of μ-GDP or ρ-zCDP.
fn epsilon_of(mu_squared: f64, noise: NoiseSampler, conversion: Conversion, delta: f64) -> f64 {
    match noise {
        NoiseSampler::Gaussian => GaussianDp::new(mu_squared.sqrt()).unwrap().epsilon(delta, conversion).unwrap(),
        NoiseSampler::DiscreteGaussian => Zcdp::new(mu_squared / 2.0).unwrap().epsilon(delta, conversion).unwrap(),
    }
}

/// μ² of the releases `privacy.json` lists: each scheduled count of std s is 1/s-GDP.
fn releases_mu_squared(privacy: &Value) -> f64 {
    privacy["accounting"]["releases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["scheduled"].as_f64().unwrap() / r["sigma"].as_f64().unwrap().powi(2))
        .sum()
}

/// The whole run's Rényi curve of one candidate (or run) as `privacy.json` publishes it, at
/// dp_accounting's orders (or the filter's one order), with `steps_or_budget` in place of its
/// worst-case steps (full-batch GD) or Rényi budget (DP-SGD with individual accounting).
fn run_curve(c: &Combo, privacy: &Value, steps_or_budget: f64) -> Rdp {
    let a = &privacy["accounting"];
    let sigma = a["training"]["sigma"].as_f64().unwrap();
    match c.method {
        Method::Plain | Method::Filtered | Method::BandMfFiltered => {
            let mu2 = steps_or_budget / (sigma * sigma) + releases_mu_squared(privacy);
            let orders = dp_accounting_orders();
            let eps = orders.iter().map(|a| a * mu2 / 2.0).collect();
            Rdp::new(orders, eps).unwrap()
        }
        Method::Sgd => {
            let (q, steps) = (a["sampling"]["rate"].as_f64().unwrap(), a["sampling"]["steps"].as_u64().unwrap());
            let orders = dp_accounting_orders();
            let mut acc = RdpAccountant::new(orders.clone(), Conversion::Cks).unwrap();
            acc.compose(&DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)).repeated(steps)).unwrap();
            Rdp::new(orders, acc.rdp().to_vec()).unwrap()
        }
        Method::SgdFiltered => {
            let order = a["sampling"]["individual"]["order"].as_f64().unwrap();
            Rdp::new(vec![order], vec![steps_or_budget]).unwrap()
        }
        Method::BandMf => {
            let (q, rounds) = band_rounds(a);
            let orders = dp_accounting_orders();
            let mut acc = RdpAccountant::new(orders.clone(), Conversion::Cks).unwrap();
            acc.compose(&DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)).repeated(rounds)).unwrap();
            Rdp::new(orders, acc.rdp().to_vec()).unwrap()
        }
        Method::NonPrivate => unreachable!("a non-private run has no curve"),
    }
}

/// BandMF's rate and rounds from its published T and b: ⌈T/b⌉ rounds of DP-SGD at the
/// partition's rate (Choquette-Choo, Ganesh, Steinke & Thakurta 2023's reduction).
fn band_rounds(accounting: &Value) -> (f64, u64) {
    let s = &accounting["sampling"];
    let (steps, bands) = (s["steps"].as_u64().unwrap(), accounting["correlated"]["bands"].as_u64().unwrap());
    (s["rate"].as_f64().unwrap(), steps.div_ceil(bands))
}

/// (a) for a single run: the headline and each tier, from `privacy.json`'s published numbers.
fn check_run_epsilon(c: &Combo, privacy: &Value, what: &str) {
    if c.method == Method::NonPrivate {
        assert!(privacy["epsilon"].is_null(), "{what}: a non-private run states no epsilon");
        return;
    }
    let a = &privacy["accounting"];
    let delta = privacy["delta"].as_f64().unwrap();
    let sigma = a["training"]["sigma"].as_f64().unwrap();
    let stated = a["epsilon"].as_f64().unwrap();
    let tiers = privacy["personalized"]["tiers"].as_array().cloned().unwrap_or_default();
    let independent = |steps_or_budget: f64| match c.method {
        Method::Plain | Method::Filtered | Method::BandMfFiltered => {
            let mu2 = steps_or_budget / (sigma * sigma) + releases_mu_squared(privacy);
            epsilon_of(mu2, c.noise, c.conversion, delta)
        }
        Method::Sgd => {
            let (q, steps) = (a["sampling"]["rate"].as_f64().unwrap(), a["sampling"]["steps"].as_u64().unwrap());
            let mut acc = RdpAccountant::new(dp_accounting_orders(), c.conversion).unwrap();
            acc.compose(&DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)).repeated(steps)).unwrap();
            acc.epsilon(delta).unwrap()
        }
        Method::SgdFiltered => {
            let order = a["sampling"]["individual"]["order"].as_f64().unwrap();
            Rdp::new(vec![order], vec![steps_or_budget]).unwrap().epsilon(delta, c.conversion).unwrap()
        }
        Method::BandMf => {
            let (q, rounds) = band_rounds(a);
            let mut acc = RdpAccountant::new(dp_accounting_orders(), c.conversion).unwrap();
            acc.compose(&DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)).repeated(rounds)).unwrap();
            acc.epsilon(delta).unwrap()
        }
        Method::NonPrivate => unreachable!(),
    };
    let base = match c.method {
        Method::SgdFiltered => {
            // The filter's budget is at least T full steps' Rényi DP at its order.
            let s = &a["sampling"];
            let (q, steps, order) =
                (s["rate"].as_f64().unwrap(), s["steps"].as_u64().unwrap(), s["individual"]["order"].as_f64().unwrap());
            let mut acc = RdpAccountant::new(vec![order], Conversion::Cks).unwrap();
            acc.compose(&DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)).repeated(steps)).unwrap();
            let budget = s["individual"]["budget"].as_f64().unwrap();
            assert!(budget >= acc.rdp()[0] * (1.0 - 1e-12), "{what}: filter budget {budget} below T steps");
            budget
        }
        _ => a["training"]["worst_case_steps"].as_f64().unwrap(),
    };
    let mut want = independent(base);
    for (j, t) in tiers.iter().enumerate() {
        let of_tier = match c.method {
            Method::SgdFiltered => t["budget"].as_f64().unwrap(),
            _ => t["worst_case_steps"].as_f64().unwrap(),
        };
        let tier = independent(of_tier);
        let guaranteed = t["guaranteed_epsilon"].as_f64().unwrap();
        assert!(guaranteed >= tier * (1.0 - 1e-12), "{what}: tier {j} states {guaranteed} < {tier} recomputed");
        assert!(guaranteed <= t["epsilon"].as_f64().unwrap(), "{what}: tier {j} over its epsilon: {t}");
        want = if j == 0 { tier } else { want.max(tier) };
    }
    if c.method == Method::SgdFiltered {
        // No example is charged more than max_steps full steps, whatever its tier.
        let s = &a["sampling"];
        let (q, order) = (s["rate"].as_f64().unwrap(), s["individual"]["order"].as_f64().unwrap());
        let mut acc = RdpAccountant::new(vec![order], Conversion::Cks).unwrap();
        let max_steps = a["training"]["max_steps"].as_u64().unwrap();
        acc.compose(&DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)).repeated(max_steps)).unwrap();
        want = want.min(independent(acc.rdp()[0]));
    }
    assert!(stated >= want * (1.0 - 1e-12), "{what}: privacy.json states {stated} < {want} recomputed");
    assert!(stated <= want * 1.01 + 1e-9, "{what}: privacy.json states {stated}, far above {want}");
}

/// [PS22, Thm 2] by hand for one candidate's curve `run` (the score's λρ_v beside it), at δ
/// less the published share that covers K's sampling.
fn theorem_2(search: &Value, run: &Rdp, sampling_delta: f64) -> f64 {
    let g = &search["guarantee"];
    let r: Repetitions = serde_json::from_value(g["repetitions"].clone()).unwrap();
    let Repetitions::TruncatedNegativeBinomial { eta, gamma } = r else { panic!("negative binomial") };
    let rho = g["score_rho"].as_f64().unwrap();
    let orders = run.orders().to_vec();
    let one: Vec<f64> = orders.iter().zip(run.epsilons()).map(|(&a, &e)| e.max(a * rho)).collect();
    let mean = eta * (1.0 - gamma) / (gamma * (1.0 - gamma.powf(eta)));
    let cost = orders
        .iter()
        .zip(&one)
        .map(|(&l, &e)| (1.0 + eta) * (1.0 - 1.0 / l) * e + (1.0 + eta) * (1.0 / gamma).ln() / l)
        .fold((1.0 + eta) * (1.0 / gamma).ln(), f64::min);
    let eps: Vec<f64> = orders.iter().zip(&one).map(|(&l, &e)| e + cost + mean.ln() / (l - 1.0)).collect();
    let delta = g["delta"].as_f64().unwrap() - sampling_delta;
    Rdp::new(orders, eps).unwrap().epsilon(delta, Conversion::Cks).unwrap()
}

/// (a) for a search: its headline and each tier's, by hand from the chosen candidate's published
/// numbers (every grid point here differs in its learning rate only, so shares its accounting):
/// each tier's examples within the ε they asked for, whatever `search.json` says of them.
fn check_search_epsilon(c: &Combo, search: &Value, candidate: &Value, what: &str) {
    let g = &search["guarantee"];
    let stated = g["epsilon"].as_f64().unwrap();
    let a = &candidate["accounting"];
    let base = match c.method {
        Method::SgdFiltered => a["sampling"]["individual"]["budget"].as_f64().unwrap(),
        _ => a["training"]["worst_case_steps"].as_f64().unwrap(),
    };
    let tiers = g["tiers"].as_array().cloned().unwrap_or_default();
    let published = candidate["personalized"]["tiers"].as_array().cloned().unwrap_or_default();
    assert_eq!(published.len(), if c.budgets == Budgets::None { 0 } else { TIERS.len() }, "{what}");
    let sampling = |t: Option<&Value>| t.and_then(|t| t["sampling_delta"].as_f64()).unwrap_or(0.0);
    let mut want = theorem_2(search, &run_curve(c, candidate, base), sampling(Some(g)));
    for (j, p) in published.iter().enumerate() {
        let of_tier = match c.method {
            Method::SgdFiltered => p["budget"].as_f64().unwrap(),
            _ => p["worst_case_steps"].as_f64().unwrap(),
        };
        let hand = theorem_2(search, &run_curve(c, candidate, of_tier), sampling(tiers.get(j)));
        assert!(hand <= TIERS[j], "{what}: the tier that asked for {} is ({hand}, delta)-DP by hand", TIERS[j]);
        let t = &tiers[j];
        assert_eq!(t["candidate_epsilon"], p["epsilon"], "{what}: tier {j}'s candidate epsilon");
        let guaranteed = t["guaranteed_epsilon"].as_f64().unwrap();
        assert!(guaranteed >= hand * (1.0 - 1e-9), "{what}: tier {j} states {guaranteed} < {hand} by hand");
        assert!(guaranteed <= TIERS[j], "{what}: tier {j} over its epsilon");
        want = if j == 0 { hand } else { want.max(hand) };
    }
    assert!(stated >= want * (1.0 - 1e-9), "{what}: search.json states {stated} < {want} by hand");
    if published.is_empty() {
        assert!(stated <= EPSILON, "{what}: {stated} over the target");
    }
}

/// (b): whether `c` is private, and the words each reason it is not must contain.
fn expected_reasons(c: &Combo) -> Vec<&'static str> {
    let mut why = Vec::new();
    if c.method == Method::NonPrivate {
        why.push("non-private");
    }
    if c.seed == Seed::Fixed {
        why.push("train.seed");
    }
    if c.counts == ActiveRelease::ExactNonPrivate {
        why.push("exact-non-private");
    }
    why
}

fn check_private(c: &Combo, private: &Value, reasons: &Value, what: &str) {
    let want = expected_reasons(c);
    assert_eq!(private.as_bool(), Some(want.is_empty()), "{what}: private = {private}, reasons {reasons}");
    let listed: Vec<&str> = reasons.as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    for w in want {
        assert!(listed.iter().any(|r| r.contains(w)), "{what}: no reason names {w}: {listed:?}");
    }
}

/// (c): every example of the run in `folder` spent at most its own tier's budget, its tier read
/// from its original row (the `id` feature of the data the run trained on).
fn check_budgets(c: &Combo, folder: &RunFolder, privacy: &Value, what: &str) {
    let Some(budget) = privacy["ledger"]["budget_per_example"].as_f64() else { return };
    let cfg = TrainConfig::from_file(&folder.config(), &[]).unwrap().validate().unwrap();
    let trained = cfg.config().data.load().unwrap();
    // The model's size, as the state records it (the state is read against it).
    let params = dpgd::train::state::peek_meta(&folder.state()).unwrap().identity.params;
    let all = dpgd::train::budget::spent(folder, params, cfg.max_steps()).unwrap().spent;
    // An audit's input canaries follow the examples: each within its tier's (dealt in turn).
    let inputs = if c.audit == Audit::Inputs { 60 } else { 0 };
    assert_eq!(all.len(), trained.train.len() + inputs, "{what}: one ledger entry per training row");
    let (spent, canaries) = all.split_at(trained.train.len());
    let tiers = privacy["personalized"]["tiers"].as_array().cloned().unwrap_or_default();
    let tier_budget =
        |eps: f64| tiers.iter().find(|t| t["epsilon"].as_f64() == Some(eps)).map(|t| t["budget"].as_f64().unwrap());
    for (j, s) in canaries.iter().enumerate() {
        let own = tiers.get(j % tiers.len().max(1)).map_or(budget, |t| t["budget"].as_f64().unwrap());
        assert!(*s <= own * (1.0 + 1e-12), "{what}: input canary {j} spent {s} of its {own}");
    }
    let px = trained.train.pixels();
    let mut held = 0;
    for (i, s) in spent.iter().enumerate() {
        let row = trained.train.features[i * px] as usize;
        let own = match c.budgets {
            Budgets::None => budget,
            // A random assignment: at most the looser tier's (its draw is not the test's).
            Budgets::Shares => tiers.iter().map(|t| t["budget"].as_f64().unwrap()).fold(0.0, f64::max),
            Budgets::File | Budgets::Column => {
                let asked = tier_of_row(row);
                // In a search, the published tiers are the candidate's (calibrated) ones: the
                // strict tier is the first, in the order of the asked ε.
                let j = TIERS.iter().position(|&t| t == asked).unwrap();
                tier_budget(asked).unwrap_or_else(|| tiers[j]["budget"].as_f64().unwrap())
            }
        };
        assert!(*s <= own * (1.0 + 1e-12), "{what}: example {i} (row {row}) spent {s} of its {own}");
        held += usize::from(row >= ROWS);
    }
    assert_eq!(held, 0, "{what}: rows read back out of range");
    if matches!(c.budgets, Budgets::File | Budgets::Column) {
        // The owner's report counts each tier's own rows.
        let strict = (0..spent.len()).filter(|&i| tier_of_row(trained.train.features[i * px] as usize) == TIERS[0]);
        let report = dpgd::train::budget::report(folder, &cfg, params).unwrap();
        let counts: Vec<usize> = report.tiers.iter().map(|t| t.examples).collect();
        let strict = strict.count();
        assert_eq!(counts, [strict, spent.len() - strict], "{what}: the budget report's tiers");
    }
}

/// (d): `publishable/` holds only the files a run (or a search) publishes, and none of the keys
/// the confidential files hold.
fn check_publishable(dir: &Path, what: &str) {
    const FILES: [&str; 12] = [
        "README.txt",
        "config.toml",
        "privacy.json",
        "result.json",
        "metrics.csv",
        "metrics.jsonl",
        "accuracy.png",
        "model.bpk",
        "model.safetensors",
        "model.json",
        "search.json",
        "candidate-privacy.json",
    ];
    const CONFIDENTIAL: [&str; 10] = [
        "\"included\"",
        "\"loss",
        "\"seconds",
        "\"wall",
        "\"exhausted",
        "\"spent",
        "\"draws\"",
        "\"scores\"",
        "\"skipped",
        "\"active\"",
    ];
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(FILES.contains(&name.as_str()), "{what}: publishable/{name} is not a publishable file");
        if name.ends_with(".json") || name.ends_with(".jsonl") {
            let text = std::fs::read_to_string(&path).unwrap();
            for key in CONFIDENTIAL {
                assert!(!text.contains(key), "{what}: publishable/{name} holds {key}");
            }
        }
    }
}

/// Checks (a)–(d) on a finished run or search in `dir`.
fn check(c: &Combo, dir: &Path, what: &str) {
    if c.search == Search::Private {
        let out = dir.join("out");
        let search = read(&out.join("publishable/search.json"));
        check_private(c, &search["private"], &search["not_private_because"], what);
        let candidate = read(&out.join("publishable/candidate-privacy.json"));
        check_search_epsilon(c, &search, &candidate, what);
        let result = read(&out.join("publishable/result.json"));
        assert_eq!(result["epsilon_of_configuration"], search["guarantee"]["epsilon"], "{what}: result.json");
        check_publishable(&out.join("publishable"), what);
        for e in std::fs::read_dir(out.join("confidential/candidates")).unwrap() {
            let folder = RunFolder::candidate(e.unwrap().path());
            assert!(
                !folder.root().join("publishable").exists(),
                "{what}: a candidate's folder names a publishable half"
            );
            check_budgets(c, &folder, &read(&folder.privacy()), what);
            check_audit(c, &folder, what);
        }
        // The search as a whole: its released candidate's canaries against the search's ε.
        let audits = [
            (dpgd::sweep::search::search_audit_path(&out), matches!(c.audit, Audit::Canaries | Audit::Norms)),
            (dpgd::sweep::search::search_input_audit_path(&out), c.audit == Audit::Inputs),
        ];
        for (audit, audited) in audits {
            assert_eq!(audit.exists(), audited && search["chosen"].is_object(), "{what}: {}", audit.display());
            if audit.exists() {
                let audit = read(&audit);
                assert_eq!(audit["consistent"], true, "{what}: the search's audit: {}", audit["groups"]);
            }
        }
        return;
    }
    let folder = RunFolder::new(dir);
    let privacy = read(&folder.privacy());
    check_private(c, &privacy["private"], &privacy["not_private_because"], what);
    check_run_epsilon(c, &privacy, what);
    let result = read(&folder.result());
    assert_eq!(result["epsilon"], privacy["epsilon"], "{what}: result.json's epsilon");
    check_budgets(c, &folder, &privacy, what);
    check_audit(c, &folder, what);
    check_publishable(&folder.publishable(), what);
}

/// A run with `[audit]` audited itself: every tier's bound at most its claim, in the
/// confidential half.
fn check_audit(c: &Combo, folder: &RunFolder, what: &str) {
    let gradients = matches!(c.audit, Audit::Canaries | Audit::Norms);
    assert_eq!(folder.audit().exists(), gradients, "{what}: confidential/audit.json");
    assert_eq!(folder.input_audit().exists(), c.audit == Audit::Inputs, "{what}: confidential/audit-inputs.json");
    if c.audit == Audit::Inputs {
        let report = read(&folder.input_audit());
        let tiers = if c.budgets == Budgets::None { 1 } else { TIERS.len() };
        assert_eq!(report["groups"].as_array().map(Vec::len), Some(tiers), "{what}: one input audit per tier");
        assert_eq!(report["consistent"], true, "{what}: the run's input audit: {}", report["groups"]);
    }
    if gradients {
        let report = read(&folder.audit());
        let tiers = if c.budgets == Budgets::None { 1 } else { TIERS.len() };
        let norms = if c.audit == Audit::Norms { 2 } else { 1 };
        let groups = report["groups"].as_array().map(Vec::len);
        assert_eq!(groups, Some(tiers * norms), "{what}: one audit per tier and gradient norm");
        // Gradients of C/4 spend a sixteenth of a full step's: their claim is below their tier's.
        if let (Audit::Norms, Some(groups)) = (c.audit, report["groups"].as_array()) {
            for pair in groups.chunks(2) {
                let claim = |g: &serde_json::Value| g["claimed_epsilon"].as_f64().unwrap();
                assert!(claim(&pair[1]) < claim(&pair[0]), "{what}: C/4 canaries' claim: {pair:?}");
            }
        }
        assert_eq!(report["consistent"], true, "{what}: the run's own audit: {}", report["groups"]);
    }
}

/// Every combination of the covering array runs (or the test names the pair to refuse), and
/// (a)–(d) hold; every pair of values that can meet is in one of them.
#[test]
fn every_pair_of_options_composes_and_is_accounted() {
    let rows = covering_array();
    assert!(rows.len() < 60, "{} combinations", rows.len());
    for (i, c) in rows.iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let what = format!("combination {i} {c:?}");
        if let Err(e) = attempt(c, dir.path()) {
            panic!("{what} is refused though no refusal is listed for it: {e}");
        }
        check(c, dir.path(), &what);
        check_resumed_is_uninterrupted(c, dir.path(), &what);
        audit_mechanism(c, &what);
    }
}

/// A run with a fixed seed, interrupted and resumed, publishes what the uninterrupted run
/// publishes, byte for byte: the model, every ε, count and accuracy, the audit.
fn check_resumed_is_uninterrupted(c: &Combo, dir: &Path, what: &str) {
    if c.resume != Resume::Interrupted || c.seed != Seed::Fixed || c.search == Search::Private {
        return;
    }
    let straight = tempfile::tempdir().unwrap();
    attempt(&Combo { resume: Resume::None, ..*c }, straight.path()).unwrap();
    let files = |d: &Path| -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<_> = std::fs::read_dir(d.join("publishable"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| ["json", "jsonl", "csv", "safetensors"].iter().any(|e| x == *e)))
            .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
            .collect();
        out.sort();
        out
    };
    let (resumed, want) = (files(dir), files(straight.path()));
    assert_eq!(
        resumed.iter().map(|f| &f.0).collect::<Vec<_>>(),
        want.iter().map(|f| &f.0).collect::<Vec<_>>(),
        "{what}: the resumed run published other files"
    );
    for ((name, a), (_, b)) in resumed.iter().zip(&want) {
        assert!(a == b, "{what}: publishable/{name} differs from the uninterrupted run's");
    }
}

/// (e): the one-run audit of the combination's training mechanism stays within every claim.
fn audit_mechanism(c: &Combo, what: &str) {
    if c.search == Search::Private || c.method == Method::NonPrivate {
        return;
    }
    let cfg = TrainConfig::from_toml(&c.config(data()), &[]).unwrap().validate().unwrap();
    let mut settings = OneRunSettings::default();
    (settings.canaries, settings.confidence) = (1000, 1.0 - 0.001 / 60.0);
    let report = audit_one_run(&cfg, &settings).unwrap();
    for g in &report.groups {
        assert!(
            g.consistent,
            "{what}: the one-run audit bounds {} at {} > {}",
            g.group, g.bound.epsilon_lower, g.claimed_epsilon
        );
    }
}

/// Every pair that may not meet is refused, and the refusal names both options.
#[test]
fn every_refused_pair_is_refused_naming_both_options() {
    let lv = levels();
    let mut seen = 0;
    for f in 0..FACTORS {
        for g in f + 1..FACTORS {
            for a in 0..lv[f] {
                for b in 0..lv[g] {
                    let mut v = DEFAULT;
                    (v[f], v[g]) = (a, b);
                    let c = Combo::of(v);
                    let Some((r, (p, q))) = refused(&c) else { continue };
                    if (p, q) != (f, g) {
                        continue;
                    }
                    seen += 1;
                    let dir = tempfile::tempdir().unwrap();
                    let e = match attempt(&c, dir.path()) {
                        Ok(()) => panic!("{c:?} runs, though {}", r.why),
                        Err(e) => e,
                    };
                    for factor in [p, q] {
                        assert!(
                            NAMES[factor].iter().any(|n| e.contains(n)),
                            "{c:?} ({}): the refusal does not name {:?}: {e}",
                            r.why,
                            NAMES[factor]
                        );
                    }
                }
            }
        }
    }
    assert!(seen >= REFUSED.len(), "{seen} refused pairs tried");
}

/// Every value of every option runs in some combination.
#[test]
fn the_matrix_covers_every_value_of_every_option() {
    let rows = covering_array();
    for (f, &n) in levels().iter().enumerate() {
        for v in 0..n {
            assert!(rows.iter().any(|c| c.v[f] == v), "factor {f} value {v} never runs");
        }
    }
    // Refused pairs never run.
    assert!(rows.iter().all(|c| refused(c).is_none()));
}
