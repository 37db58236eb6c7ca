//! Composition as data: what a training run did, as [`DpEvent`]s, handed to an
//! [`Accountant`] that turns them into a privacy loss (after dp_accounting's `DpEvent` and
//! `PrivacyAccountant`).
//!
//! An accountant says whether it supports an event *before* it changes any state
//! ([`Accountant::check`]); [`Accountant::compose`] refuses an unsupported event whole. Every
//! accountant passes one contract test (`tests/accountant_contract.rs`).
//!
//! | accountant | supports | loss |
//! |---|---|---|
//! | [`RdpAccountant`] | Gaussian, Poisson-sampled Gaussian, compositions | RDP at chosen orders ([Mir17]; [MTZ19]), then `cks` or the classic conversion |
//! | [`PldAccountant`] | Gaussian, Poisson-sampled Gaussian, compositions | the privacy loss distribution on a grid, composed by FFT ([KJPH21]; [`crate::pld`]), with an error bound |
//! | [`GdpAccountant`] | Gaussian, compositions (no subsampling) | μ-GDP ([DRS19]): full-batch private GD's accountant |
//! | [`ZcdpAccountant`] | Gaussian, compositions (no subsampling: zCDP does not capture its amplification) | ρ-zCDP ([BS16]) |
//!
//! ```
//! use dpgd_accounting::event::{Accountant, DpEvent, RdpAccountant};
//! use dpgd_accounting::subsampled::opacus_orders;
//! use dpgd_accounting::Conversion;
//!
//! // Opacus's MNIST example: Poisson rate 240/60000, σ = 1.3, 15 epochs = 3750 steps.
//! let step = DpEvent::poisson_sampled(0.004, DpEvent::gaussian(1.3));
//! let mut rdp = RdpAccountant::new(opacus_orders(), Conversion::Cks).unwrap();
//! rdp.compose(&step.repeated(3750)).unwrap();
//! let (eps, alpha) = rdp.epsilon_and_order(1e-5).unwrap();
//! assert!(eps > 0.9 && eps < 0.95, "{eps}"); // Opacus 1.6 reports 0.92
//! assert!(alpha > 1.0);
//! ```
//!
//! [Mir17]: https://arxiv.org/abs/1702.07476
//! [MTZ19]: https://arxiv.org/abs/1908.10530
//! [BS16]: https://arxiv.org/abs/1605.02065
//! [KJPH21]: https://arxiv.org/abs/2006.07134
//! [DRS19]: https://arxiv.org/abs/1905.02383

use serde::{Deserialize, Serialize};

use crate::convert::{Conversion, ToApproxDp};
use crate::error::{AccountingError, Result, positive, probability};
use crate::measure::{GaussianDp, Rdp, Zcdp};
use crate::numeric::{add_up, div_up, mul_down, mul_up, sqrt_up, u64_up};
use crate::pld::{Direction, Pld, Rounding};
use crate::subsampled;

/// One mechanism, or a composition of mechanisms, as data. Sensitivities are normalised to 1:
/// a Gaussian event's noise multiplier is its noise std over the sensitivity of what it
/// perturbs, under the neighbouring relation the accountant states.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DpEvent {
    /// The Gaussian mechanism, noise std `noise_multiplier` × the sensitivity.
    Gaussian {
        /// σ, finite and > 0.
        noise_multiplier: f64,
    },
    /// `event` run on a Poisson sample of the data: each record included independently with
    /// probability `sampling_probability`.
    PoissonSampled {
        /// q ∈ [0, 1].
        sampling_probability: f64,
        /// What runs on the sample.
        event: Box<DpEvent>,
    },
    /// `event` run `count` times, each run chosen adaptively.
    SelfComposed {
        /// What is repeated.
        event: Box<DpEvent>,
        /// How often.
        count: u64,
    },
    /// The events in order, each chosen adaptively.
    Composed {
        /// The events.
        events: Vec<DpEvent>,
    },
}

