//! The accounting of DP-SGD (plain, or with individual accounting): the Rényi DP of the
//! Poisson-subsampled Gaussian (Mironov, Talwar & Zhang 2019) composed over the steps
//! ([`SgdAccounting`]), or, with individual accounting, each example's Rényi filter at one order
//! (Feldman & Zrnic 2021). A DP-SGD run releases only its model.

use std::collections::BTreeMap;

use super::Selection;
use super::{RunAccounting, Target};
use crate::accounting::Rdp;
use crate::accounting::event::DpEvent;
use crate::accounting::individual_sgd::IndividualSgd;
use crate::accounting::{Conversion, Neighbours};
use crate::error::{Error, Result};
use crate::noise::{NoiseSampler, NoiseSeed, Stream};
use crate::train::config::{ActiveRelease, Resolved, TrainConfig, field, typed_down};
use crate::train::privacy::{Accounting, IndividualReport, RunSession, SamplingReport, TrainingReport};
use crate::train::releases::ScheduledRelease;
use crate::train::sgd::{SgdAccounting, expected_batch, poisson_sample};
use crate::train::tiers::Tier;

/// σ and the accounting of DP-SGD for `config` (with `individual` accounting or without),
/// after refusing what it does not account for.
///
/// # Errors
/// A missing or invalid sampling rate, neighbours other than zero-out, discrete noise, the
/// exact GDP conversion, noisy counts, or an invalid ε or σ (each named).
pub fn calibrate(config: &TrainConfig, releases: &[ScheduledRelease], individual: bool) -> Result<SgdAccounting> {
    let p = &config.privacy;
    let mut sgd = calibrate_rounds(config, releases, p.worst_case_steps, individual)?;
    if individual {
        sgd = sgd.with_individual_accounting(typed_down(p.delta)).map_err(|e| field("privacy.sigma", e))?;
    }
    if let Some(b) = &p.budgets {
        sgd = sgd.with_tiers(&b.targets(), typed_down(p.delta)).map_err(|e| {
            Error::config(
                "privacy.budgets.epsilons",
                format!(
                    "a tier is below what the filter's Renyi order and delta cost with no budget at all ({e}): raise \
                     it, or lower privacy.epsilon so that the order suits stricter budgets"
                ),
            )
        })?;
    }
    Ok(sgd)
}

/// σ and the accounting of `rounds` rounds of the Poisson-subsampled Gaussian at the config's
/// rate (DP-SGD's steps, or BandMF's rounds), after refusing what it does not account for.
///
/// # Errors
/// As [`calibrate`], without its individual accounting and tiers.
pub fn calibrate_rounds(
    config: &TrainConfig,
    releases: &[ScheduledRelease],
    rounds: usize,
    individual: bool,
) -> Result<SgdAccounting> {
    let p = &config.privacy;
    let Some(q) = p.sample_rate else {
        return Err(Error::config(
            "privacy.sample_rate",
            "method = \"sgd\" needs the Poisson sampling rate, e.g. sample_rate = 0.004 (240 of 60,000 \
             examples per step on average)",
        ));
    };
    if !(q > 0.0 && q <= 1.0) {
        return Err(Error::config("privacy.sample_rate", format!("{q} must be in (0, 1]")));
    }
    let refuse = |f: &str, why: &str| Err(Error::config(f, why.to_string()));
    if p.neighbours != Neighbours::ZeroOut {
        return refuse(
            "privacy.neighbours",
            "DP-SGD is accounted under zero-out neighbours (the add-or-remove-one analysis of Poisson sampling, \
             with n public); remove neighbours",
        );
    }
    let name = p.method.name();
    if p.noise != NoiseSampler::Gaussian {
        return refuse(
            "privacy.noise",
            &format!(
                "the subsampled discrete Gaussian has no accountant here; use noise = \"gaussian\" with method = \
                 \"{name}\""
            ),
        );
    }
    if p.conversion == Conversion::GaussianExact {
        return refuse(
            "privacy.conversion",
            &format!(
                "DP-SGD is accounted in Renyi DP, which has no exact GDP curve: use conversion = \"cks\" (the \
                 default for {name}) or \"bun-steinke\""
            ),
        );
    }
    if !releases.is_empty() || config.release.active_count != ActiveRelease::None {
        return refuse(
            "release.active_count",
            "a DP-SGD run releases only its model: remove the noisy active count (every example stays active)",
        );
    }
    let sigma = match Target::of(p)? {
        Target::Sigma(s) => s,
        Target::Epsilon { epsilon, delta } => {
            SgdAccounting::calibrate(q, rounds, (epsilon, delta), p.conversion, individual)
                .map_err(|e| field("privacy.epsilon", e))?
        }
    };
    SgdAccounting::new(q, sigma, rounds, p.conversion).map_err(|e| field("privacy.sigma", e))
}

