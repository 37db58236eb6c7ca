//! The scattering transform against Kymatio 0.3.0, an independent implementation
//! (`tests/data/scattering_reference.py` made `tests/data/scattering-kymatio.json`), and its
//! invariances.

use dpgd::data::scattering::Scattering2d;
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    rows: usize,
    cols: usize,
    j: usize,
    angles: usize,
    image: Vec<f64>,
    shape: [usize; 3],
    coefficients: Vec<f64>,
}

#[derive(Deserialize)]
struct Reference {
    cases: Vec<Case>,
}

#[test]
fn equals_kymatio() {
    let text = include_str!("data/scattering-kymatio.json");
    let reference: Reference = serde_json::from_str(text).unwrap();
    assert_eq!(reference.cases.len(), 3);
    for case in reference.cases {
        let s = Scattering2d::new(case.rows, case.cols, case.j, case.angles).unwrap();
        let (h, w) = s.out_size();
        assert_eq!([s.channels(), h, w], case.shape, "{}x{} J={}", case.rows, case.cols, case.j);
        let mut out = vec![0.0f32; s.out_len()];
        s.transform(&case.image, &mut out);
        // Kymatio's filters are complex64 and divide by 2·3.1415 (a 3·10⁻⁵ relative scale): each
        // coefficient within 10⁻⁴ of its own channel's largest (so the small second-order
        // channels are checked as tightly as S0), plus 10⁻⁷ of the largest overall.
        let plane = h * w;
        let global = case.coefficients.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (c, (got, want)) in out.chunks(plane).zip(case.coefficients.chunks(plane)).enumerate() {
            let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            for (k, (g, x)) in got.iter().zip(want).enumerate() {
                assert!(
                    (f64::from(*g) - x).abs() <= 1e-4 * scale + 1e-7 * global,
                    "case {}x{} J={} L={}: channel {c}, coefficient {k} is {g}, Kymatio's {x}",
                    case.rows,
                    case.cols,
                    case.j,
                    case.angles,
                );
            }
        }
    }
}

#[test]
fn shift_moves_features_little() {
    let (n, j, l) = (32, 2, 8);
    let s = Scattering2d::new(n, n, j, l).unwrap();
    let blob = |dr: f64| -> Vec<f64> {
        (0..n * n)
            .map(|k| {
                let (r, c) = ((k / n) as f64 - 15.0 - dr, (k % n) as f64 - 14.0);
                (-(r * r + c * c) / 18.0).exp() + if (r + 2.0 * c).abs() < 3.0 { 0.5 } else { 0.0 }
            })
            .collect()
    };
    let (mut a, mut b) = (vec![0.0f32; s.out_len()], vec![0.0f32; s.out_len()]);
    s.transform(&blob(0.0), &mut a);
    s.transform(&blob(1.0), &mut b);
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let diff: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x - y).collect();
    let (x, y) = (blob(0.0), blob(1.0));
    let pixel_diff = x.iter().zip(&y).map(|(p, q)| (p - q).powi(2)).sum::<f64>().sqrt();
    let pixel_norm = x.iter().map(|p| p * p).sum::<f64>().sqrt();
    // Features move by a smaller fraction than the pixels do.
    assert!(
        norm(&diff) / norm(&a) < 0.5 * pixel_diff / pixel_norm,
        "{} vs {}",
        norm(&diff) / norm(&a),
        pixel_diff / pixel_norm
    );
}
