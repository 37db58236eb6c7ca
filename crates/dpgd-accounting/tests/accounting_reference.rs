//! Every accounting formula against values computed independently with mpmath at 60 digits
//! by `tests/reference/accounting_refs.py` (golden-section search instead of the
//! first-order condition, mpmath's ncdf, Opacus's RDP formula); its output is
//! `tests/reference/accounting_refs.txt`, parsed here. The `strict_*` rows take exact input
//! doubles and 21-digit results, so that "never understates" can be checked strictly.

mod reference;

use dpgd_accounting::convert::{bun_steinke_epsilon, cks_epsilon, gaussian_delta, gaussian_epsilon};
use dpgd_accounting::{ApproxDp, Conversion, GaussianDp, PrivateGd, Rdp, ToApproxDp, Zcdp, calibrate_sigma};

const REFS: &str = include_str!("reference/accounting_refs.txt");

/// Closed forms: relative error ≤ 1e-9. Solved quantities: ≤ 1e-6 (we get far better).
const CLOSED: f64 = 1e-9;
const SOLVED: f64 = 1e-6;

fn rows(kind: &str) -> Vec<Vec<f64>> {
    reference::rows(REFS, kind)
}

fn assert_rel(got: f64, want: f64, tol: f64, what: &str) {
    let err = if want == 0.0 { got.abs() } else { ((got - want) / want).abs() };
    assert!(err <= tol, "{what}: got {got:e}, want {want:e} (relative error {err:e} > {tol:e})");
}

#[test]
fn zcdp_conversions_match_reference() {
    for r in rows("zcdp") {
        let (rho, delta) = (r[0], r[1]);
        let what = format!("rho={rho} delta={delta}");
        assert_rel(bun_steinke_epsilon(rho, delta), r[2], CLOSED, &format!("bun-steinke {what}"));
        assert_rel(cks_epsilon(rho, delta), r[3], SOLVED, &format!("cks {what}"));
        let z = Zcdp::new(rho).unwrap();
        assert_rel(z.epsilon(delta, Conversion::Cks).unwrap(), r[3], SOLVED, &what);
        let g = GaussianDp::from_gaussian_zcdp(z);
        assert_rel(g.epsilon(delta, Conversion::GaussianExact).unwrap(), r[4], SOLVED, &format!("gdp {what}"));
    }
}

#[test]
fn gaussian_privacy_profile_matches_reference() {
    for r in rows("gdelta") {
        let (mu, eps, want) = (r[0], r[1], r[2]);
        let got = gaussian_delta(mu, eps);
        if want < 1e-300 {
            assert!(got < 1e-300, "delta({mu},{eps}) = {got:e} should underflow like {want:e}");
        } else {
            assert_rel(got, want, CLOSED, &format!("gaussian delta mu={mu} eps={eps}"));
        }
    }
}

#[test]
fn inverses_match_reference() {
    for r in rows("maxrho") {
        let (eps, delta) = (r[0], r[1]);
        for (m, want) in [(Conversion::BunSteinke, r[2]), (Conversion::Cks, r[3]), (Conversion::GaussianExact, r[4])] {
            let tol = if m == Conversion::BunSteinke { CLOSED } else { SOLVED };
            let got = m.max_rho(eps, delta).unwrap().rho();
            assert_rel(got, want, tol, &format!("max rho {m} eps={eps} delta={delta}"));
        }
    }
}

/// Opacus's `get_privacy_spent` over its DEFAULT_ALPHAS, for the full-batch Gaussian mechanism.
#[test]
fn rdp_curve_conversion_matches_opacus() {
    let mut orders: Vec<f64> = (1..100).map(|x| 1.0 + f64::from(x) / 10.0).collect();
    orders.extend((12..64).map(f64::from));
    for r in rows("opacus") {
        let (sigma, steps, delta, want) = (r[0], r[1], r[2], r[3]);
        let curve = Zcdp::new(steps / (2.0 * sigma * sigma)).unwrap().to_rdp(&orders).unwrap();
        assert_rel(curve.epsilon(delta, Conversion::Cks).unwrap(), want, CLOSED, &format!("opacus sigma={sigma}"));
    }
}