impl RunAccounting for SgdAccounting {
    fn sigma(&self) -> f64 {
        SgdAccounting::sigma(self)
    }
    fn epsilon(&self, cfg: &Resolved) -> Option<f64> {
        RunAccounting::epsilon_through(self, cfg, cfg.max_steps())
    }
    fn epsilon_through(&self, cfg: &Resolved, step: usize) -> Option<f64> {
        SgdAccounting::epsilon_through(self, step, cfg.delta()).ok().map(|(e, _)| e)
    }
    /// With individual accounting none: the guarantee is the filter's at one order.
    fn event(&self) -> Option<DpEvent> {
        self.individual().is_none().then(|| SgdAccounting::event(self))
    }
    /// With individual accounting, the filter's budget at its one order — the budget
    /// `privacy.epsilon` calibrates (with personalized budgets each tier's is
    /// [`tier_rdp`](RunAccounting::tier_rdp)): what an example's Rényi filter keeps it within
    /// ([FZ21, Thm 4.5]).
    fn rdp(&self) -> Option<Rdp> {
        match self.individual() {
            Some(i) => Rdp::new(vec![f64::from(i.order())], vec![i.budget()]).ok(),
            None => super::rdp_of(&SgdAccounting::event(self)),
        }
    }
    fn ledger_budget(&self) -> Option<f64> {
        self.individual().map(|i| i.budget())
    }
    fn tiers(&self) -> &[Tier] {
        SgdAccounting::tiers(self)
    }
    /// The tier's budget at the filter's one order.
    fn tier_rdp(&self, tier: usize) -> Option<Rdp> {
        let (i, t) = (self.individual()?, SgdAccounting::tiers(self).get(tier)?);
        Rdp::new(vec![f64::from(i.order())], vec![t.budget]).ok()
    }
    fn ledger_unit(&self) -> String {
        match self.individual() {
            Some(i) => format!("Renyi DP at order {} of each step for the example's clipped gradient", i.order()),
            None => "none: DP-SGD without individual accounting keeps no per-example ledger".into(),
        }
    }
    fn sample_rate(&self) -> Option<f64> {
        Some(SgdAccounting::sample_rate(self))
    }
    /// Each example independently, from the step's own stream; divided by the expected batch.
    fn sample(&self, step: usize, n: usize, seed: NoiseSeed) -> Result<(Option<Vec<bool>>, f64)> {
        let q = SgdAccounting::sample_rate(self);
        let mut rng = seed.rng(Stream::sample(step))?;
        Ok((Some(poisson_sample(n, q, &mut rng)), expected_batch(q, n)))
    }
    fn selection<'s>(&'s self, sample: Option<&'s [bool]>) -> Selection<'s> {
        match (sample, self.individual()) {
            (None, _) => Selection::All,
            (Some(m), None) => Selection::Sample(m),
            (Some(m), Some(individual)) => Selection::ChargedSample(m, individual),
        }
    }
    fn via(&self, conversion: Conversion) -> String {
        format!("Renyi DP of the subsampled Gaussian and {conversion}")
    }
    fn neighbours(&self, cfg: &Resolved) -> String {
        neighbours(cfg)
    }
    fn report(
        &self,
        cfg: &Resolved,
        _session: Option<&RunSession>,
        examples: usize,
        _steps_run: usize,
    ) -> Result<Option<Accounting>> {
        report(cfg, self, examples).map(Some)
    }
}

