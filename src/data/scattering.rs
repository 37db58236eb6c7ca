//! The 2-D scattering transform (Mallat 2012; Bruna & Mallat 2013) with Morlet wavelets, as
//! Kymatio's `Scattering2D` computes it (Andreux et al. 2020): fixed, data-independent features
//! that made linear models the most accurate private MNIST classifiers (Tramèr & Boneh 2021).
//!
//! For an image `x` (one channel), scale `J` and `L` angles:
//! - `S0 = (x ⋆ φ_J) ↓ 2^J`,
//! - `S1[j1, θ1] = (|x ⋆ ψ_{j1,θ1}| ⋆ φ_J) ↓ 2^J` for `j1 < J`,
//! - `S2[j1, θ1, j2, θ2] = (||x ⋆ ψ_{j1,θ1}| ⋆ ψ_{j2,θ2}| ⋆ φ_J) ↓ 2^J` for `j1 < j2 < J`,
//!
//! so `1 + J·L + L²·J(J−1)/2` channels (81 for `J = 2, L = 8`), each of
//! `(H_pad/2^J − 2) × (W_pad/2^J − 2)` values (7 × 7 for 28 × 28 images). The convolutions are
//! products in the Fourier domain after reflect-padding the image to `H_pad = 2^J·(⌊H/2^J⌋ + 2)`;
//! a coefficient is subsampled as soon as its band allows (periodising its spectrum), and one
//! coefficient is cut from each border at the end. The filter bank follows Kymatio's
//! construction (Morlet wavelets `σ = 0.8·2^j`, `ξ = 3π/4·2^−j`, slant `4/L`, summed over 5 × 5
//! periods; a Gaussian low-pass `σ = 0.8·2^(J−1)`; each filter's spectrum masked and periodised
//! for the coarser resolutions), so the values agree with Kymatio's within floating-point error
//! (tested against values Kymatio 0.3 computed, `tests/data/scattering-kymatio.json`; Kymatio
//! divides by 2·3.1415 where this divides by 2π, a 3·10⁻⁵ relative difference).
//!
//! Privacy: the transform has no parameters learnt from data, and each example's features are a
//! function of that example alone, so the neighbouring relation and every sensitivity bound of
//! the training on them are those of training on the images.
//!
//! Written here rather than taken from a crate: no Rust crate computes the scattering transform
//! (Kymatio is Python); the FFTs are `rustfft`'s.
//!
//! # References
//! - Mallat 2012, *Group invariant scattering*, <https://arxiv.org/abs/1101.2286>
//! - Bruna & Mallat 2013, *Invariant scattering convolution networks*, <https://arxiv.org/abs/1203.1513>
//! - Andreux et al. 2020, *Kymatio: scattering transforms in Python*, <https://arxiv.org/abs/1812.11214>
//! - Tramèr & Boneh 2021, *Differentially private learning needs better features (or much more
//!   data)*, <https://arxiv.org/abs/2011.11660>

use std::f64::consts::PI;
use std::sync::Arc;

use rustfft::num_complex::Complex64;
use rustfft::{Fft, FftPlanner};

use crate::error::{Error, Result};

/// The largest scale accepted (`2^J` must divide the padded image; 6 means 64-pixel blocks).
pub const MAX_J: usize = 6;
/// The most angles accepted.
pub const MAX_ANGLES: usize = 16;

/// A scattering transform for images of one size, with its filters built once.
pub struct Scattering2d {
    j: usize,
    angles: usize,
    input: (usize, usize),
    padded: (usize, usize),
    /// Padding before the first row and column.
    pad: (usize, usize),
    /// φ's spectrum at resolutions 0..J (resolution r is `padded / 2^r`).
    phi: Vec<Vec<f64>>,
    /// ψ's, j-major then angle, with their spectra at the resolutions they are used at.
    psi: Vec<Wavelet>,
    /// 2-D FFT plans at resolutions 0..=J.
    plans: Vec<Plan2d>,
}

impl std::fmt::Debug for Scattering2d {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scattering2d")
            .field("j", &self.j)
            .field("angles", &self.angles)
            .field("input", &self.input)
            .finish()
    }
}

struct Wavelet {
    j: usize,
    levels: Vec<Vec<f64>>,
}

struct Plan2d {
    rows: usize,
    cols: usize,
    row: [Arc<dyn Fft<f64>>; 2],
    col: [Arc<dyn Fft<f64>>; 2],
}