impl DpEvent {
    /// The Gaussian mechanism with noise multiplier `sigma`.
    #[must_use]
    pub fn gaussian(sigma: f64) -> Self {
        DpEvent::Gaussian { noise_multiplier: sigma }
    }
    /// `event` on a Poisson sample of rate `q`.
    #[must_use]
    pub fn poisson_sampled(q: f64, event: DpEvent) -> Self {
        DpEvent::PoissonSampled { sampling_probability: q, event: Box::new(event) }
    }
    /// This event `count` times.
    #[must_use]
    pub fn repeated(self, count: u64) -> Self {
        DpEvent::SelfComposed { event: Box::new(self), count }
    }
    /// This event with every Gaussian noise multiplier multiplied by `factor` (the sampling and
    /// counts unchanged): the family of claims an audit tests ([`crate::audit::fdp`]).
    #[must_use]
    pub fn with_noise_scaled(&self, factor: f64) -> Self {
        match self {
            DpEvent::Gaussian { noise_multiplier } => DpEvent::gaussian(noise_multiplier * factor),
            DpEvent::PoissonSampled { sampling_probability, event } => {
                DpEvent::poisson_sampled(*sampling_probability, event.with_noise_scaled(factor))
            }
            DpEvent::SelfComposed { event, count } => event.with_noise_scaled(factor).repeated(*count),
            DpEvent::Composed { events } => {
                DpEvent::Composed { events: events.iter().map(|e| e.with_noise_scaled(factor)).collect() }
            }
        }
    }
    /// The kind's name, as in error messages.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            DpEvent::Gaussian { .. } => "a Gaussian event",
            DpEvent::PoissonSampled { .. } => "a Poisson-sampled event",
            DpEvent::SelfComposed { .. } => "a self-composed event",
            DpEvent::Composed { .. } => "a composed event",
        }
    }
}

/// Turns [`DpEvent`]s into a privacy loss. Implementations never understate it.
pub trait Accountant {
    /// The accountant's name (`rdp`, `zcdp`).
    fn name(&self) -> &'static str;
    /// Whether [`compose`](Self::compose) would accept `event`, without changing anything.
    ///
    /// # Errors
    /// [`AccountingError::UnsupportedEvent`] for an event (or a part of one) it cannot account
    /// for; [`AccountingError::InvalidParameter`] for an invalid parameter.
    fn check(&self, event: &DpEvent) -> Result<()>;
    /// Adds `event`'s privacy loss, or refuses it whole, changing nothing.
    ///
    /// # Errors
    /// As [`check`](Self::check).
    fn compose(&mut self, event: &DpEvent) -> Result<()>;
    /// The ε at `delta` of everything composed so far (0 for nothing), never understated.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `delta` if it is not in (0, 1).
    fn epsilon(&self, delta: f64) -> Result<f64>;
}

/// Rényi DP at a fixed list of orders ([Mir17]), with the Poisson-subsampled Gaussian's RDP of
/// [MTZ19] ([`subsampled::rdp`]), converted to (ε, δ) by `cks` or the classic conversion
/// ([`Conversion::BunSteinke`] on an RDP curve: ε = min_α R(α) + ln(1/δ)/(α − 1)).
///
/// Neighbours: add-or-remove-one (the relation [MTZ19]'s analysis of Poisson sampling is
/// stated for); a Gaussian event's multiplier is relative to one record's sensitivity.
///
/// [Mir17]: https://arxiv.org/abs/1702.07476
/// [MTZ19]: https://arxiv.org/abs/1908.10530
#[derive(Debug, Clone, PartialEq)]
pub struct RdpAccountant {
    orders: Vec<f64>,
    rdp: Vec<f64>,
    conversion: Conversion,
}