/// The ε at `delta` of `rounds` rounds of the Poisson-subsampled Gaussian at rate `q` and
/// multiplier `sigma`, converted by `conversion` (`None` where it does not apply).
pub(super) fn rounds_epsilon(q: f64, sigma: f64, rounds: usize, delta: f64, conversion: Conversion) -> Option<f64> {
    SgdAccounting::new(q, sigma, rounds, conversion).and_then(|a| a.epsilon_through(rounds, delta)).ok().map(|e| e.0)
}

/// The neighbouring relation of a Poisson-sampled run, as its guarantee states it.
pub(super) fn neighbours(cfg: &Resolved) -> String {
    format!("{} (for Poisson sampling, the add-or-remove-one analysis)", cfg.config().privacy.neighbours)
}

/// The DP-SGD part of `privacy.json` for a run on `examples` training examples.
fn report(cfg: &Resolved, sgd: &SgdAccounting, examples: usize) -> Result<Accounting> {
    let p = &cfg.config().privacy;
    let (steps, max_steps) = (cfg.worst_case_steps(), cfg.max_steps());
    let (q, sigma) = (sgd.sample_rate(), sgd.sigma());
    let (epsilon, order) = sgd.epsilon_through(max_steps, cfg.delta())?;
    let individual = sgd.individual();
    let by_conversion = Conversion::ALL
        .into_iter()
        .map(|m| {
            // With individual accounting, the one (α, B) guarantee the ledger enforces, converted.
            let eps = match individual {
                Some(i) => i.epsilon_by(cfg.delta(), m).ok(),
                None => rounds_epsilon(q, sigma, steps, cfg.delta(), m),
            };
            (m.name().to_string(), eps)
        })
        .collect();
    let rests_on = rests_on(cfg, individual);
    Ok(Accounting {
        event: RunAccounting::event(sgd),
        epsilon: Some(epsilon),
        epsilon_by_conversion: by_conversion,
        target_epsilon: p.epsilon,
        rho: None,
        mu: None,
        guarantee: guarantee(cfg, individual, q),
        rests_on,
        training: TrainingReport {
            sigma,
            clip: p.clip,
            noise_std: sigma * p.clip,
            b_norm: None,
            worst_case_steps: steps,
            max_steps,
            rho: None,
            epsilon_of_first_k_steps_alone: Some(sgd.epsilon_through(steps, cfg.delta())?.0),
        },
        sampling: Some(sampling_report(individual, (q, expected_batch(q, examples)), steps, order)),
        releases: Vec::new(),
        session: None,
        correlated: None,
    })
}

/// What each number of DP-SGD's `privacy.json` rests on.
fn rests_on(cfg: &Resolved, individual: Option<&IndividualSgd>) -> BTreeMap<String, String> {
    let p = &cfg.config().privacy;
    let steps = cfg.worst_case_steps();
    let mut rests_on = BTreeMap::new();
    rests_on.insert(
        "sensitivity".into(),
        "C per step in the arithmetic the computer does: each sampled example's clipped row is rounded onto an \
         integer grid and summed exactly, so a neighbour moves the sum by exactly its own rounded row, of norm at \
         most C — given that the engine computes an example's gradient from that example and theta alone at its \
         fixed micro-batch size, whatever its companions and position (checked before training, on this run's \
         engine, device and kernels at its micro-batch size, on public synthetic examples: a check on inputs, not a \
         proof; dpgd::per_example::check_rows_are_own); under zero-out neighbours, n public"
            .to_string(),
    );
    rests_on.insert(
        "epsilon".into(),
        match individual {
            None => format!(
                "the Renyi DP of the Poisson-subsampled Gaussian (Mironov, Talwar & Zhang 2019: exact at integer \
                 orders, a series with its remainder bounded at fractional ones), times {steps} steps (Mironov 2017, \
                 Prop. 1), through the {} conversion, minimised over the orders; every value rounded up",
                p.conversion
            ),
            Some(i) => format!(
                "the individual Renyi filter (Feldman & Zrnic 2021, Alg. 2 and Thm 4.5, on their Renyi filter, Thm 3.1) \
                 at order {order}, fixed before training as the integer order that minimises plain DP-SGD's epsilon \
                 for {steps} steps: each example's charges — the Renyi DP at that order of the Poisson-subsampled \
                 Gaussian with its own clipped norm as sensitivity (Mironov, Talwar & Zhang 2019; individual losses \
                 as in Yu et al. 2023 and Koskela, Tobaben & Honkela 2023) — never exceed {} ({steps} full steps), so \
                 every example is ({order}, {})-RDP, converted by {}; every value rounded up",
                i.budget(),
                i.budget(),
                p.conversion,
                order = i.order()
            ),
        },
    );
    rests_on.insert(
        "sampling".into(),
        "each example is included with probability floor(q 2^64)/2^64 <= q, independently, from the run's \
         ChaCha20 stream; the subsampled Gaussian's Renyi divergence is nondecreasing in the rate, so accounting \
         at q covers it. The realised batch sizes are not covered (nor the step times that track them, or, with \
         individual accounting, the number of examples still active): they stay confidential"
            .into(),
    );
    rests_on
}

