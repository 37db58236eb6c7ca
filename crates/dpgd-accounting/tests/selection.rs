//! Private selection ([PS22, Thm 2 and Thm 6]) against an independent recomputation at 50
//! digits (`reference/private_selection.py`, mpmath), and K's sampler against its mean.
//!
//! [PS22]: https://arxiv.org/abs/2110.03620

// The references are printed to 17 significant digits, as the script gives them.
#![allow(clippy::excessive_precision)]

use dpgd_accounting::selection::{MAX_MEAN, Repetitions, delta_of};
use dpgd_accounting::{Conversion, Rdp, ToApproxDp};

const ORDERS: [f64; 8] = [1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 32.0, 64.0];

fn zcdp(rho: f64) -> Rdp {
    Rdp::new(ORDERS.to_vec(), ORDERS.iter().map(|a| rho * a).collect()).unwrap()
}

/// Every value at or above the reference, and within 10⁻¹² of it.
fn matches(got: &Rdp, reference: [f64; 8], case: &str) {
    for ((&a, &g), r) in got.orders().iter().zip(got.epsilons()).zip(reference) {
        assert!(g >= r && g <= r * (1.0 + 1e-12), "{case} at order {a}: {g} against the reference {r}");
    }
}

#[test]
fn the_truncated_negative_binomial_bound_matches_an_independent_recomputation() {
    let geometric = Repetitions::TruncatedNegativeBinomial { eta: 1.0, gamma: 0.1 };
    matches(
        &geometric.rdp(&zcdp(0.05)).unwrap(),
        [
            5.9558164592366028,
            3.6782313662425571,
            2.5769388197455343,
            2.1012925464970228,
            2.0045870008190894,
            2.2291519461147811,
            2.9499232117321903,
            4.5121952429785756,
        ],
        "geometric",
    );
    let logarithmic = Repetitions::TruncatedNegativeBinomial { eta: 0.0, gamma: 0.05 };
    matches(
        &logarithmic.rdp(&zcdp(0.05)).unwrap(),
        [
            4.4939670917972324,
            2.6717168129957406,
            1.7980916735949948,
            1.4362791038946218,
            1.3883594311658906,
            1.647616552781015,
            2.3840552528652647,
            3.9537879671910979,
        ],
        "logarithmic",
    );
    let below_zero = Repetitions::TruncatedNegativeBinomial { eta: -0.5, gamma: 0.01 };
    matches(
        &below_zero.rdp(&zcdp(0.2)).unwrap(),
        [
            4.5700132030756596,
            2.9652651108372344,
            2.3128910647180218,
            2.2867040416584154,
            2.7040524603471556,
            4.1741668914147042,
            7.3155088925419841,
            13.687576512126403,
        ],
        "eta = -0.5",
    );
    assert!((logarithmic.mean() - 6.342355813211347).abs() < 1e-12);
    assert!((below_zero.mean() - 5.5).abs() < 1e-12);
}

#[test]
fn the_poisson_bound_matches_an_independent_recomputation() {
    let poisson = Repetitions::poisson(10.0).unwrap();
    matches(
        &poisson.rdp(&zcdp(0.05)).unwrap(),
        [
            4.6828627381493296,
            2.4656490131706783,
            1.7411575289905833,
            1.7377503009471584,
            2.0342596615966115,
            2.6736683924380093,
            3.5510337586233476,
            5.1743345626370218,
        ],
        "Poisson mean 10",
    );
    matches(
        &Repetitions::poisson(3.0).unwrap().rdp(&zcdp(0.5)).unwrap(),
        [
            3.6267950344509807,
            3.1179679743402517,
            3.4084470585635775,
            4.2773617435513113,
            5.7285149587585733,
            9.6999706741269803,
            17.689058879429194,
            33.684340363546015,
        ],
        "Poisson mean 3",
    );
}

#[test]
fn the_search_costs_more_than_one_run_and_grows_with_its_mean() {
    let one = zcdp(0.02);
    let eps = |r: &Repetitions| r.rdp(&one).unwrap().epsilon(1e-5, Conversion::Cks).unwrap();
    let single = one.epsilon(1e-5, Conversion::Cks).unwrap();
    let mut last = single;
    for mean in [2.0, 5.0, 20.0, MAX_MEAN] {
        let r = Repetitions::negative_binomial_with_mean(1.0, mean).unwrap();
        assert!((r.mean() - mean).abs() < 1e-9 * mean, "{} for {mean}", r.mean());
        let e = eps(&r);
        assert!(e > last, "mean {mean}: {e} after {last}");
        last = e;
    }
    assert!(eps(&Repetitions::poisson(10.0).unwrap()) > single);
}