impl RdpAccountant {
    /// An accountant at `orders` (each finite and > 1), converting with `conversion` (`cks`
    /// or `bun-steinke`, the classic one).
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `orders` or `order`;
    /// [`AccountingError::Unsupported`] for `gaussian-exact`, which does not apply to RDP.
    pub fn new(orders: Vec<f64>, conversion: Conversion) -> Result<Self> {
        let zeros = vec![0.0; orders.len()];
        let curve = Rdp::new(orders, zeros)?;
        if conversion == Conversion::GaussianExact {
            return Err(AccountingError::Unsupported {
                method: "gaussian-exact",
                guarantee: "an RDP curve",
                why: "an RDP curve does not determine the (epsilon, delta) curve; use `cks`",
            });
        }
        Ok(Self { rdp: curve.epsilons().to_vec(), orders: curve.orders().to_vec(), conversion })
    }
    /// The orders, ascending.
    #[must_use]
    pub fn orders(&self) -> &[f64] {
        &self.orders
    }
    /// The RDP composed so far, one value per order.
    #[must_use]
    pub fn rdp(&self) -> &[f64] {
        &self.rdp
    }
    /// The RDP of `event` at every order, rounded up.
    ///
    /// # Errors
    /// As [`Accountant::check`].
    pub fn rdp_of(&self, event: &DpEvent) -> Result<Vec<f64>> {
        match event {
            DpEvent::Gaussian { noise_multiplier } => {
                let s = positive("sigma", *noise_multiplier)?;
                self.orders.iter().map(|&a| subsampled::rdp(1.0, s, a)).collect()
            }
            DpEvent::PoissonSampled { sampling_probability: q, event } => match **event {
                DpEvent::Gaussian { noise_multiplier } => {
                    self.orders.iter().map(|&a| subsampled::rdp(*q, noise_multiplier, a)).collect()
                }
                _ => Err(AccountingError::UnsupportedEvent {
                    accountant: "rdp",
                    event: event.kind(),
                    why: "only the Gaussian mechanism on a Poisson sample has an RDP bound here",
                }),
            },
            DpEvent::SelfComposed { event, count } => {
                let n = u64_up(*count);
                Ok(self.rdp_of(event)?.into_iter().map(|r| mul_up(r, n)).collect())
            }
            DpEvent::Composed { events } => {
                let mut sum = vec![0.0; self.orders.len()];
                for e in events {
                    for (s, r) in sum.iter_mut().zip(self.rdp_of(e)?) {
                        *s = add_up(*s, r);
                    }
                }
                Ok(sum)
            }
        }
    }
    /// The conversion to (ε, δ) it applies.
    #[must_use]
    pub fn conversion(&self) -> Conversion {
        self.conversion
    }
    /// The accountant of `count` repetitions of everything composed so far (each order's RDP
    /// times `count`, rounded up) — e.g. the first t steps of a run from the RDP of one step.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `rdp epsilon` if the product overflows.
    pub fn repeated(&self, count: u64) -> Result<Self> {
        let n = u64_up(count);
        let rdp = finite(self.rdp.iter().map(|&r| if r == 0.0 { 0.0 } else { mul_up(r, n) }).collect())?;
        Ok(Self { orders: self.orders.clone(), rdp, conversion: self.conversion })
    }
    /// The ε at `delta` and the order that gives it.
    ///
    /// # Errors
    /// As [`Accountant::epsilon`].
    pub fn epsilon_and_order(&self, delta: f64) -> Result<(f64, f64)> {
        probability("delta", delta)?;
        let last = self.orders[self.orders.len() - 1];
        if self.rdp.iter().all(|&r| r == 0.0) {
            return Ok((0.0, last)); // nothing released: (0, 0)-DP
        }
        let mut best = (f64::INFINITY, last);
        for (&a, &r) in self.orders.iter().zip(&self.rdp) {
            let e = Rdp::new(vec![a], vec![r])?.epsilon(delta, self.conversion)?;
            if e < best.0 {
                best = (e, a);
            }
        }
        Ok(best)
    }
}

/// An RDP curve after a composition, refused if any order overflowed (a vacuous guarantee).
fn finite(rdp: Vec<f64>) -> Result<Vec<f64>> {
    match rdp.iter().find(|r| !r.is_finite()) {
        Some(&bad) => Err(AccountingError::InvalidParameter {
            name: "rdp epsilon",
            value: bad,
            expected: "the composition overflowed: the guarantee would be vacuous",
        }),
        None => Ok(rdp),
    }
}

impl Accountant for RdpAccountant {
    fn name(&self) -> &'static str {
        "rdp"
    }
    fn check(&self, event: &DpEvent) -> Result<()> {
        self.clone().compose(event)
    }
    fn compose(&mut self, event: &DpEvent) -> Result<()> {
        let add = self.rdp_of(event)?;
        self.rdp = finite(self.rdp.iter().zip(&add).map(|(a, b)| add_up(*a, *b)).collect())?;
        Ok(())
    }
    fn epsilon(&self, delta: f64) -> Result<f64> {
        Ok(self.epsilon_and_order(delta)?.0)
    }
}

