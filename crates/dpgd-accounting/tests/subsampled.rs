//! The RDP of the Poisson-subsampled Gaussian and DP-SGD's ε against held-out values
//! (`tests/reference/subsampled_refs.py`): mpmath numerical integration of A_α at 50 digits,
//! independent of the series the library sums, and Opacus 1.6's and dp_accounting 0.6's
//! accountants (RDP and PLD) end to end.

mod reference;

use dpgd_accounting::Conversion;
use dpgd_accounting::event::{
    Accountant, DpEvent, PLD_CALIBRATION_TOLERANCE, PldAccountant, RdpAccountant, calibrate_sgd_sigma,
    calibrate_sgd_sigma_pld,
};
use dpgd_accounting::subsampled::{dp_accounting_orders, opacus_orders, rdp};

const REFS: &str = include_str!("reference/subsampled_refs.txt");

#[test]
fn rdp_matches_numerical_integration_within_1e_6_and_is_never_below_it() {
    for r in reference::rows(REFS, "rdp") {
        let (q, sigma, alpha, want) = (r[0], r[1], r[2], r[3]);
        let got = rdp(q, sigma, alpha).unwrap();
        let rel = (got - want) / want;
        assert!(rel.abs() < 1e-6, "q {q} σ {sigma} α {alpha}: {got} against {want} ({rel:e})");
        // mpmath's quadrature is good to ~1e-8 here (it and Opacus's series differ by that much).
        assert!(rel > -1e-7, "understated: q {q} σ {sigma} α {alpha}: {got} against {want}");
    }
}

/// DP-SGD's ε and chosen order against another library's accountant (`kind` rows) at that
/// library's default orders, with the cks conversion both use.
fn check_against(kind: &str, orders: &[f64]) {
    for r in reference::rows(REFS, kind) {
        let (q, sigma, steps, delta, want, want_alpha) = (r[0], r[1], r[2] as u64, r[3], r[4], r[5]);
        let mut acc = RdpAccountant::new(orders.to_vec(), Conversion::Cks).unwrap();
        acc.compose(&DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)).repeated(steps)).unwrap();
        let (eps, alpha) = acc.epsilon_and_order(delta).unwrap();
        assert!(((eps - want) / want).abs() < 1e-6, "q {q} σ {sigma} T {steps}: ε {eps} against {kind}'s {want}");
        assert_eq!(alpha, want_alpha, "{kind}: the order chosen");
    }
}

#[test]
fn dp_sgd_epsilon_matches_opacus_at_its_orders_with_the_cks_conversion() {
    check_against("opacus", &opacus_orders());
}

#[test]
fn dp_sgd_epsilon_matches_dp_accounting_at_its_orders() {
    check_against("dp_accounting", &dp_accounting_orders());
}

/// The PLD accountant against dp_accounting's at the same grid interval (1e-4): its reported
/// ε is within 1e-3 of dp_accounting's, its lower bound below it and within 3 %, and the PLD's
/// ε below RDP's.
#[test]
fn the_pld_accountant_brackets_dp_accountings_and_is_tighter_than_rdp() {
    for r in reference::rows(REFS, "pld") {
        let (q, sigma, steps, delta, want) = (r[0], r[1], r[2] as u64, r[3], r[4]);
        let step = DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)).repeated(steps);
        let mut pld = PldAccountant::new(1e-4).unwrap();
        pld.compose(&step).unwrap();
        let (upper, lower) = pld.epsilon_bounds(delta).unwrap();
        assert!(
            ((upper - want) / want).abs() < 1e-3,
            "q {q} σ {sigma} T {steps}: ε {upper} against dp_accounting's {want}"
        );
        assert!(lower <= upper && lower <= want * (1.0 + 1e-9), "q {q}: lower estimate {lower}, upper {upper}, {want}");
        // The lower bound rounds each step's loss down on a grid of 1e-5: a bias of up to T·1e-5.
        assert!(upper - lower < 0.03 * upper, "q {q}: discretisation error {} at interval 1e-4", upper - lower);
        let mut rdp = RdpAccountant::new(opacus_orders(), Conversion::Cks).unwrap();
        rdp.compose(&step).unwrap();
        assert!(upper < rdp.epsilon(delta).unwrap(), "q {q}: the PLD is tighter than RDP");
    }
}

