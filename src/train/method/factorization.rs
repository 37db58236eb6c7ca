//! BandMF's correlation matrix optimised for the run's workload (`privacy.factorization =
//! "optimized"`): the b coefficients c of the b-banded lower-triangular Toeplitz C, at unit norm,
//! that minimise the total squared error of the noise the T iterates follow.
//!
//! **The objective.** The iterates follow the workload A, the T × T lower-triangular Toeplitz
//! matrix of aₖ = Σⱼ≤ₖ βʲ (the prefix sums at momentum β = 0). With noise C⁻¹z released at each
//! step, the iterates carry A·C⁻¹·z, whose total squared error is σ²C²·‖A C⁻¹‖_F² per
//! coordinate (Denisov, McMahan, Rush, Smith & Thakurta 2022, the matrix mechanism's error).
//! A·C⁻¹ is Toeplitz with first column h = a * r, r the power series of 1/c(z) (so
//! ‖A C⁻¹‖_F² = Σₖ (T − k)·hₖ²), and every column of C has norm at most ‖c‖ = 1, which is all the
//! privacy argument of BandMF uses (its proof, in `band_mf.rs` and `band_mf_filtered.rs`, holds
//! for any such c): C is public, a function of T, b and β alone, never of the data.
//!
//! **The method.** Projected gradient descent on the unit sphere from the banded square root
//! ([`coefficients_for`], Kalinin & Lampert 2024), with a backtracking step. The
//! gradient is exact: ∂hₖ/∂cⱼ = −gₖ₋ⱼ with g = a * r * r, and r * r is the series of 1/c(z)², so
//! each evaluation costs O(T·b). It is deterministic (only +, ×, ÷ and √ in a fixed order), so
//! a run's C is the same on every resume and every machine, and `privacy.json` records it.
//!
//! **What it buys.** With momentum 0.9 the banded root is within 0.6 % of the optimum for
//! b ≤ 8 at T = 586; without momentum the optimum cuts the error by 9–19 % for b = 2–8 (tested:
//! the optimum never exceeds the root's error, and for b = 2 it is the best of a fine scan of the
//! whole circle, computed by dense matrix algebra).

use crate::train::config::{Factorization, Resolved};

/// C's Toeplitz coefficients for `bands` bands and heavy-ball momentum β: the first b of the
/// square root of the workload the iterates follow — θₜ = θ₀ − η·Σₛ aₜ₋ₛ·ĝₛ with
/// aₖ = (1 − β^{k+1})/(1 − β) (the prefix sums for β = 0, whose root is Fichtenberger et al.'s
/// ∏ⱼ₌₁ᵏ (2j − 1)/(2j)) — by the power series r₀ = √a₀, rₖ = (aₖ − Σ_{j=1}^{k−1} rⱼ·rₖ₋ⱼ)/(2r₀),
/// then scaled to unit ℓ2 norm (a hair below it for b > 1, so that the squares as stored add
/// up to at most 1 whatever the rounding; the noise grows by 2⁻⁴⁰ of itself). Any such C is as
/// private as any other: the workload only decides how well the noise cancels.
#[must_use]
pub fn coefficients_for(bands: usize, momentum: f64) -> Vec<f64> {
    if bands <= 1 {
        return vec![1.0]; // exactly unit norm (and DP-SGD's noise, bit for bit)
    }
    let beta = if (0.0..1.0).contains(&momentum) { momentum } else { 0.0 };
    let a: Vec<f64> = (0..bands).map(|k| (0..=k).map(|j| beta.powi(j as i32)).sum()).collect();
    let mut r: Vec<f64> = Vec::with_capacity(bands);
    r.push(a[0].sqrt());
    for k in 1..bands {
        let cross: f64 = (1..k).map(|j| r[j] * r[k - j]).sum();
        r.push((a[k] - cross) / (2.0 * r[0]));
    }
    let norm = r.iter().map(|x| x * x).sum::<f64>().sqrt();
    r.iter().map(|x| x / norm * (1.0 - 2f64.powi(-40))).collect()
}

/// The run's coefficients for `bands` bands: the workload's banded root, with
/// `privacy.factorization = "optimized"` the banded Toeplitz C of least error for its T steps
/// ([`optimized`]), with `"identity"` the one coefficient 1 (independent noise).
pub(super) fn coefficients_of(cfg: &Resolved, bands: usize) -> Vec<f64> {
    let momentum = cfg.config().train.momentum;
    match cfg.config().privacy.factorization {
        Factorization::Root => coefficients_for(bands, momentum),
        Factorization::Optimized => optimized(bands, momentum, cfg.worst_case_steps()),
        Factorization::Identity => coefficients_for(1, momentum),
    }
}