/// μ-Gaussian DP ([DRS19]): the Gaussian mechanism with multiplier σ is (1/σ)-GDP, and
/// compositions add μ² ([DRS19, Cor. 3.3]; also when each μ is chosen as the run goes:
/// [ST22]). Converted by the exact GDP curve ([DRS19, Cor. 2.13]) or through its zCDP (ρ =
/// μ²/2) by `cks` / `bun-steinke`. It refuses Poisson sampling, for which GDP has only a
/// central-limit approximation, not a bound. This is the accountant of full-batch private GD:
/// [`crate::GdPlan::event`] is such a run as an event.
///
/// [DRS19]: https://arxiv.org/abs/1905.02383
/// [ST22]: https://arxiv.org/abs/2210.17520
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GdpAccountant {
    /// For Gaussian mechanisms μ² = 2ρ, and both add under composition: the zCDP accountant
    /// keeps the sum (one rule per event, in one place); only the conversion differs.
    zcdp: ZcdpAccountant,
    conversion: Conversion,
}

impl GdpAccountant {
    /// An accountant with nothing composed, converting by `conversion`.
    #[must_use]
    pub fn new(conversion: Conversion) -> Self {
        Self { zcdp: ZcdpAccountant::new(), conversion }
    }
    /// The μ composed so far, √(2ρ) rounded up (doubling is exact).
    #[must_use]
    pub fn mu(&self) -> f64 {
        sqrt_up(2.0 * self.zcdp.rho())
    }
}

impl Accountant for GdpAccountant {
    fn name(&self) -> &'static str {
        "gdp"
    }
    fn check(&self, event: &DpEvent) -> Result<()> {
        let mut copy = *self;
        copy.compose(event)
    }
    fn compose(&mut self, event: &DpEvent) -> Result<()> {
        let mut zcdp = self.zcdp;
        zcdp.compose(event).map_err(|e| match e {
            AccountingError::UnsupportedEvent { event, .. } => AccountingError::UnsupportedEvent {
                accountant: "gdp",
                event,
                why: "Gaussian DP has only a central-limit approximation for Poisson sampling, not a bound; use \
                      the rdp or pld accountant",
            },
            other => other,
        })?;
        // μ must stay finite too, for the exact curve to answer.
        GaussianDp::new(sqrt_up(2.0 * zcdp.rho()))?;
        self.zcdp = zcdp;
        Ok(())
    }
    fn epsilon(&self, delta: f64) -> Result<f64> {
        probability("delta", delta)?;
        if self.zcdp.rho() == 0.0 {
            return Ok(0.0);
        }
        GaussianDp::new(self.mu())?.epsilon(delta, self.conversion)
    }
}

/// ρ-zCDP ([BS16]): the Gaussian mechanism with multiplier σ is 1/(2σ²)-zCDP, compositions
/// add ρ; converted with `cks`. It refuses Poisson sampling, whose amplification zCDP does
/// not capture (use [`RdpAccountant`]).
///
/// [BS16]: https://arxiv.org/abs/1605.02065
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ZcdpAccountant {
    rho: f64,
}

impl ZcdpAccountant {
    /// An accountant with nothing composed.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
    /// The ρ composed so far.
    #[must_use]
    pub fn rho(&self) -> f64 {
        self.rho
    }
    fn rho_of(event: &DpEvent) -> Result<f64> {
        match event {
            DpEvent::Gaussian { noise_multiplier } => {
                let s = positive("sigma", *noise_multiplier)?;
                // 1/(2σ²) with σ² rounded down and the quotient up: never below the exact ρ,
                // and exact where it is representable (σ = 8: ρ = 1/128). Where 2σ² is not a
                // normal number its reciprocal would overflow or lose its bound: refused.
                let twice_square = 2.0 * mul_down(s, s);
                if twice_square < f64::MIN_POSITIVE {
                    return Err(AccountingError::InvalidParameter {
                        name: "sigma",
                        value: s,
                        expected: "a noise multiplier whose square is a normal float (above about 1e-154): a \
                                   smaller one gives no meaningful guarantee",
                    });
                }
                Ok(div_up(1.0, twice_square))
            }
            DpEvent::PoissonSampled { .. } => Err(AccountingError::UnsupportedEvent {
                accountant: "zcdp",
                event: event.kind(),
                why: "zCDP does not capture amplification by sampling; use the rdp accountant",
            }),
            DpEvent::SelfComposed { event, count } => Ok(mul_up(Self::rho_of(event)?, u64_up(*count))),
            DpEvent::Composed { events } => events.iter().try_fold(0.0, |s, e| Ok(add_up(s, Self::rho_of(e)?))),
        }
    }
}