#[test]
fn calibration_never_returns_a_sigma_over_the_target_and_is_tight() {
    for (q, steps, eps) in [(0.004, 3750u64, 1.0), (0.01, 1000, 2.0), (0.05, 500, 0.5), (1.0, 10, 3.0)] {
        let orders = opacus_orders();
        let sigma = calibrate_sgd_sigma(q, steps, (eps, 1e-5), &orders, Conversion::Cks).unwrap();
        let at = |s: f64| {
            let mut acc = RdpAccountant::new(orders.clone(), Conversion::Cks).unwrap();
            acc.compose(&DpEvent::poisson_sampled(q, DpEvent::gaussian(s)).repeated(steps)).unwrap();
            acc.epsilon(1e-5).unwrap()
        };
        assert!(at(sigma) <= eps, "q {q}: σ {sigma} gives {} > {eps}", at(sigma));
        assert!(at(sigma * (1.0 - 1e-9)) > eps * (1.0 - 1e-6), "q {q}: σ {sigma} is not the smallest");
    }
    assert!(calibrate_sgd_sigma(0.01, 100, (0.0, 1e-5), &opacus_orders(), Conversion::Cks).is_err());
    assert!(calibrate_sgd_sigma(1.5, 100, (1.0, 1e-5), &opacus_orders(), Conversion::Cks).is_err());
}

#[test]
fn the_classic_conversion_is_looser_than_cks_and_both_bound_the_same_curve() {
    let step = DpEvent::poisson_sampled(0.004, DpEvent::gaussian(1.3)).repeated(3750);
    let eps = |c| {
        let mut acc = RdpAccountant::new(opacus_orders(), c).unwrap();
        acc.compose(&step).unwrap();
        acc.epsilon(1e-5).unwrap()
    };
    let (cks, classic) = (eps(Conversion::Cks), eps(Conversion::BunSteinke));
    assert!(cks < classic && classic < 1.5 * cks, "cks {cks}, classic {classic}");
    assert!(RdpAccountant::new(opacus_orders(), Conversion::GaussianExact).is_err());
}

#[test]
fn an_accountant_repeated_t_times_is_the_t_fold_composition() {
    let step = DpEvent::poisson_sampled(0.004, DpEvent::gaussian(1.3));
    let mut one = RdpAccountant::new(opacus_orders(), Conversion::Cks).unwrap();
    one.compose(&step).unwrap();
    for t in [1u64, 7, 3750] {
        let mut whole = RdpAccountant::new(opacus_orders(), Conversion::Cks).unwrap();
        whole.compose(&step.clone().repeated(t)).unwrap();
        let by_repeat = one.repeated(t).unwrap();
        assert_eq!(by_repeat.rdp(), whole.rdp(), "t = {t}");
        assert_eq!(by_repeat.epsilon(1e-5).unwrap(), whole.epsilon(1e-5).unwrap());
    }
    assert_eq!(one.repeated(0).unwrap().epsilon(1e-5).unwrap(), 0.0);
    // An overflowing repetition is refused, not infinite.
    let mut big = RdpAccountant::new(vec![2.0], Conversion::Cks).unwrap();
    big.compose(&DpEvent::gaussian(1e-150)).unwrap();
    assert!(big.repeated(u64::MAX).is_err());
}

#[test]
fn pld_calibration_meets_the_target_near_the_smallest_sigma_and_below_rdps() {
    let (q, steps, target, delta, interval) = (0.01, 200, 1.5, 1e-5, 1e-3);
    let eps_at = |sigma: f64| {
        let mut acc = PldAccountant::new(interval).unwrap();
        acc.compose(&DpEvent::poisson_sampled(q, DpEvent::gaussian(sigma)).repeated(steps)).unwrap();
        acc.epsilon_bounds(delta).unwrap().0
    };
    let sigma = calibrate_sgd_sigma_pld(q, steps, (target, delta), interval).unwrap();
    assert!(eps_at(sigma) <= target, "{}", eps_at(sigma));
    assert!(eps_at(sigma * (1.0 - 2.0 * PLD_CALIBRATION_TOLERANCE)) > target, "not near the smallest");
    let rdp = calibrate_sgd_sigma(q, steps, (target, delta), &dp_accounting_orders(), Conversion::Cks).unwrap();
    assert!(sigma < rdp, "the tighter accountant needs less noise: {sigma} vs {rdp}");
}