#[test]
fn k_is_drawn_with_the_distributions_mean_and_never_below_its_support() {
    for r in [
        Repetitions::negative_binomial_with_mean(1.0, 10.0).unwrap(),
        Repetitions::negative_binomial_with_mean(0.0, 4.0).unwrap(),
        Repetitions::negative_binomial_with_mean(-0.5, 3.0).unwrap(),
        Repetitions::poisson(7.0).unwrap(),
    ] {
        // The inverse CDF at the midpoints of a fine grid of u: its average is E[K].
        let n = 200_000;
        let draws: Vec<u64> = (0..n).map(|i| r.sample((i as f64 + 0.5) / n as f64)).collect();
        let mean = draws.iter().sum::<u64>() as f64 / n as f64;
        assert!((mean - r.mean()).abs() < 0.01 * r.mean(), "{r:?}: {mean} against {}", r.mean());
        let least = if matches!(r, Repetitions::Poisson { .. }) { 0 } else { 1 };
        assert_eq!(*draws.iter().min().unwrap(), least, "{r:?}");
        // The walk ends even at the top of [0, 1).
        assert!(r.sample(1.0 - f64::EPSILON) <= dpgd_accounting::selection::MAX_DRAW);
    }
}

#[test]
fn delta_of_inverts_the_cks_conversion() {
    let curve = zcdp(0.1);
    let eps = curve.epsilon(1e-6, Conversion::Cks).unwrap();
    let delta = delta_of(&curve, eps);
    assert!(delta <= 1e-6 * (1.0 + 1e-9) && delta > 0.5e-6, "{delta}");
    assert_eq!(delta_of(&curve, 0.0).min(1.0), delta_of(&curve, 0.0));
}

#[test]
fn bad_parameters_are_refused_by_name() {
    let err = |r: dpgd_accounting::Result<Repetitions>| r.unwrap_err().to_string();
    assert!(err(Repetitions::negative_binomial_with_mean(-1.0, 5.0)).contains("eta"));
    assert!(err(Repetitions::negative_binomial_with_mean(1.0, 1.0)).contains("mean"));
    assert!(err(Repetitions::negative_binomial_with_mean(1.0, 1e6)).contains("mean"));
    assert!(err(Repetitions::poisson(0.0)).contains("mean"));
    assert!(err(Repetitions::poisson(f64::NAN)).contains("mean"));
    let bad = Repetitions::TruncatedNegativeBinomial { eta: 1.0, gamma: 1.5 };
    assert!(bad.rdp(&zcdp(0.1)).unwrap_err().to_string().contains("gamma"));
    assert!(Rdp::pointwise_max(&[]).is_err());
    let other = Rdp::new(vec![7.0], vec![1.0]).unwrap();
    assert!(Rdp::pointwise_max(&[zcdp(0.1), other]).unwrap_err().to_string().contains("order"));
}

#[test]
fn the_maximum_of_curves_is_taken_at_their_common_orders() {
    let single = Rdp::new(vec![8.0], vec![5.0]).unwrap();
    let max = Rdp::pointwise_max(&[zcdp(0.1), zcdp(0.3), single]).unwrap();
    assert_eq!(max.orders(), &[8.0]);
    assert_eq!(max.epsilons(), &[5.0]);
    let max = Rdp::pointwise_max(&[zcdp(0.1), zcdp(0.3)]).unwrap();
    assert_eq!(max.epsilons(), zcdp(0.3).epsilons());
}

/// P[K > 10⁶] of the truncated negative binomial, independently: 1 minus the first 10⁶
/// probabilities (the ratio form of [PS22, Def. 1]), added with Neumaier's compensated sum.
fn tail_past_a_million(eta: f64, gamma: f64) -> f64 {
    let mut p = (1.0 - gamma) * eta / (gamma.powf(-eta) - 1.0);
    let (mut sum, mut carry) = (0.0f64, 0.0f64);
    for k in 1..=1_000_000u64 {
        let t = sum + p;
        carry += if sum.abs() >= p.abs() { (sum - t) + p } else { (p - t) + sum };
        sum = t;
        p *= (1.0 - gamma) * (k as f64 + eta) / (k as f64 + 1.0);
    }
    1.0 - (sum + carry)
}

/// The sampler's gap to the theorem's distribution covers the mass it cuts: a heavy tail
/// (η < 0) past the walk's last step is not negligible beside a δ of 10⁻⁵ and must be
/// accounted; a light one (η ≥ 0) is.
#[test]
fn the_sampling_gap_covers_the_tail_the_walk_cuts() {
    for (eta, mean) in [(-0.9, 10.0), (-0.9, 100.0), (-0.5, 10.0)] {
        let r = Repetitions::negative_binomial_with_mean(eta, mean).unwrap();
        let Repetitions::TruncatedNegativeBinomial { gamma, .. } = r else { unreachable!() };
        let tail = tail_past_a_million(eta, gamma);
        let gap = r.sampling_gap();
        assert!(gap >= tail && gap <= tail * 1.01 + 1e-9, "eta {eta}, mean {mean}: gap {gap}, tail {tail}");
        if eta == -0.9 {
            assert!(tail > 4e-7, "eta {eta}, mean {mean}: the tail {tail} is a share of delta = 1e-5");
        }
    }
    for r in [Repetitions::negative_binomial_with_mean(1.0, 10.0).unwrap(), Repetitions::poisson(5.0).unwrap()] {
        assert!(r.sampling_gap() < 1e-12, "{r:?}: {}", r.sampling_gap());
    }
}
