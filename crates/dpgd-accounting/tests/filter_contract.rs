//! One contract for every [`PrivacyFilter`] in the crate, checked with proptest on random
//! sequences of costs (valid and invalid ones):
//!
//! 1. a refused charge changes nothing;
//! 2. `decide` agrees with `try_charge` (CONT exactly when the charge is accepted);
//! 3. a smaller cost never turns CONT into HALT;
//! 4. what was charged never exceeds the budget — checked independently of the filter's
//!    own arithmetic: the accepted costs are summed in double-double arithmetic (exact to
//!    about 1e-30 relative) and compared with the budget, or with the rule evaluated from
//!    those exact sums. An odometer has no budget: for it, the check is that it never records
//!    less than what was charged.

use std::fmt::Debug;

use dpgd_accounting::filter::{
    ApproxZcdp, ApproxZcdpFilter, BasicFilter, Decision, DpFilter, DpSums, FzFilter, IndividualCharge,
    IndividualFilter, MultiOrderRdpFilter, PrivacyFilter, RenyiFilter, RogersFilter, WhitehouseFilter, ZcdpFilter,
};
use dpgd_accounting::odometer::{MixtureOdometer, Odometer};
use dpgd_accounting::{ApproxDp, Rdp, Zcdp};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// The contract, for any filter `F` whose costs come in pairs (cost, a smaller cost).
fn check_contract<F>(
    name: &str,
    fresh: F,
    costs: impl Strategy<Value = Vec<(F::Cost, F::Cost)>>,
    within_budget: impl Fn(&F, &[F::Cost]) -> Result<(), String>,
) where
    F: PrivacyFilter + Clone + PartialEq + Debug,
    F::Cost: Clone + Debug,
{
    let config = Config { cases: 300, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&costs, |sequence| {
        let mut filter = fresh.clone();
        let mut accepted = Vec::new();
        for (cost, smaller) in sequence {
            let decision = filter.decide(&cost);
            if decision == Decision::Continue {
                prop_assert_eq!(
                    filter.decide(&smaller),
                    Decision::Continue,
                    "a smaller cost {:?} than {:?} turned CONT into HALT",
                    smaller,
                    cost
                );
            }
            let before = filter.clone();
            let charged = filter.try_charge(cost.clone());
            prop_assert_eq!(
                charged.is_ok(),
                decision == Decision::Continue,
                "decide said {:?} but try_charge({:?}) gave {:?}",
                decision,
                cost,
                charged
            );
            match charged {
                Ok(()) => accepted.push(cost),
                Err(_) => prop_assert_eq!(&filter, &before, "a refused charge changed the filter"),
            }
            within_budget(&filter, &accepted).map_err(TestCaseError::fail)?;
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

/// Double-double sum: (hi, lo) with hi + lo equal to the exact sum up to ~1e-32 relative.
fn dd_sum(xs: impl IntoIterator<Item = f64>) -> (f64, f64) {
    let (mut hi, mut lo) = (0.0f64, 0.0f64);
    for x in xs {
        let s = hi + x;
        let bb = s - hi;
        let err = (hi - (s - bb)) + (x - bb);
        hi = s;
        lo += err;
        let t = hi + lo;
        lo -= t - hi;
        hi = t;
    }
    (hi, lo)
}

/// Σ xᵢ² in double-double (each square split exactly with an FMA).
fn dd_sum_squares(xs: impl IntoIterator<Item = f64>) -> (f64, f64) {
    dd_sum(xs.into_iter().flat_map(|x| {
        let p = x * x;
        [p, x.mul_add(x, -p)]
    }))
}

/// The double-double `(hi, lo)` is at most `bound`.
fn dd_le((hi, lo): (f64, f64), bound: f64) -> bool {
    hi < bound || (hi == bound && lo <= 0.0)
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what()) }
}

/// A fraction in [0, 1] that is often exactly 0 or 1.
fn fraction() -> impl Strategy<Value = f64> {
    prop_oneof![6 => 0.0f64..=1.0, 1 => Just(0.0), 1 => Just(1.0)]
}

/// A nonnegative amount up to `max`, with invalid values (NaN, negative, ∞) mixed in, and
/// "round" decimal fractions of `budget` (0.1, 0.2, 1/3, …) whose sums land on, or a few
/// ulps around, the budget — where a filter's rounding is put to the test.
fn amount(max: f64, budget: f64) -> impl Strategy<Value = f64> {
    let round: Vec<f64> = [0.05, 0.1, 0.2, 0.25, 0.3, 1.0 / 3.0].iter().map(|f| f * budget).collect();
    prop_oneof![
        8 => 0.0..max,
        8 => proptest::sample::select(round),
        2 => Just(0.0),
        1 => Just(f64::NAN),
        1 => Just(-max / 3.0),
        1 => Just(f64::INFINITY),
        1 => Just(1e-300),
    ]
}

/// A cost and a smaller one: `amount` and `amount · s` (the same when `amount` is invalid).
fn amount_pair(max: f64, budget: f64) -> impl Strategy<Value = (f64, f64)> {
    (amount(max, budget), fraction()).prop_map(|(a, s)| if a >= 0.0 && a.is_finite() { (a, a * s) } else { (a, a) })
}

fn sequences<T: Debug>(pair: impl Strategy<Value = (T, T)>) -> impl Strategy<Value = Vec<(T, T)>> {
    proptest::collection::vec(pair, 1..40)
}

#[test]
fn renyi_filter() {
    let budget = 1.0;
    check_contract(
        "RenyiFilter",
        RenyiFilter::new(4.0, budget).unwrap(),
        sequences(amount_pair(0.3, budget)),
        |f, acc| {
            check(dd_le(dd_sum(acc.iter().copied()), budget), || {
                format!("charged {:?} > {budget} ({f:?})", dd_sum(acc.iter().copied()))
            })
        },
    );
}

fn zcdp_pair(max: f64, budget: f64) -> impl Strategy<Value = (Zcdp, Zcdp)> {
    (amount(max, budget), fraction()).prop_filter_map("zCDP needs rho > 0", |(r, s)| {
        let z = Zcdp::new(r).ok()?;
        Some((z, Zcdp::new(r * s).unwrap_or(z).min_by_rho(z)))
    })
}

/// `Zcdp` has no `min`; the smaller of two guarantees.
trait MinByRho {
    fn min_by_rho(self, other: Self) -> Self;
}
impl MinByRho for Zcdp {
    fn min_by_rho(self, other: Self) -> Self {
        if self.rho() <= other.rho() { self } else { other }
    }
}

#[test]
fn zcdp_filter() {
    let budget = 0.5;
    check_contract(
        "ZcdpFilter",
        ZcdpFilter::new(Zcdp::new(budget).unwrap()),
        sequences(zcdp_pair(0.1, budget)),
        |_, acc| {
            let sum = dd_sum(acc.iter().map(|z| z.rho()));
            check(dd_le(sum, budget), || format!("charged {sum:?} > {budget}"))
        },
    );
}

#[test]
fn multi_order_rdp_filter() {
    let orders = vec![2.0, 8.0, 32.0];
    let budgets = [1.0, 2.0, 4.0];
    let fresh = MultiOrderRdpFilter::new(Rdp::new(orders.clone(), budgets.to_vec()).unwrap()).unwrap();
    let other_orders = prop_oneof![9 => Just(orders.clone()), 1 => Just(vec![2.0, 8.0, 33.0])];
    let pair = (other_orders, proptest::collection::vec(0.0f64..0.6, 3), fraction()).prop_map(|(o, e, s)| {
        let small: Vec<f64> = e.iter().map(|x| x * s).collect();
        (Rdp::new(o.clone(), e).unwrap(), Rdp::new(o, small).unwrap())
    });
    check_contract("MultiOrderRdpFilter", fresh, sequences(pair), |_, acc| {
        for (j, &b) in budgets.iter().enumerate() {
            let sum = dd_sum(acc.iter().map(|r| r.epsilons()[j]));
            check(dd_le(sum, b), || format!("order {}: charged {sum:?} > {b}", orders[j]))?;
        }
        Ok(())
    });
}

#[test]
fn individual_filter() {
    let (n, budget) = (3usize, 2.0);
    let pair = (0usize..4, amount_pair(0.8, budget)).prop_map(|(index, (a, small))| {
        (IndividualCharge { index, amount: a }, IndividualCharge { index, amount: small })
    });
    check_contract("IndividualFilter", IndividualFilter::new(n, budget).unwrap(), sequences(pair), |f, acc| {
        for i in 0..n {
            let sum = dd_sum(acc.iter().filter(|c| c.index == i).map(|c| c.amount));
            check(dd_le(sum, budget), || format!("example {i}: charged {sum:?} > {budget}"))?;
            check(f.spent(i) <= budget, || format!("example {i}: ledger says {} > {budget}", f.spent(i)))?;
        }
        Ok(())
    });
}

/// (ε, δ) costs, pure most of the time, with round fractions of the budgets; the smaller
/// one scales both.
fn approx_dp_pair(max: (f64, f64), budget: (f64, f64)) -> impl Strategy<Value = (ApproxDp, ApproxDp)> {
    let delta = prop_oneof![3 => Just(0.0), 1 => amount(max.1, budget.1)];
    (amount(max.0, budget.0), delta, fraction(), fraction())
        .prop_filter_map("a valid (epsilon, delta)", |(e, d, s, t)| {
            Some((ApproxDp::new(e, d).ok()?, ApproxDp::new(e * s, d * t).ok()?))
        })
}

fn exact_eps(acc: &[ApproxDp]) -> (f64, f64) {
    dd_sum(acc.iter().map(|c| c.epsilon()))
}
fn exact_eps2(acc: &[ApproxDp]) -> (f64, f64) {
    dd_sum_squares(acc.iter().map(|c| c.epsilon()))
}
fn exact_delta(acc: &[ApproxDp]) -> (f64, f64) {
    dd_sum(acc.iter().map(|c| c.delta()))
}

#[test]
fn basic_filter() {
    let (eps, delta) = (1.0, 1e-6);
    let fresh = DpFilter::new(BasicFilter::new(eps, delta).unwrap());
    check_contract("DpFilter<BasicFilter>", fresh, sequences(approx_dp_pair((0.2, 3e-7), (eps, delta))), |_, acc| {
        check(dd_le(exact_eps(acc), eps) && dd_le(exact_delta(acc), delta), || format!("overspent: {acc:?}"))
    });
}

#[test]
fn fz_filters() {
    let (eps, delta) = (1.0f64, 1e-6f64);
    let l = -delta.ln();
    // B* = (√(L+ε) − √L)², recomputed here in closed form.
    let b_star = ((l + eps).sqrt() - l.sqrt()).powi(2);
    for (name, rule) in
        [("printed", FzFilter::printed(eps, delta).unwrap()), ("cks", FzFilter::cks(eps, delta).unwrap())]
    {
        let bound = if name == "printed" { b_star * (1.0 + 1e-12) } else { rule.b_star() };
        check_contract(
            &format!("DpFilter<FzFilter::{name}>"),
            DpFilter::new(rule),
            sequences(approx_dp_pair((0.1, 1e-7), (eps, delta))),
            |_, acc| {
                // ½Σε² ≤ B*, only pure mechanisms.
                let half = {
                    let (hi, lo) = exact_eps2(acc);
                    (hi / 2.0, lo / 2.0)
                };
                check(dd_le(half, bound) && acc.iter().all(|c| c.delta() == 0.0), || {
                    format!("overspent: {half:?} > {bound}")
                })
            },
        );
    }
}

#[test]
fn whitehouse_filter() {
    let (eps, d1, d2) = (1.0f64, 1e-6f64, 1e-6);
    // √(2L V) + V/2 ≤ ε  ⇔  V ≤ y* = (√(2L + 2ε) − √(2L))², the closed-form inverse.
    let l = -d1.ln();
    let y_star = ((2.0 * l + 2.0 * eps).sqrt() - (2.0 * l).sqrt()).powi(2);
    let fresh = DpFilter::new(WhitehouseFilter::new(eps, d1, d2).unwrap());
    check_contract("DpFilter<WhitehouseFilter>", fresh, sequences(approx_dp_pair((0.1, 3e-7), (eps, d2))), |_, acc| {
        let v = exact_eps2(acc);
        check(dd_le(v, y_star * (1.0 + 1e-12)) && dd_le(exact_delta(acc), d2), || {
            format!("overspent: V = {v:?} > {y_star}")
        })
    });
}

#[test]
fn rogers_filter() {
    let (eps, delta) = (1.0f64, 1e-6f64);
    let fresh = DpFilter::new(RogersFilter::new(eps, delta).unwrap());
    check_contract("DpFilter<RogersFilter>", fresh, sequences(approx_dp_pair((0.1, 2e-7), (eps, delta))), |_, acc| {
        // [RRUV16, Thm 5.1] evaluated from the exact sums.
        let v = exact_eps2(acc).0;
        let mean: f64 = acc.iter().map(|c| c.epsilon() * c.epsilon().exp_m1() / 2.0).sum();
        let h = eps * eps / (28.04 * -delta.ln());
        let bound = mean + (2.0 * (v + h) * (1.0 + 0.5 * (v / h).ln_1p()) * (2.0 / delta).ln()).sqrt();
        check(bound <= eps * (1.0 + 1e-12) && dd_le(exact_delta(acc), delta / 2.0), || {
            format!("overspent: {bound} > {eps}")
        })
    });
}

#[test]
fn approx_zcdp_filter() {
    let (rho, delta) = (0.5, 1e-6);
    let pair = (amount_pair(0.1, rho), amount_pair(3e-7, delta))
        .prop_map(|((r, rs), (d, ds))| (ApproxZcdp { rho: r, delta: d }, ApproxZcdp { rho: rs, delta: ds }));
    check_contract("ApproxZcdpFilter", ApproxZcdpFilter::new(rho, delta).unwrap(), sequences(pair), |_, acc| {
        let (r, d) = (dd_sum(acc.iter().map(|c| c.rho)), dd_sum(acc.iter().map(|c| c.delta)));
        check(dd_le(r, rho) && dd_le(d, delta), || format!("overspent: rho {r:?}, delta {d:?}"))
    });
}

#[test]
fn odometer() {
    let fresh = Odometer::new(MixtureOdometer::new(0.1, 1e-6, 1e-6).unwrap());
    check_contract(
        "Odometer<MixtureOdometer>",
        fresh,
        sequences(approx_dp_pair((0.1, 1e-7), (1.0, 1e-6))),
        |o, acc| {
            // No budget: it must accept every pure mechanism, refuse every δ > 0 (it needs pDP
            // for those), and never record less than what was charged.
            let s: DpSums = o.sums();
            check(acc.iter().all(|c| c.delta() == 0.0), || "accepted a mechanism with delta > 0".into())?;
            check(s.rounds == acc.len() as u64, || format!("{} rounds recorded, {} charged", s.rounds, acc.len()))?;
            let (e, e2) = (exact_eps(acc), exact_eps2(acc));
            check(dd_le(e, s.eps) && dd_le(e2, s.eps2), || format!("recorded {s:?} below the exact sums {e:?}, {e2:?}"))
        },
    );
}
