//! One safe wrapper over the `gemm` crate's single-threaded f32 matrix product, with
//! arbitrary row/column strides so transposed operands cost nothing.

/// A matrix view: element (r, c) is at `offset + r·rs + c·cs` of its slice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

/// Row-major with `cols` columns.
pub(crate) const fn row_major(cols: usize) -> Layout {
    Layout { rs: cols, cs: 1 }
}

/// The transpose of a row-major matrix with `cols` columns (i.e. column-major).
pub(crate) const fn transposed(cols: usize) -> Layout {
    Layout { rs: 1, cs: cols }
}

fn span(rows: usize, cols: usize, l: Layout) -> usize {
    if rows == 0 || cols == 0 { 0 } else { (rows - 1) * l.rs + (cols - 1) * l.cs + 1 }
}

/// `c[m×n] = a[m×k] · b[k×n]`, or `c += a·b` when `accumulate`. Runs on the calling thread
/// (callers parallelise over examples).
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    c: &mut [f32],
    lc: Layout,
    accumulate: bool,
    a: &[f32],
    la: Layout,
    b: &[f32],
    lb: Layout,
) {
    assert!(span(m, n, lc) <= c.len() && span(m, k, la) <= a.len() && span(k, n, lb) <= b.len(), "gemm out of bounds");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.iter_mut().for_each(|x| *x = 0.0);
        }
        return;
    }
    // SAFETY: the assertion above keeps every accessed element inside its slice; `c` is
    // exclusively borrowed and does not alias `a` or `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            lc.cs as isize,
            lc.rs as isize,
            accumulate,
            a.as_ptr(),
            la.cs as isize,
            la.rs as isize,
            b.as_ptr(),
            lb.cs as isize,
            lb.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_naive_product_with_strides() {
        let (m, n, k) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.5 - 3.0).collect();
        let bt: Vec<f32> = (0..n * k).map(|i| (i as f32).sin()).collect(); // b stored transposed
        let mut c = vec![1.0f32; m * n];
        sgemm(m, n, k, &mut c, row_major(n), true, &a, row_major(k), &bt, transposed(k));
        for i in 0..m {
            for j in 0..n {
                let want: f32 = 1.0 + (0..k).map(|l| a[i * k + l] * bt[j * k + l]).sum::<f32>();
                assert!((c[i * n + j] - want).abs() < 1e-5);
            }
        }
    }
}