impl Scattering2d {
    /// The transform of `rows × cols` images at scale `j` with `angles` orientations.
    ///
    /// # Errors
    /// [`Error::Config`] naming `data.features.j` or `data.features.angles`: `j` not in
    /// `1..=MAX_J`, images smaller than `2^j` on a side (no coefficient would remain), or
    /// `angles` not in `1..=MAX_ANGLES`.
    pub fn new(rows: usize, cols: usize, j: usize, angles: usize) -> Result<Self> {
        if !(1..=MAX_J).contains(&j) {
            return Err(Error::config("data.features.j", format!("{j} is not a scale in 1..={MAX_J}")));
        }
        if rows < 1 << j || cols < 1 << j {
            return Err(Error::config(
                "data.features.j",
                format!("images of {rows}x{cols} are smaller than 2^j = {} on a side: use a smaller j", 1 << j),
            ));
        }
        if !(1..=MAX_ANGLES).contains(&angles) {
            return Err(Error::config("data.features.angles", format!("{angles} is not in 1..={MAX_ANGLES}")));
        }
        let padded_len = |n: usize| ((n + (1 << j)) / (1 << j) + 1) << j;
        let padded = (padded_len(rows), padded_len(cols));
        let pad = ((padded.0 - rows) / 2, (padded.1 - cols) / 2);
        let mut planner = FftPlanner::new();
        let plans = (0..=j)
            .map(|r| {
                let (h, w) = (padded.0 >> r, padded.1 >> r);
                Plan2d {
                    rows: h,
                    cols: w,
                    row: [planner.plan_fft_forward(w), planner.plan_fft_inverse(w)],
                    col: [planner.plan_fft_forward(h), planner.plan_fft_inverse(h)],
                }
            })
            .collect::<Vec<_>>();
        let spectrum = |g: Vec<Complex64>| {
            let mut g = g;
            fft2(&plans[0], &mut g, false);
            g.iter().map(|c| c.re).collect::<Vec<f64>>()
        };
        let (m, n) = padded;
        let phi_full = spectrum(gabor(m, n, 0.8 * f64::from(1u32 << (j - 1)), 0.0, 0.0, 1.0));
        let phi = (0..j).map(|r| periodize(&phi_full, m, n, r)).collect();
        let slant = 4.0 / angles as f64;
        let first_angle = (angles as f64 - angles as f64 / 2.0 - 1.0).trunc();
        let mut psi = Vec::with_capacity(j * angles);
        for scale in 0..j {
            for theta in 0..angles {
                let sigma = 0.8 * f64::from(1u32 << scale);
                let angle = (first_angle - theta as f64) * PI / angles as f64;
                let xi = 0.75 * PI / f64::from(1u32 << scale);
                let full = spectrum(morlet(m, n, sigma, angle, xi, slant));
                let levels = (0..(scale + 1).min((j - 1).max(1))).map(|r| periodize(&full, m, n, r)).collect();
                psi.push(Wavelet { j: scale, levels });
            }
        }
        Ok(Self { j, angles, input: (rows, cols), padded, pad, phi, psi, plans })
    }

    /// Channels out per input channel: `1 + J·L + L²·J(J−1)/2`.
    #[must_use]
    pub fn channels(&self) -> usize {
        1 + self.j * self.angles + self.angles * self.angles * self.j * (self.j - 1) / 2
    }

    /// The height and width of each output channel.
    #[must_use]
    pub fn out_size(&self) -> (usize, usize) {
        ((self.padded.0 >> self.j) - 2, (self.padded.1 >> self.j) - 2)
    }

    /// Values out per input channel.
    #[must_use]
    pub fn out_len(&self) -> usize {
        let (h, w) = self.out_size();
        self.channels() * h * w
    }

    /// The coefficients of one single-channel image (`rows × cols`, row-major) into `out`
    /// ([`out_len`](Self::out_len) values, channel-major: S0, then every S1, then every S2, in
    /// Kymatio's order).
    ///
    /// # Panics
    /// If `image` or `out` has the wrong length (a programming error: the sizes are the
    /// transform's own).
    pub fn transform(&self, image: &[f64], out: &mut [f32]) {
        assert_eq!(image.len(), self.input.0 * self.input.1, "image of the wrong size");
        assert_eq!(out.len(), self.out_len(), "output of the wrong size");
        let (m, n) = self.padded;
        let mut u0 = vec![Complex64::default(); m * n];
        for (r, row) in u0.chunks_exact_mut(n).enumerate() {
            let src = reflect(r as isize - self.pad.0 as isize, self.input.0);
            for (c, v) in row.iter_mut().enumerate() {
                let col = reflect(c as isize - self.pad.1 as isize, self.input.1);
                *v = Complex64::new(image[src * self.input.1 + col], 0.0);
            }
        }
        fft2(&self.plans[0], &mut u0, false);
        let plane = self.out_size().0 * self.out_size().1;
        self.low_pass(&u0, 0, &mut out[..plane]);
        // Kymatio's order: S0, every S1, then every S2 (n1-major); each S2 is low-passed as soon
        // as it is computed, so at most one second-order spectrum is held at a time.
        let (first, second) = out.split_at_mut((1 + self.psi.len()) * plane);
        let mut s2 = second.chunks_exact_mut(plane);
        for (w1, s1) in self.psi.iter().zip(first[plane..].chunks_exact_mut(plane)) {
            let u1 = self.band(&u0, 0, &w1.levels[0], w1.j);
            self.low_pass(&u1, w1.j, s1);
            for w2 in self.psi.iter().filter(|w| w.j > w1.j) {
                let u2 = self.band(&u1, w1.j, &w2.levels[w1.j], w2.j);
                if let Some(o) = s2.next() {
                    self.low_pass(&u2, w2.j, o);
                }
            }
        }
    }

