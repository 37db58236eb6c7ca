//! dpgd's own device kernels ([`dpgd::cube`]) against their definitions computed on the host, on
//! every device they run on (wgpu with `--features wgpu`, as `.ci/wgpu-smoke` runs it); on the
//! CPU backends they decline, and the callers use burn's operations (checked here too).

mod common;

use burn::tensor::{Device, Tensor, TensorData};
use common::devices;
use dpgd::cube::{self, ConvGeometry};
use rand::{RngExt, SeedableRng};

fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

#[test]
fn the_kernels_run_on_the_cube_devices_and_decline_elsewhere() {
    let mut ran = 0;
    for d in devices() {
        let rows = Tensor::<2>::ones([2, 3], &d);
        let sum = cube::clip_sum(&rows, &[(0, 1.0)]);
        assert_eq!(sum.is_some(), cube::runs_on(&d), "{d:?}");
        assert_eq!(cube::runs_on(&d), !dpgd::device::is_host(&d), "{d:?}");
        ran += usize::from(sum.is_some());
    }
    // A wgpu build has a device the kernels run on: the tests below are not vacuous there.
    assert_eq!(ran > 0, cfg!(feature = "wgpu"));
}

/// Rows whose scaled values fall on and near half-integers (where rounding half to even and half
/// away from zero differ), subnormal and large values, and a NaN row that is not live.
fn clip_rows(b: usize, width: usize, seed: u64) -> Vec<f32> {
    let mut rng = rng(seed);
    (0..b * width)
        .map(|i| match (i / width, i % 5) {
            (3, _) => f32::NAN,
            (_, 0) => (rng.random_range(-40i32..40) as f32) + 0.5,
            (_, 1) => rng.random_range(-1.0f32..1.0) * 1e-39,
            (_, 2) => rng.random_range(-3.0e4f32..3.0e4),
            _ => rng.random_range(-2.0f32..2.0),
        })
        .collect()
}

/// Σ round_half_even(f32(row·f)) on the host, in i64: the sum the device must give exactly.
fn host_clip_sum(rows: &[f32], width: usize, live: &[(usize, f32)]) -> Vec<i64> {
    let mut sum = vec![0i64; width];
    for &(r, f) in live {
        for (s, &x) in sum.iter_mut().zip(&rows[r * width..(r + 1) * width]) {
            *s += (x * f).round_ties_even() as i64;
        }
    }
    sum
}

#[test]
fn the_clip_sum_is_the_exact_sum_of_the_rounded_products() {
    for d in devices().into_iter().filter(cube::runs_on) {
        for (b, width, seed) in [(5, 7, 1), (150, 1000, 2), (300, 333, 3)] {
            let rows = clip_rows(b, width, seed);
            let tensor = Tensor::<2>::from_data(TensorData::new(rows.clone(), [b, width]), &d);
            let mut rng = rng(seed + 100);
            // Every row but the NaN one, in a shuffled order, each with its own factor; some
            // factors of exactly 1 so that the half-integers stay half-integers.
            let mut live: Vec<(usize, f32)> = (0..b)
                .filter(|&r| r != 3)
                .map(|r| (r, if r % 2 == 0 { 1.0 } else { rng.random_range(0.0f32..3.0) }))
                .collect();
            for i in (1..live.len()).rev() {
                live.swap(i, rng.random_range(0..=i));
            }
            let device = cube::clip_sum(&tensor, &live).expect("the kernel runs on this device");
            let device: Vec<i64> = device.into_data().convert::<i64>().try_to_vec().unwrap();
            assert_eq!(device, host_clip_sum(&rows, width, &live), "{d:?} b {b} width {width}");
            // All rows live in order (the trainer's common case).
            let all: Vec<(usize, f32)> = (0..b).filter(|&r| r != 3).map(|r| (r, 0.75)).collect();
            let device = cube::clip_sum(&tensor, &all).expect("the kernel runs on this device");
            let device: Vec<i64> = device.into_data().convert::<i64>().try_to_vec().unwrap();
            assert_eq!(device, host_clip_sum(&rows, width, &all), "{d:?} b {b} width {width}, in order");
        }
    }
}

/// One case: input `[b, c_in, h, w]`, c_out, kernel, stride, dilation, padding
/// `[(top, bottom), (left, right)]`, groups.
type Case = ([usize; 4], usize, [usize; 2], [usize; 2], [usize; 2], [(usize, usize); 2], usize);

/// Per-example weight gradients by their definition, in f64.
fn host_conv_weight_rows(x: &[f32], delta: &[f32], case: &Case, out: [usize; 2]) -> Vec<f64> {
    let &([b, c_in, h, w], c_out, [kh, kw], [sh, sw], [dh, dw], [(top, _), (left, _)], groups) = case;
    let [ho, wo] = out;
    let (ci, co) = (c_in / groups, c_out / groups);
    let mut rows = vec![0.0f64; b * c_out * ci * kh * kw];
    for n in 0..b {
        for o in 0..c_out {
            for c in 0..ci {
                let channel = (o / co) * ci + c;
                for i in 0..kh {
                    for j in 0..kw {
                        let mut s = 0.0f64;
                        for y in 0..ho {
                            for xo in 0..wo {
                                let (row, col) = (
                                    (y * sh + i * dh) as isize - top as isize,
                                    (xo * sw + j * dw) as isize - left as isize,
                                );
                                if (0..h as isize).contains(&row) && (0..w as isize).contains(&col) {
                                    let d = delta[((n * c_out + o) * ho + y) * wo + xo];
                                    s += f64::from(d)
                                        * f64::from(x[((n * c_in + channel) * h + row as usize) * w + col as usize]);
                                }
                            }
                        }
                        rows[(((n * c_out + o) * ci + c) * kh + i) * kw + j] = s;
                    }
                }
            }
        }
    }
    rows
}