#[test]
fn special_points_in_closed_form() {
    // bun-steinke at ρ = ln(1/δ): ε = 3 ln(1/δ).
    let delta: f64 = 1e-5;
    let l = (1.0 / delta).ln();
    assert_rel(bun_steinke_epsilon(l, delta), 3.0 * l, CLOSED, "bun-steinke special point");
    // δ_μ(0) = 2Φ(μ/2) − 1; at μ = 2·Φ⁻¹(0.75) ≈ 1.3489795 this is exactly 0.5.
    let mu = 2.0 * 0.674_489_750_196_081_7;
    assert_rel(gaussian_delta(mu, 0.0), 0.5, CLOSED, "gaussian delta at eps = 0");
    // Exactly 0.5 up to the rounding of μ: the safety margin of gaussian_delta may move the
    // answer off 0, by no more than a rounding-sized amount.
    assert!(gaussian_epsilon(mu, 0.5) < 1e-12);
    // An RDP curve listing one order α gives Mironov's ε(α) + ln(1/δ)/(α−1) exactly.
    let curve = Rdp::new(vec![5.0], vec![0.3]).unwrap();
    assert_rel(curve.epsilon(delta, Conversion::BunSteinke).unwrap(), 0.3 + l / 4.0, CLOSED, "mironov");
}

/// The exact `cks` optimum is below every grid point and is approached by a fine grid.
#[test]
fn cks_optimum_beats_brute_force_grid() {
    for (rho, delta) in [(1e-6, 1e-12), (0.01, 1e-5), (0.5, 1e-8), (5.0, 1e-3)] {
        let exact = cks_epsilon(rho, delta);
        let orders: Vec<f64> = (0..200_000).map(|i| 1.0 + 1e-4 * 1.0001f64.powi(i)).collect();
        let grid = Zcdp::new(rho).unwrap().to_rdp(&orders).unwrap().epsilon(delta, Conversion::Cks).unwrap();
        assert!(exact <= grid * (1.0 + 1e-12), "exact {exact} above grid {grid}");
        assert_rel(exact, grid, 1e-7, "grid approaches exact");
    }
}

#[test]
fn calibration_round_trips_and_orders_methods() {
    let (eps, delta, k) = (0.5, 1e-5, 100.0);
    let mut sigmas = vec![];
    for m in Conversion::ALL {
        let sigma = calibrate_sigma(ApproxDp::new(eps, delta).unwrap(), k, m).unwrap();
        let got = PrivateGd::new(sigma, 2.0, k).unwrap().epsilon(delta, m).unwrap();
        assert!(got <= eps, "{m}: calibrated run spends {got} > {eps}");
        assert_rel(got, eps, SOLVED, &format!("{m} round trip"));
        // σ = √(k / 2ρ*) with ρ* the reference inverse.
        sigmas.push(sigma);
    }
    // Tighter conversions need less noise for the same guarantee.
    assert!(sigmas[0] > sigmas[1] && sigmas[1] > sigmas[2], "{sigmas:?}");
    let rho_cks = rows("maxrho").into_iter().find(|r| r[0] == 0.5 && r[1] == 1e-5).unwrap()[3];
    assert_rel(sigmas[1], (k / (2.0 * rho_cks)).sqrt(), SOLVED, "cks sigma vs reference rho");
}

// ---- "Never understates": strict comparisons with the exact value at the exact input double.

/// A strict reference row: the first `inputs` fields parsed from text are *inputs*, as the
/// exact doubles the script used; the rest are 21-digit exact results.
fn strict_rows(kind: &str) -> Vec<Vec<f64>> {
    rows(kind)
}