/// The most steps the objective is evaluated over: beyond, the coefficients are those of this
/// horizon (the error of a longer run is dominated by the same stationary tail).
const MAX_HORIZON: usize = 16_384;

/// The optimised coefficients for `bands` bands, momentum `momentum` (outside [0, 1): none) and
/// `steps` steps, at norm just below 1 (as the root's: every column's squared norm stays at most
/// 1 in the floats used).
#[must_use]
pub fn optimized(bands: usize, momentum: f64, steps: usize) -> Vec<f64> {
    let root = coefficients_for(bands, momentum);
    if bands <= 1 {
        return root;
    }
    let beta = if (0.0..1.0).contains(&momentum) { momentum } else { 0.0 };
    let t = steps.clamp(bands, MAX_HORIZON);
    let mut c = unit(&root);
    let mut value = error(&c, beta, t);
    let mut eta = 0.1;
    for _ in 0..2_000 {
        let g = gradient(&c, beta, t);
        // The gradient's part along the sphere.
        let along: f64 = g.iter().zip(&c).map(|(g, c)| g * c).sum();
        let tangent: Vec<f64> = g.iter().zip(&c).map(|(g, c)| g - along * c).collect();
        let size = tangent.iter().map(|x| x * x).sum::<f64>().sqrt();
        if size <= 1e-15 * value.max(1e-300) {
            break;
        }
        let mut improved = None;
        while eta > 1e-18 {
            let step: Vec<f64> = c.iter().zip(&tangent).map(|(c, d)| c - eta * d / size).collect();
            let next = unit(&step);
            let v = error(&next, beta, t);
            if next[0] > 0.0 && v < value {
                improved = Some((next, v));
                break;
            }
            eta /= 2.0;
        }
        let Some((next, v)) = improved else { break };
        let gain = (value - v) / value;
        (c, value) = (next, v);
        eta *= 2.0;
        if gain < 1e-13 {
            break;
        }
    }
    c.iter().map(|x| x * (1.0 - 2f64.powi(-40))).collect()
}

/// `c` at unit norm.
fn unit(c: &[f64]) -> Vec<f64> {
    let norm = c.iter().map(|x| x * x).sum::<f64>().sqrt();
    c.iter().map(|x| x / norm).collect()
}

/// The first `t` terms of the power series of 1/p(z), for a polynomial p with p₀ ≠ 0.
fn inverse_series(p: &[f64], t: usize) -> Vec<f64> {
    let mut r = Vec::with_capacity(t);
    for k in 0..t {
        let cross: f64 = (1..p.len().min(k + 1)).map(|j| p[j] * r[k - j]).sum();
        r.push(if k == 0 { 1.0 / p[0] } else { -cross / p[0] });
    }
    r
}

/// The first `t` terms of a * x, a the workload's series 1/((1 − z)(1 − βz)): two running sums.
fn workload_times(x: &[f64], beta: f64) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    let (mut geometric, mut total) = (0.0, 0.0);
    for &v in x {
        geometric = beta * geometric + v;
        total += geometric;
        out.push(total);
    }
    out
}

/// ‖A C⁻¹‖_F² / T over `t` steps: Σₖ (t − k)·hₖ² with h = a * (1/c).
fn error(c: &[f64], beta: f64, t: usize) -> f64 {
    let h = workload_times(&inverse_series(c, t), beta);
    h.iter().enumerate().map(|(k, x)| (t - k) as f64 * x * x).sum::<f64>() / t as f64
}