/// DP-SGD's guarantee in one paragraph, at sampling rate `q`.
fn guarantee(cfg: &Resolved, individual: Option<&IndividualSgd>, q: f64) -> String {
    let p = &cfg.config().privacy;
    let (steps, max_steps) = (cfg.worst_case_steps(), cfg.max_steps());
    match individual {
        None => format!(
            "the run's {steps} steps are DP-SGD (Abadi et al. 2016): each includes every example independently \
             with probability {q} (Poisson sampling), clips each included gradient to C and adds N(0, sigma^2 C^2) \
             to their sum once, divided by the expected batch size q n. Under zero-out neighbours (n public) the \
             null example changes nothing whether sampled or not, so the pair of outputs is the add-or-remove-one \
             pair of Mironov, Talwar & Zhang 2019, whose Renyi DP is composed over the steps and converted to \
             (epsilon, delta) by {}, minimised over dp_accounting's default orders: an upper bound on the \
             pair's epsilon, not always the figure Opacus or dp_accounting print for the same q, sigma and steps \
             (dpgd bounds fractional orders more tightly, so its figure can be lower)",
            p.conversion
        ),
        Some(i) => format!(
            "the run's up to {max_steps} steps are DP-SGD (Abadi et al. 2016) with individual accounting: each \
             includes every example independently with probability {q} (Poisson sampling) and adds N(0, sigma^2 \
             C^2) once to the sum of the included examples' gradients, each clipped to at most C, divided by the \
             expected batch size q n. Every step also charges every active example, sampled or not, the Renyi DP \
             at order {} of that step for its own clipped norm, and caps or drops it so that its charges never \
             exceed what {steps} full steps cost: by the individual Renyi filter (Feldman & Zrnic 2021) every \
             example is then as private as in {steps} steps of plain DP-SGD at that order, under zero-out \
             neighbours (n public; the add-or-remove-one pair of Mironov, Talwar & Zhang 2019), converted to \
             (epsilon, delta) by {}",
            i.order(),
            p.conversion
        ),
    }
}

/// How DP-SGD samples and where its ε is attained: `(q, q·n)`, T and the order.
fn sampling_report(
    individual: Option<&IndividualSgd>,
    (q, expected_batch_size): (f64, f64),
    steps: usize,
    order: f64,
) -> SamplingReport {
    SamplingReport {
        rate: q,
        expected_batch_size,
        steps,
        rdp_order: order,
        orders: if individual.is_some() {
            "the integers 2 to 256 (the filter's order is one of them, chosen before training)".into()
        } else {
            "dp_accounting's default orders: 1.1 to 10.9 by 0.1, 11 to 63, 128, 256, 512, 1024".into()
        },
        how: "Poisson: each example independently, from the run's CSPRNG on a stream of its own per step".into(),
        individual: individual.map(|i| IndividualReport {
            order: i.order(),
            budget: i.budget(),
            charge: "every step, every active example, sampled or not: the step's Renyi DP at the order for \
                     sensitivity min(its gradient norm, C); where that does not fit what is left, its gradient \
                     is clipped to the largest norm whose charge fits, and it is dropped once nothing is left"
                .into(),
        }),
    }
}