    /// `fft(|ifft((u ⋆ ψ) ↓ 2^(to − at))|)`: a spectrum at resolution `at` filtered by `psi` (at
    /// that resolution), subsampled to resolution `to`, its modulus, back in Fourier.
    fn band(&self, u: &[Complex64], at: usize, psi: &[f64], to: usize) -> Vec<Complex64> {
        let p = &self.plans[at];
        let filtered: Vec<Complex64> = u.iter().zip(psi).map(|(a, b)| a * b).collect();
        let mut v = subsample(&filtered, p.rows, p.cols, 1 << (to - at));
        let q = &self.plans[to];
        fft2(q, &mut v, true);
        v.iter_mut().for_each(|c| *c = Complex64::new(c.norm(), 0.0));
        fft2(q, &mut v, false);
        v
    }

    /// `ifft((u ⋆ φ) ↓ 2^(J − at))`'s real part without its border, into `out`.
    fn low_pass(&self, u: &[Complex64], at: usize, out: &mut [f32]) {
        let p = &self.plans[at];
        let filtered: Vec<Complex64> = u.iter().zip(&self.phi[at]).map(|(a, b)| a * b).collect();
        let mut v = subsample(&filtered, p.rows, p.cols, 1 << (self.j - at));
        let q = &self.plans[self.j];
        fft2(q, &mut v, true);
        let (h, w) = self.out_size();
        for (r, row) in out.chunks_exact_mut(w).enumerate().take(h) {
            for (c, o) in row.iter_mut().enumerate() {
                *o = v[(r + 1) * q.cols + c + 1].re as f32;
            }
        }
    }
}

/// numpy's `reflect` padding: the index into a row of `n` values that position `i` mirrors
/// (without repeating the edge), for any `i`.
fn reflect(i: isize, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let k = i.rem_euclid(period);
    (if k >= n as isize { period - k } else { k }) as usize
}

/// In-place 2-D FFT of an `h × w` row-major buffer (`inverse`: divided by `h·w`, as numpy's).
fn fft2(p: &Plan2d, buf: &mut [Complex64], inverse: bool) {
    let (h, w) = (p.rows, p.cols);
    let k = usize::from(inverse);
    p.row[k].process(buf);
    let mut col = vec![Complex64::default(); h];
    for c in 0..w {
        for r in 0..h {
            col[r] = buf[r * w + c];
        }
        p.col[k].process(&mut col);
        for r in 0..h {
            buf[r * w + c] = col[r];
        }
    }
    if inverse {
        let scale = 1.0 / (h * w) as f64;
        buf.iter_mut().for_each(|c| *c *= scale);
    }
}

/// The spectrum of the signal subsampled by `k` in space: the mean of the `k × k` aliases.
fn subsample(u: &[Complex64], h: usize, w: usize, k: usize) -> Vec<Complex64> {
    if k == 1 {
        return u.to_vec();
    }
    let (hk, wk) = (h / k, w / k);
    let mut out = vec![Complex64::default(); hk * wk];
    for (r, row) in u.chunks_exact(w).enumerate() {
        for (c, v) in row.iter().enumerate() {
            out[(r % hk) * wk + c % wk] += v;
        }
    }
    let scale = 1.0 / (k * k) as f64;
    out.iter_mut().for_each(|c| *c *= scale);
    out
}