/// The output size along one axis (the dilated kernel fits the padded input in every case).
fn out_len(n: usize, pad: (usize, usize), k: usize, s: usize, d: usize) -> usize {
    (n + pad.0 + pad.1 - d * (k - 1) - 1) / s + 1
}

#[test]
fn the_conv_weight_rows_match_their_definition() {
    const CASES: [Case; 6] = [
        // The Opacus CNN's two convolutions.
        ([3, 1, 28, 28], 16, [8, 8], [2, 2], [1, 1], [(3, 3), (3, 3)], 1),
        ([2, 16, 13, 13], 32, [4, 4], [2, 2], [1, 1], [(0, 0), (0, 0)], 1),
        // Rectangular kernel, asymmetric padding, groups, dilation, stride above the kernel.
        ([2, 4, 7, 9], 6, [3, 2], [1, 2], [1, 1], [(1, 2), (0, 1)], 2),
        ([2, 2, 9, 8], 4, [3, 3], [2, 1], [2, 3], [(2, 2), (1, 1)], 1),
        ([1, 4, 5, 5], 4, [1, 1], [3, 3], [1, 1], [(0, 1), (1, 0)], 4),
        ([2, 3, 6, 6], 2, [5, 5], [1, 1], [1, 1], [(2, 2), (2, 2)], 1),
    ];
    for d in devices().into_iter().filter(cube::runs_on) {
        for (k, case) in CASES.iter().enumerate() {
            check_conv(&d, case, k as u64);
        }
    }
}

fn check_conv(d: &Device, case: &Case, seed: u64) {
    let &([b, c_in, h, w], c_out, kernel, stride, dilation, pad, groups) = case;
    let out =
        [out_len(h, pad[0], kernel[0], stride[0], dilation[0]), out_len(w, pad[1], kernel[1], stride[1], dilation[1])];
    let mut rng = rng(seed);
    let x: Vec<f32> = (0..b * c_in * h * w).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let delta: Vec<f32> = (0..b * c_out * out[0] * out[1]).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let geometry = ConvGeometry { kernel, stride, dilation, pad_before: [pad[0].0, pad[1].0], groups };
    let xt = Tensor::<4>::from_data(TensorData::new(x.clone(), [b, c_in, h, w]), d);
    let dt = Tensor::<4>::from_data(TensorData::new(delta.clone(), [b, c_out, out[0], out[1]]), d);
    let rows = cube::conv_weight_rows(&xt, &dt, geometry).expect("the kernel runs on this device");
    let k = c_in / groups * kernel[0] * kernel[1];
    assert_eq!(rows.dims(), [b, c_out, k], "{case:?}");
    let rows: Vec<f32> = rows.into_data().convert::<f32>().try_to_vec().unwrap();
    let expected = host_conv_weight_rows(&x, &delta, case, out);
    // f32 sums of at most ho·wo products of values in [-1, 1]: within ho·wo·2⁻²³ of the exact sum.
    let tolerance = (out[0] * out[1]) as f64 * 2f64.powi(-22);
    for (i, (&got, &want)) in rows.iter().zip(&expected).enumerate() {
        assert!((f64::from(got) - want).abs() <= tolerance, "{case:?} entry {i}: {got} against {want}");
    }
}

#[test]
fn the_block_square_sums_bound_the_exact_squared_norm() {
    use dpgd::clip::kept::{norm_block, norm_roundings, squared_norm_bound};
    for d in devices().into_iter().filter(cube::runs_on) {
        // Widths that are and are not whole numbers of blocks (the kernel then reads zeros).
        for (b, n, seed) in [(3, 10, 1), (4, 1000, 2), (2, 26_010, 3)] {
            let mut rng = rng(seed);
            let mut rows: Vec<f32> =
                (0..b * n).map(|_| rng.random_range(-1.0f32..1.0) * 10f32.powi(rng.random_range(-4..4))).collect();
            rows[0] = 1e4; // one large value ahead of small ones
            let k = norm_block(n);
            let width = n.div_ceil(k) * k;
            let tensor = Tensor::<2>::from_data(TensorData::new(rows.clone(), [b, n]), &d);
            let sums = cube::block_square_sums(&tensor, k, width).expect("the kernel runs on this device");
            assert_eq!(sums.dims(), [b, width / k]);
            let sums: Vec<f32> = sums.into_data().convert::<f32>().try_to_vec().unwrap();
            for (r, row) in rows.chunks_exact(n).enumerate() {
                let exact: f64 = row.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
                let device: f64 = sums[r * width / k..(r + 1) * width / k].iter().map(|&s| f64::from(s)).sum();
                // The blocks' sums added in f64 (exactly enough): the bound from the device's
                // blocks alone, with one rounding fewer than the trainer allows for.
                let bound = squared_norm_bound(device, n, norm_roundings(n, k) - 1);
                assert!(bound >= exact, "{d:?} n {n} row {r}: bound {bound} below the exact {exact}");
                assert!(bound <= exact * (1.0 + 1e-3), "{d:?} n {n} row {r}: bound {bound} far above {exact}");
            }
        }
    }
}

/// The clip's kernel sums f32 rows only: rows of another type are left to burn's operations
/// (converting them to f32 would round values up past what their norm bound covers).
#[test]
fn the_clip_sum_declines_rows_that_are_not_f32() {
    for d in devices().into_iter().filter(cube::runs_on) {
        // Some adapters have no f64: nothing to check there.
        let Ok(rows) = std::panic::catch_unwind(|| Tensor::<2>::ones([2, 3], (&d, burn::tensor::DType::F64))) else {
            continue;
        };
        assert!(cube::clip_sum(&rows, &[(0, 1.0)]).is_none(), "{d:?}");
    }
}
