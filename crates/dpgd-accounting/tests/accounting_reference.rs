//! Every accounting formula against values computed independently with mpmath at 60 digits
//! by `tests/reference/accounting_refs.py` (golden-section search instead of the
//! first-order condition, mpmath's ncdf, Opacus's RDP formula); its output is
//! `tests/reference/accounting_refs.txt`, parsed here.

use dpgd_accounting::convert::{bun_steinke_epsilon, cks_epsilon, gaussian_delta, gaussian_epsilon};
use dpgd_accounting::{ApproxDp, Conversion, GaussianDp, PrivateGd, Rdp, ToApproxDp, Zcdp, calibrate_sigma};

const REFS: &str = include_str!("reference/accounting_refs.txt");

/// Closed forms: relative error ≤ 1e-9. Solved quantities: ≤ 1e-6 (we get far better).
const CLOSED: f64 = 1e-9;
const SOLVED: f64 = 1e-6;

fn rows(kind: &str) -> Vec<Vec<f64>> {
    let rows: Vec<Vec<f64>> = REFS
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(kind))
        .map(|l| l.split_whitespace().skip(1).map(|x| x.parse().unwrap()).collect())
        .collect();
    assert!(!rows.is_empty(), "no reference rows of kind {kind}");
    rows
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
    assert_eq!(gaussian_epsilon(mu, 0.5), 0.0);
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