/// A filter's spectrum (`m × n`) at resolution `res`: the frequencies above the coarser grid's
/// band masked out, the rest summed onto the `m/2^res × n/2^res` grid (Kymatio's
/// `periodize_filter_fft`).
fn periodize(x: &[f64], m: usize, n: usize, res: usize) -> Vec<f64> {
    let (mr, nr) = (m >> res, n >> res);
    let masked = |len: usize, i: usize| {
        let (start, width) = (len >> (res + 1), len - (len >> res));
        (start..start + width).contains(&i)
    };
    let mut crop = vec![0.0; mr * nr];
    for r in 0..m {
        for c in 0..n {
            if res > 0 && (masked(m, r) || masked(n, c)) {
                continue;
            }
            crop[(r % mr) * nr + c % nr] += x[r * n + c];
        }
    }
    crop
}

/// A Gabor filter in space on an `m × n` grid, summed over 5 × 5 periods:
/// `g(u) = exp(−uᵀ·R·diag(1, slant²)·R⁻¹·u / (2σ²) + i·ξ·(cos θ, sin θ)·u) / (2πσ²/slant)`.
fn gabor(m: usize, n: usize, sigma: f64, theta: f64, xi: f64, slant: f64) -> Vec<Complex64> {
    let (c, s) = (theta.cos(), theta.sin());
    // R·D·R⁻¹ with R the rotation by θ and D = diag(1, slant²), over 2σ².
    let d = slant * slant;
    let k = 2.0 * sigma * sigma;
    let (a, b, e) = ((c * c + d * s * s) / k, (c * s - d * s * c) / k, (s * s + d * c * c) / k);
    let mut g = vec![Complex64::default(); m * n];
    for ex in -2i64..=2 {
        for ey in -2i64..=2 {
            for r in 0..m {
                let x = (r as i64 + ex * m as i64) as f64;
                for col in 0..n {
                    let y = (col as i64 + ey * n as i64) as f64;
                    let arg = Complex64::new(-(a * x * x + 2.0 * b * x * y + e * y * y), x * xi * c + y * xi * s);
                    g[r * n + col] += arg.exp();
                }
            }
        }
    }
    let norm = 2.0 * PI * sigma * sigma / slant;
    g.iter_mut().for_each(|v| *v /= norm);
    g
}

/// A Morlet wavelet: a Gabor filter minus its envelope times the constant that makes its sum 0.
fn morlet(m: usize, n: usize, sigma: f64, theta: f64, xi: f64, slant: f64) -> Vec<Complex64> {
    let wave = gabor(m, n, sigma, theta, xi, slant);
    let envelope = gabor(m, n, sigma, theta, 0.0, slant);
    let k = wave.iter().sum::<Complex64>() / envelope.iter().sum::<Complex64>();
    wave.iter().zip(&envelope).map(|(w, g)| w - k * g).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_kymatios() {
        let s = Scattering2d::new(28, 28, 2, 8).unwrap();
        assert_eq!((s.channels(), s.out_size(), s.padded, s.pad), (81, (7, 7), (36, 36), (4, 4)));
        let s = Scattering2d::new(32, 20, 3, 4).unwrap();
        assert_eq!((s.channels(), s.out_size()), (1 + 12 + 16 * 3, (4, 2)));
    }

    #[test]
    fn reflect_is_numpys() {
        // np.pad(np.arange(4), 5, mode="reflect")
        let want = [1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2];
        let got: Vec<usize> = (-5..9).map(|i| reflect(i, 4)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn refuses_what_it_cannot_compute() {
        for (r, j, l, field) in [(28, 0, 8, "j"), (3, 2, 8, "j"), (28, 7, 8, "j"), (28, 2, 0, "angles")] {
            let e = Scattering2d::new(r, r, j, l).unwrap_err().to_string();
            assert!(e.contains(&format!("data.features.{field}")), "{e}");
        }
    }

    #[test]
    fn wavelets_have_zero_mean_and_phi_unit_mass() {
        let s = Scattering2d::new(28, 28, 2, 8).unwrap();
        // The spectrum at frequency 0 is the filter's sum in space.
        assert!((s.phi[0][0] - 1.0).abs() < 1e-6, "{}", s.phi[0][0]);
        for w in &s.psi {
            assert!(w.levels[0][0].abs() < 1e-9, "{}", w.levels[0][0]);
        }
    }

    #[test]
    fn a_constant_image_has_only_s0() {
        let s = Scattering2d::new(16, 16, 2, 4).unwrap();
        let mut out = vec![0.0; s.out_len()];
        s.transform(&[0.7; 256], &mut out);
        let plane = 4 * 4;
        assert!(out[..plane].iter().all(|v| (v - 0.7).abs() < 1e-5), "{:?}", &out[..plane]);
        assert!(out[plane..].iter().all(|v| v.abs() < 1e-6));
    }
}