impl Accountant for ZcdpAccountant {
    fn name(&self) -> &'static str {
        "zcdp"
    }
    fn check(&self, event: &DpEvent) -> Result<()> {
        let mut copy = *self;
        copy.compose(event)
    }
    fn compose(&mut self, event: &DpEvent) -> Result<()> {
        let rho = add_up(self.rho, Self::rho_of(event)?);
        Zcdp::new(rho)?;
        self.rho = rho;
        Ok(())
    }
    fn epsilon(&self, delta: f64) -> Result<f64> {
        probability("delta", delta)?;
        if self.rho == 0.0 {
            return Ok(0.0);
        }
        Zcdp::new(self.rho)?.epsilon(delta, Conversion::Cks)
    }
}

/// The privacy loss distribution accountant ([KJPH21]; [`crate::pld`]): each direction of
/// add-or-remove-one neighbours composed on its own, with the losses' distribution moved up
/// onto the grid (the ε reported, never understated) and, for comparison, down onto a finer
/// one (a lower *estimate*: its own floating-point error is not bounded; the gap between the
/// two shows how much the grid costs).
///
/// [KJPH21]: https://arxiv.org/abs/2006.07134
#[derive(Debug, Clone, PartialEq)]
pub struct PldAccountant {
    interval: f64,
    /// (add, remove) × (pessimistic, optimistic).
    plds: [Pld; 4],
}

/// The four (direction, rounding) pairs, in `PldAccountant::plds` order.
const PLD_KINDS: [(Direction, Rounding); 4] = [
    (Direction::Add, Rounding::Pessimistic),
    (Direction::Add, Rounding::Optimistic),
    (Direction::Remove, Rounding::Pessimistic),
    (Direction::Remove, Rounding::Optimistic),
];

impl PldAccountant {
    /// An accountant whose losses lie on the grid of interval `interval` (dp_accounting's
    /// default is 1e-4; finer is tighter and slower).
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `grid interval` (not finite and > 0).
    pub fn new(interval: f64) -> Result<Self> {
        let h = positive("grid interval", interval)?;
        Ok(Self { interval: h, plds: PLD_KINDS.map(|(_, r)| Pld::identity(Self::grid(h, r), r)) })
    }
    /// The grid of a rounding: the lower bound's is 10 times finer (its bias is up to one grid
    /// interval per step; the upper bound's connected dots have none).
    fn grid(interval: f64, rounding: Rounding) -> f64 {
        match rounding {
            Rounding::Pessimistic => interval,
            Rounding::Optimistic => interval / 10.0,
        }
    }
    /// The PLD of `event` in one direction and rounding.
    pub(crate) fn pld_of(&self, event: &DpEvent, dir: Direction, rounding: Rounding) -> Result<Pld> {
        let h = Self::grid(self.interval, rounding);
        match event {
            DpEvent::Gaussian { noise_multiplier } => {
                Pld::subsampled_gaussian(1.0, *noise_multiplier, h, dir, rounding)
            }
            DpEvent::PoissonSampled { sampling_probability: q, event } => match **event {
                DpEvent::Gaussian { noise_multiplier } => {
                    Pld::subsampled_gaussian(*q, noise_multiplier, h, dir, rounding)
                }
                _ => Err(AccountingError::UnsupportedEvent {
                    accountant: "pld",
                    event: event.kind(),
                    why: "only the Gaussian mechanism on a Poisson sample has a PLD here",
                }),
            },
            DpEvent::SelfComposed { event, count } => self.pld_of(event, dir, rounding)?.self_compose(*count),
            DpEvent::Composed { events } => events
                .iter()
                .try_fold(Pld::identity(h, rounding), |acc, e| acc.compose(&self.pld_of(e, dir, rounding)?)),
        }
    }
    /// The ε at `delta` (never understated) and the lower estimate (see the type's docs).
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `delta` if it is not in (0, 1).
    pub fn epsilon_bounds(&self, delta: f64) -> Result<(f64, f64)> {
        let mut e = [0.0; 4];
        for (slot, pld) in e.iter_mut().zip(&self.plds) {
            *slot = pld.epsilon(delta)?;
        }
        Ok((e[0].max(e[2]), e[1].max(e[3])))
    }
}

impl Accountant for PldAccountant {
    fn name(&self) -> &'static str {
        "pld"
    }
    fn check(&self, event: &DpEvent) -> Result<()> {
        self.clone().compose(event)
    }
    fn compose(&mut self, event: &DpEvent) -> Result<()> {
        let mut next = self.plds.clone();
        for (slot, (dir, rounding)) in next.iter_mut().zip(PLD_KINDS) {
            *slot = slot.compose(&self.pld_of(event, dir, rounding)?)?;
        }
        self.plds = next;
        Ok(())
    }
    fn epsilon(&self, delta: f64) -> Result<f64> {
        Ok(self.epsilon_bounds(delta)?.0)
    }
}

