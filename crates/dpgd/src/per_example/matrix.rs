//! Small typed matrix views over f32 slices (faer's style: a view knows its shape and strides,
//! `.t()` transposes for free) and one product over the `gemm` crate's single-threaded kernel.

/// A read-only matrix view: element (r, c) is `data[r·rs + c·cs]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

/// A mutable matrix view.
#[derive(Debug)]
pub(crate) struct MatMut<'a> {
    data: &'a mut [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

/// The number of elements a view of this shape and strides spans.
fn span(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    if rows == 0 || cols == 0 { 0 } else { (rows - 1) * rs + (cols - 1) * cs + 1 }
}

impl<'a> MatRef<'a> {
    /// The row-major `rows × cols` matrix at the start of `data`.
    pub(crate) fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self { data, rows, cols, rs: cols, cs: 1 }
    }
    /// The transpose (no copy).
    pub(crate) fn t(self) -> Self {
        Self { rows: self.cols, cols: self.rows, rs: self.cs, cs: self.rs, ..self }
    }
}

impl<'a> MatMut<'a> {
    /// The row-major `rows × cols` matrix at the start of `data`.
    pub(crate) fn row_major(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        Self { data, rows, cols, rs: cols, cs: 1 }
    }
}

/// `c = a · b`, or `c += a · b` when `accumulate`, on the calling thread (callers parallelise
/// over examples).
///
/// Panics if the shapes do not match or a view does not fit its slice: every call site builds
/// its views from a compiled network's shapes, never from input, so this is an internal
/// invariant, checked because the kernel below is unsafe.
pub(crate) fn matmul(c: MatMut<'_>, a: MatRef<'_>, b: MatRef<'_>, accumulate: bool) {
    let (m, n, k) = (c.rows, c.cols, a.cols);
    assert!(
        a.rows == m && b.rows == k && b.cols == n,
        "matmul shapes: {m}x{n} = {}x{} · {}x{}",
        a.rows,
        a.cols,
        b.rows,
        b.cols
    );
    assert!(
        span(m, n, c.rs, c.cs) <= c.data.len()
            && span(m, k, a.rs, a.cs) <= a.data.len()
            && span(k, n, b.rs, b.cs) <= b.data.len(),
        "matmul view out of bounds"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.data.iter_mut().for_each(|x| *x = 0.0);
        }
        return;
    }
    // SAFETY: the assertions above keep every accessed element inside its slice; `c` is
    // exclusively borrowed and so does not alias `a` or `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.data.as_mut_ptr(),
            c.cs as isize,
            c.rs as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
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
    fn matches_naive_product_with_transposes() {
        let (m, n, k) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.5 - 3.0).collect();
        let bt: Vec<f32> = (0..n * k).map(|i| (i as f32).sin()).collect(); // b stored transposed
        let mut c = vec![1.0f32; m * n];
        matmul(MatMut::row_major(&mut c, m, n), MatRef::row_major(&a, m, k), MatRef::row_major(&bt, n, k).t(), true);
        for i in 0..m {
            for j in 0..n {
                let want: f32 = 1.0 + (0..k).map(|l| a[i * k + l] * bt[j * k + l]).sum::<f32>();
                assert!((c[i * n + j] - want).abs() < 1e-5);
            }
        }
    }
}