/// The gradient of [`error`] in c: ∂/∂cⱼ = −2/T·Σₖ (t − k)·hₖ·gₖ₋ⱼ with g = a * (1/c²).
fn gradient(c: &[f64], beta: f64, t: usize) -> Vec<f64> {
    let h = workload_times(&inverse_series(c, t), beta);
    let square: Vec<f64> = (0..2 * c.len() - 1)
        .map(|k| (0..c.len()).filter(|&i| k >= i && k - i < c.len()).map(|i| c[i] * c[k - i]).sum())
        .collect();
    let g = workload_times(&inverse_series(&square, t), beta);
    let weighted: Vec<f64> = h.iter().enumerate().map(|(k, x)| (t - k) as f64 * x).collect();
    (0..c.len()).map(|j| -2.0 / t as f64 * (j..t).map(|k| weighted[k] * g[k - j]).sum::<f64>()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ‖A C⁻¹‖_F²/T by dense matrices: C built band by band, C⁻¹ column by column by forward
    /// substitution, A's rows as the workload's sums — none of the series code above.
    fn dense_error(c: &[f64], beta: f64, t: usize) -> f64 {
        let cm = |i: usize, j: usize| if i >= j && i - j < c.len() { c[i - j] } else { 0.0 };
        let a = |i: usize, j: usize| if i >= j { (0..=i - j).map(|k| beta.powi(k as i32)).sum() } else { 0.0 };
        // C⁻¹ column by column: columns[j][i] = (C⁻¹)ᵢⱼ.
        let mut columns = vec![vec![0.0; t]; t];
        for (col, column) in columns.iter_mut().enumerate() {
            for row in 0..t {
                let rhs = if row == col { 1.0 } else { 0.0 };
                let s: f64 = (0..row).map(|k| cm(row, k) * column[k]).sum();
                column[row] = (rhs - s) / cm(row, row);
            }
        }
        let mut total = 0.0;
        for i in 0..t {
            for column in &columns {
                let v: f64 = (0..t).map(|k| a(i, k) * column[k]).sum();
                total += v * v;
            }
        }
        total / t as f64
    }

    /// The series objective is the dense one, and the gradient its finite differences.
    #[test]
    fn the_objective_and_its_gradient_are_the_matrix_mechanisms() {
        for (c, beta) in [(vec![0.8, 0.5, 0.33], 0.0), (vec![0.7, 0.6, 0.3, 0.2], 0.9)] {
            let c = unit(&c);
            let (series, dense) = (error(&c, beta, 24), dense_error(&c, beta, 24));
            assert!((series - dense).abs() <= 1e-10 * dense, "{series} vs {dense}");
            let g = gradient(&c, beta, 24);
            for j in 0..c.len() {
                let mut up = c.clone();
                let mut down = c.clone();
                up[j] += 1e-6;
                down[j] -= 1e-6;
                let numeric = (error(&up, beta, 24) - error(&down, beta, 24)) / 2e-6;
                assert!((numeric - g[j]).abs() <= 1e-5 * numeric.abs().max(1.0), "c_{j}: {numeric} vs {}", g[j]);
            }
        }
    }

    /// Never worse than the root; without momentum 9–19 % less error for 2–8 bands at T = 586,
    /// with momentum 0.9 within 1 %; unit norm with the root's margin; one band is DP-SGD's.
    #[test]
    fn the_optimum_improves_on_the_root_where_it_can() {
        for (beta, bands, least_gain) in [(0.0, 2, 0.08), (0.0, 4, 0.14), (0.0, 8, 0.18), (0.9, 4, 0.0)] {
            let root = coefficients_for(bands, beta);
            let best = optimized(bands, beta, 586);
            let (r, b) = (error(&unit(&root), beta, 586), error(&unit(&best), beta, 586));
            assert!(b <= r && 1.0 - b / r >= least_gain, "beta {beta}, {bands} bands: {r} -> {b}");
            assert!(beta == 0.0 || 1.0 - b / r < 0.01, "with momentum the root is near the optimum: {r} -> {b}");
            let sq: f64 = best.iter().map(|x| x * x).sum();
            assert!(sq <= 1.0 - bands as f64 * f64::EPSILON, "{sq}");
            assert!(best.iter().all(|x| x.is_finite()) && best[0] > 0.0, "{best:?}");
            assert_eq!(best, optimized(bands, beta, 586), "deterministic");
        }
        assert_eq!(optimized(1, 0.0, 100), vec![1.0]);
    }

    /// For two bands c = (cos θ, sin θ): the optimum is the best of a scan of θ over the whole
    /// half-circle (c₀ > 0), each point evaluated by dense matrices.
    #[test]
    fn two_bands_are_the_best_of_a_scan_of_the_circle() {
        let t = 48;
        for beta in [0.0, 0.5] {
            let best = unit(&optimized(2, beta, t));
            let found = dense_error(&best, beta, t);
            let scanned = (1..2_000)
                .map(|i| -std::f64::consts::FRAC_PI_2 + std::f64::consts::PI * f64::from(i) / 2_000.0)
                .map(|theta| dense_error(&[theta.cos(), theta.sin()], beta, t))
                .fold(f64::INFINITY, f64::min);
            assert!(found <= scanned * (1.0 + 1e-6), "beta {beta}: {found} vs the scan's {scanned}");
        }
    }
}