/// The smallest noise multiplier σ for which `steps` steps of the Poisson-subsampled Gaussian
/// with rate `q` are (`epsilon`, `delta`)-DP by an [`RdpAccountant`] at `orders` with
/// `conversion`; confirmed with that accountant exactly as users call it, so the ε of the σ
/// returned never exceeds the target.
///
/// # Errors
/// [`AccountingError::InvalidParameter`] for an invalid parameter;
/// [`AccountingError::NoSolution`] when no σ up to 10⁶ reaches the target.
pub fn calibrate_sgd_sigma(
    q: f64,
    steps: u64,
    (epsilon, delta): (f64, f64),
    orders: &[f64],
    conversion: Conversion,
) -> Result<f64> {
    positive("epsilon", epsilon)?;
    probability("delta", delta)?;
    let eps_at = |sigma: f64| -> Result<f64> {
        let mut acc = RdpAccountant::new(orders.to_vec(), conversion)?;
        acc.compose(&DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)).repeated(steps))?;
        acc.epsilon(delta)
    };
    eps_at(1.0)?; // validates q, orders and the conversion, with their own messages
    let meets = |sigma: f64| eps_at(sigma).is_ok_and(|e| e <= epsilon);
    let sigma = crate::numeric::smallest_where(1e-3, 1e6, meets);
    if sigma.is_finite() && meets(sigma) {
        Ok(sigma)
    } else {
        Err(AccountingError::NoSolution("no noise multiplier up to 1e6 reaches this (epsilon, delta)"))
    }
}

/// The relative precision of [`calibrate_sgd_sigma_pld`]'s σ (each candidate costs a PLD
/// composition, so the search stops at 10⁻⁴ rather than at the last float).
pub const PLD_CALIBRATION_TOLERANCE: f64 = 1e-4;

/// A noise multiplier σ, within [`PLD_CALIBRATION_TOLERANCE`] of the smallest, for which
/// `steps` steps of the Poisson-subsampled Gaussian with rate `q` are (`epsilon`, `delta`)-DP
/// by a [`PldAccountant`] with grid `interval` — its upper bound, so the ε of the σ returned
/// never exceeds the target. The search starts from the RDP σ ([`calibrate_sgd_sigma`] at
/// [`dp_accounting_orders`](crate::subsampled::dp_accounting_orders), `cks`), which the PLD's
/// tighter bound usually lets it lower, and bisects in about 15 PLD compositions.
///
/// # Errors
/// As [`calibrate_sgd_sigma`]; [`AccountingError::NoSolution`] when no σ up to 10⁶ reaches
/// the target.
pub fn calibrate_sgd_sigma_pld(q: f64, steps: u64, (epsilon, delta): (f64, f64), interval: f64) -> Result<f64> {
    let eps_at = |sigma: f64| -> Result<f64> {
        let mut acc = PldAccountant::new(interval)?;
        acc.compose(&DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)).repeated(steps))?;
        Ok(acc.epsilon_bounds(delta)?.0)
    };
    let meets = |sigma: f64| eps_at(sigma).is_ok_and(|e| e <= epsilon);
    let orders = crate::subsampled::dp_accounting_orders();
    let rdp = calibrate_sgd_sigma(q, steps, (epsilon, delta), &orders, Conversion::Cks)?;
    eps_at(rdp)?; // the PLD's own parameter errors (the grid), with their messages
    let no_solution = || AccountingError::NoSolution("no noise multiplier up to 1e6 reaches this (epsilon, delta)");
    // A bracket [lo, hi] with hi meeting the target and lo not: at most 40 doublings each way.
    let mut hi = rdp;
    for _ in 0..40 {
        if meets(hi) {
            break;
        }
        hi *= 2.0;
    }
    if !(hi <= 1e6 && meets(hi)) {
        return Err(no_solution());
    }
    let mut lo = hi / 2.0;
    for _ in 0..40 {
        if !meets(lo) {
            break;
        }
        (hi, lo) = (lo, lo / 2.0);
    }
    while hi - lo > PLD_CALIBRATION_TOLERANCE * lo {
        let mid = 0.5 * (lo + hi);
        if meets(mid) { hi = mid } else { lo = mid }
    }
    Ok(hi)
}