/// `got` never understates the exact `want` (and is within `tol` of it, relatively).
fn assert_never_below(got: f64, want: f64, tol: f64, what: &str) {
    assert!(got >= want, "{what}: got {got:e} < exact {want:e} (understated)");
    assert_rel(got, want, tol, what);
}

/// `got` (an inverse: a budget) never overstates the exact `want`.
fn assert_never_above(got: f64, want: f64, tol: f64, what: &str) {
    assert!(got <= want, "{what}: got {got:e} > exact {want:e} (budget overstated)");
    assert_rel(got, want, tol, what);
}

#[test]
fn forward_conversions_never_understate_epsilon() {
    for r in strict_rows("strict_zcdp") {
        let (rho, delta) = (r[0], r[1]);
        let what = format!("rho={rho:e} delta={delta:e}");
        assert_never_below(bun_steinke_epsilon(rho, delta), r[2], CLOSED, &format!("bun-steinke {what}"));
        let z = Zcdp::new(rho).unwrap();
        assert_never_below(z.epsilon(delta, Conversion::BunSteinke).unwrap(), r[2], CLOSED, &what);
        if r[3] == 0.0 {
            assert!(cks_epsilon(rho, delta) < 1e-12, "cks {what}: {} for an exact 0", cks_epsilon(rho, delta));
        } else {
            assert_never_below(cks_epsilon(rho, delta), r[3], SOLVED, &format!("cks {what}"));
        }
        // μ = √(2ρ) exactly is not a double: the script used the exact real √(2ρ), and
        // gaussian_epsilon is increasing in μ, so the rounded-up μ must give at least r[4].
        let mu = dpgd_accounting::numeric::sqrt_up(2.0 * rho);
        if r[4] == 0.0 {
            assert!(gaussian_epsilon(mu, delta) < 1e-12, "gaussian {what}");
        } else {
            assert_never_below(gaussian_epsilon(mu, delta), r[4], SOLVED, &format!("gaussian-exact {what}"));
            let g = GaussianDp::new(mu).unwrap();
            assert_never_below(g.epsilon(delta, Conversion::GaussianExact).unwrap(), r[4], SOLVED, &what);
        }
    }
}

#[test]
fn gaussian_privacy_profile_never_understates_delta() {
    for r in strict_rows("strict_gdelta") {
        let (mu, eps, want) = (r[0], r[1], r[2]);
        // The margin covers the rounding error of a difference of two nearly equal terms when μ
        // is small (see gaussian_delta's error analysis): within 1e-8 here.
        assert_never_below(gaussian_delta(mu, eps), want, 1e-8, &format!("delta_mu({eps}) at mu={mu}"));
    }
}

#[test]
fn inverses_never_overstate_the_budget() {
    for r in strict_rows("strict_maxrho") {
        let (eps, delta) = (r[0], r[1]);
        for (m, want) in [(Conversion::BunSteinke, r[2]), (Conversion::Cks, r[3]), (Conversion::GaussianExact, r[4])] {
            let got = m.max_rho(eps, delta).unwrap().rho();
            assert_never_above(got, want, SOLVED, &format!("max rho {m} eps={eps} delta={delta:e}"));
        }
    }
}

#[test]
fn rdp_curve_conversions_never_understate() {
    for r in strict_rows("strict_rdp") {
        let (alpha, rdp, delta) = (r[0], r[1], r[2]);
        let curve = Rdp::new(vec![alpha], vec![rdp]).unwrap();
        let what = format!("alpha={alpha} rdp={rdp} delta={delta:e}");
        assert_never_below(
            curve.epsilon(delta, Conversion::BunSteinke).unwrap(),
            r[3],
            CLOSED,
            &format!("mironov {what}"),
        );
        let got = curve.epsilon(delta, Conversion::Cks).unwrap();
        if r[4] == 0.0 {
            assert!(got < 1e-12, "cks {what}: {got}");
        } else {
            assert_never_below(got, r[4], CLOSED, &format!("cks {what}"));
        }
    }
}
