//! The loss: softmax cross-entropy per example.

/// Writes ∂ℓ/∂z = softmax(z) − onehot(y) into `d` and returns ℓ = −log softmax(z)_y.
pub(crate) fn softmax_xent_grad(z: &[f32], y: usize, d: &mut [f32]) -> f32 {
    let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for (di, &zi) in d.iter_mut().zip(z) {
        *di = (zi - m).exp();
        sum += *di;
    }
    for di in d[..z.len()].iter_mut() {
        *di /= sum;
    }
    d[y] -= 1.0;
    sum.ln() - (z[y] - m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradient_is_softmax_minus_onehot_and_loss_is_stable() {
        let mut d = [0.0f32; 3];
        let l = softmax_xent_grad(&[1.0, 2.0, 3.0], 2, &mut d);
        let e: Vec<f32> = [1.0f32, 2.0, 3.0].iter().map(|v| v.exp()).collect();
        let s: f32 = e.iter().sum();
        assert!((l - (s.ln() - 3.0)).abs() < 1e-6);
        assert!((d[0] - e[0] / s).abs() < 1e-6 && (d[2] - (e[2] / s - 1.0)).abs() < 1e-6);
        assert!(softmax_xent_grad(&[1000.0, 0.0], 0, &mut d[..2]).is_finite(), "no overflow for large logits");
    }
}
