//! Small typed matrix views over f32 slices (faer's style: a view knows its shape and strides,
//! `.t()` transposes for free), one single-threaded product (a register-tiled AVX-512 kernel for
//! the engine's small products, the `gemm` crate's kernels otherwise) and a transpose.

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
    /// The `rows × cols` matrix whose element (r, c) is `data[r·rs + c·cs]` (e.g. rows that
    /// are windows of one buffer, `rs` apart).
    pub(crate) fn strided(data: &'a [f32], (rows, cols): (usize, usize), (rs, cs): (usize, usize)) -> Self {
        Self { data, rows, cols, rs, cs }
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
    /// The `rows × cols` matrix whose element (r, c) is `data[r·rs + c]` (every `rs`-th row of
    /// a row-major matrix, say).
    pub(crate) fn rows_apart(data: &'a mut [f32], (rows, cols): (usize, usize), rs: usize) -> Self {
        Self { data, rows, cols, rs, cs: 1 }
    }
}

/// The most values of `b` for which a product takes the register-tiled AVX-512 kernel
/// ([`avx512`]): 1 MiB, so that `b` stays in the core's L2 cache while every row tile of `a`
/// streams over it (the kernel does no cache blocking). Larger products go to `gemm`.
const TILED_MAX_B: usize = 1 << 18;

/// The most values of a `b` with non-unit column stride (a transposed weight matrix) that the
/// tiled kernel copies row-major on each call (32 KiB): a 16- or 32-channel filter bank of a few
/// hundred weights per channel, copied once per micro-batch. A larger transposed `b` (a linear
/// layer's 512×32 weights, used on a few rows) goes to `gemm`: at the default chunk the copy per
/// call would cost more than the product.
const PACKED_MAX_B: usize = 1 << 13;

/// The most rows of `a` for which a product by a large transposed `b` (a linear layer's forward,
/// `x·Wᵀ`, over a micro-batch) takes the dot-product kernel ([`avx512::dots`]), which reads all
/// of `W` once per four rows of `a`. Timed alone on one core of a Zen 4 EPYC (GFLOP/s, the
/// kernel against `gemm`): 4×32×512 103 / 100, 64×32×512 103 / 64, 256×32×512 102 / 97,
/// 4×256×784 103 / 22, 64×256×784 106 / 77, 1024×256×784 102 / 111.
const DOTS_MAX_M: usize = 256;

/// `c = a · b`, or `c += a · b` when `accumulate`, on the calling thread (callers parallelise
/// over examples).
///
/// On a processor with AVX-512 and a `b` that fits in L2 ([`TILED_MAX_B`]), the product runs in
/// [`avx512`]'s kernel: the engine's products are small and skinny (a micro-batch of im2col
/// rows times a 16- or 32-channel filter bank, one example's 16×196 by 196×64 weight gradient),
/// where `gemm` spends much of its time packing and in edge kernels. A few rows (at most
/// [`DOTS_MAX_M`]) times a larger transposed `b` whose rows are contiguous (a linear layer's
/// forward at the fast engine's micro-batch) run as dot products of contiguous rows
/// ([`avx512::dots`]): nothing is packed or allocated. Otherwise, and on other processors, in
/// `gemm`'s kernels. Each path accumulates in its own fixed order, so a result
/// is reproducible bit for bit on one machine.
///
/// Panics if the shapes do not match or a view does not fit its slice: every call site builds
/// its views from a compiled network's shapes, never from input, so this is an internal
/// invariant, checked because the kernels below are unsafe.
pub(crate) fn matmul(c: MatMut<'_>, a: MatRef<'_>, b: MatRef<'_>, accumulate: bool) {
    check_shapes(&c, &a, &b);
    let (m, n, k) = (c.rows, c.cols, a.cols);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.data.iter_mut().for_each(|x| *x = 0.0);
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if c.cs == 1 && avx512::available() {
        if k.saturating_mul(n) <= if b.cs == 1 { TILED_MAX_B } else { PACKED_MAX_B } {
            avx512::matmul(c, a, b, accumulate);
            return;
        }
        if a.cs == 1 && b.rs == 1 && m <= DOTS_MAX_M {
            avx512::dots(c, a, b, accumulate);
            return;
        }
    }
    gemm_matmul(c, a, b, accumulate);
}

/// The shape and bounds checks every product path relies on.
fn check_shapes(c: &MatMut<'_>, a: &MatRef<'_>, b: &MatRef<'_>) {
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
}

/// [`matmul`] in the `gemm` crate's kernels (shapes checked, `m`, `n`, `k` > 0).
fn gemm_matmul(c: MatMut<'_>, a: MatRef<'_>, b: MatRef<'_>, accumulate: bool) {
    check_shapes(&c, &a, &b);
    let (m, n, k) = (c.rows, c.cols, a.cols);
    // SAFETY: `check_shapes` keeps every accessed element inside its slice; `c` is
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

/// `dst[c·rows + r] = src[r·cols + c]`: the `[rows × cols]` row-major `src` transposed into
/// `dst` (activations channel-last ⇄ channel-major). In 16×16 register blocks on a processor
/// with AVX-512 (a strided scalar copy moves about one value per cycle), element by element
/// otherwise; the same values either way. Adds `column[c]` to every value of column `c` of
/// `src` (row `c` of `dst`) when given: a convolution's bias, added as its output goes
/// channel-major (one pass, not two).
pub(crate) fn transpose(src: &[f32], dst: &mut [f32], rows: usize, cols: usize, column: Option<&[f32]>) {
    let len = rows * cols;
    assert!(src.len() >= len && dst.len() >= len, "transpose out of bounds");
    assert!(column.is_none_or(|c| c.len() == cols), "transpose: one addend per column");
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        avx512::transpose(&src[..len], &mut dst[..len], rows, cols, column);
        return;
    }
    for (c, out) in dst[..len].chunks_exact_mut(rows.max(1)).enumerate() {
        let add = column.map_or(0.0, |a| a[c]);
        for (v, &x) in out.iter_mut().zip(src[c..].iter().step_by(cols.max(1))) {
            *v = if column.is_some() { x + add } else { x };
        }
    }
}

/// A register-tiled product for AVX-512 (written by hand: `gemm`, the one pure-Rust GEMM with
/// AVX-512 kernels, packs its operands on every call and runs the engine's 16-row products in
/// edge kernels; `faer` and `matrixmultiply` build on the same approach).
///
/// `c[i, j..j+16·NV]` for `MR` rows `i` lives in `MR × NV` vector registers while the kernel
/// walks `k`: per step, `NV` loads of a row of `b` and `MR` broadcasts of `a[i, p]`, `MR·NV`
/// fused multiply-adds (24 of the 32 registers for the widest tile). Columns come in panels of
/// up to 64; a last partial vector is read and written under a mask, so any `n` works. Rows past
/// `m` in a last tile repeat row `m − 1` of `a` and are never stored.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::{
        __m512, __mmask16, _mm512_add_ps, _mm512_castpd_ps, _mm512_castps_pd, _mm512_fmadd_ps, _mm512_loadu_ps,
        _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps, _mm512_reduce_add_ps, _mm512_set1_ps, _mm512_setzero_ps,
        _mm512_shuffle_f32x4, _mm512_unpackhi_pd, _mm512_unpackhi_ps, _mm512_unpacklo_pd, _mm512_unpacklo_ps,
    };
    use std::cell::RefCell;

    use super::{MatMut, MatRef, check_shapes};
    use crate::simd::first_lanes;

    thread_local! {
        /// `b` copied row-major when a caller passes it with non-unit column stride (a
        /// transposed weight matrix); at most [`super::PACKED_MAX_B`] values per thread when
        /// called through [`super::matmul`].
        static PACKED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    }

    pub(super) use crate::simd::has_avx512f as available;

    /// [`super::matmul`] for `c` with unit column stride, `m`, `n`, `k` > 0, on a processor
    /// with AVX-512F.
    pub(super) fn matmul(c: MatMut<'_>, a: MatRef<'_>, b: MatRef<'_>, accumulate: bool) {
        check_shapes(&c, &a, &b);
        assert!(
            c.cs == 1 && c.rows > 0 && c.cols > 0 && a.cols > 0 && available(),
            "the tiled kernel needs AVX-512F, unit column stride and non-empty shapes"
        );
        let mut run = |b_ptr: *const f32, brs: usize| {
            // SAFETY: AVX-512F is present (checked above); `check_shapes` keeps the accesses
            // of `a`, `c` inside their slices, and `b_ptr`/`brs` address a `k × n` row-major
            // matrix with unit column stride inside its slice (the caller's `b` or the packed
            // copy); masked lanes are never touched; `c` does not alias `a` or `b`.
            unsafe {
                product(
                    Dims { m: c.rows, n: c.cols, k: a.cols },
                    c.data.as_mut_ptr(),
                    c.rs,
                    (a.data.as_ptr(), a.rs, a.cs),
                    (b_ptr, brs),
                    accumulate,
                );
            }
        };
        if b.cs == 1 {
            run(b.data.as_ptr(), b.rs);
            return;
        }
        PACKED.with_borrow_mut(|packed| {
            let (k, n) = (b.rows, b.cols);
            // Every value is overwritten below: resized, never cleared (a fill of the whole
            // buffer per call cost as much as the transpose).
            packed.resize(k * n, 0.0);
            if b.rs == 1 && b.cs == k {
                // The transpose of a row-major n × k matrix (a weight matrix): in 16×16 blocks.
                transpose(&b.data[..n * k], packed, n, k, None);
            } else {
                for (j, col) in (0..n).map(|j| j * b.cs).enumerate() {
                    for (p, x) in packed[j..].iter_mut().step_by(n).enumerate() {
                        *x = b.data[col + p * b.rs];
                    }
                }
            }
            run(packed.as_ptr(), n);
        });
    }

    /// [`super::matmul`] for `c` and `a` with unit column stride and `b` with unit row stride
    /// (the transpose of a row-major `n × k` matrix), non-empty, on a processor with AVX-512F:
    /// each value the dot product of a row of `a` and a row of `bᵀ`, both contiguous, in tiles of
    /// four rows by four columns (16 accumulators of 16 lanes of `k`, the last under a mask), each
    /// summed across its lanes at the end. A value depends only on its own two rows: a row of
    /// `a` past the last in a tile repeats the last and is never stored, likewise a column.
    pub(super) fn dots(c: MatMut<'_>, a: MatRef<'_>, b: MatRef<'_>, accumulate: bool) {
        check_shapes(&c, &a, &b);
        assert!(
            c.cs == 1 && a.cs == 1 && b.rs == 1 && c.rows > 0 && c.cols > 0 && a.cols > 0 && available(),
            "the dot-product kernel needs AVX-512F, contiguous rows and non-empty shapes"
        );
        let d = Dims { m: c.rows, n: c.cols, k: a.cols };
        // SAFETY: AVX-512F is present; `check_shapes` keeps row r < m of `a` (k values from
        // r·a.rs), row j < n of `bᵀ` (k values from j·b.cs) and value (r, j) of `c` inside their
        // slices; masked lanes are not accessed; `c` does not alias `a` or `b`.
        unsafe { dot_tiles(d, c.data.as_mut_ptr(), c.rs, (a.data.as_ptr(), a.rs), (b.data.as_ptr(), b.cs), accumulate) }
    }

    /// [`dots`] in a function compiled for AVX-512F.
    #[target_feature(enable = "avx512f")]
    unsafe fn dot_tiles(
        d: Dims,
        c: *mut f32,
        crs: usize,
        (a, ars): (*const f32, usize),
        (w, wrs): (*const f32, usize),
        accumulate: bool,
    ) {
        let chunks = d.k.div_ceil(16);
        let tail = first_lanes(d.k - 16 * (chunks - 1));
        for i0 in (0..d.m).step_by(4) {
            let rows = (d.m - i0).min(4);
            let mut ar = [a; 4];
            for (r, p) in ar.iter_mut().enumerate() {
                // SAFETY: row i0 + min(r, rows − 1) < m of `a`.
                *p = unsafe { a.add((i0 + r.min(rows - 1)) * ars) };
            }
            for j0 in (0..d.n).step_by(4) {
                let cols = (d.n - j0).min(4);
                let mut wr = [w; 4];
                for (s, p) in wr.iter_mut().enumerate() {
                    // SAFETY: row j0 + min(s, cols − 1) < n of `bᵀ`.
                    *p = unsafe { w.add((j0 + s.min(cols - 1)) * wrs) };
                }
                let mut acc = [[_mm512_setzero_ps(); 4]; 4];
                for q in 0..chunks {
                    let (mut av, mut wv) = ([_mm512_setzero_ps(); 4], [_mm512_setzero_ps(); 4]);
                    for r in 0..4 {
                        // SAFETY: the lanes of chunk q inside the rows' k values (the last
                        // chunk under its mask).
                        unsafe {
                            if q + 1 < chunks {
                                av[r] = _mm512_loadu_ps(ar[r].add(16 * q));
                                wv[r] = _mm512_loadu_ps(wr[r].add(16 * q));
                            } else {
                                av[r] = _mm512_maskz_loadu_ps(tail, ar[r].add(16 * q));
                                wv[r] = _mm512_maskz_loadu_ps(tail, wr[r].add(16 * q));
                            }
                        }
                    }
                    for r in 0..4 {
                        for s in 0..4 {
                            acc[r][s] = _mm512_fmadd_ps(av[r], wv[s], acc[r][s]);
                        }
                    }
                }
                for (r, acc_r) in acc.iter().enumerate().take(rows) {
                    for (s, &sum) in acc_r.iter().enumerate().take(cols) {
                        // SAFETY: value (i0 + r, j0 + s) of `c`.
                        unsafe {
                            let out = c.add((i0 + r) * crs + j0 + s);
                            let sum = _mm512_reduce_add_ps(sum);
                            *out = if accumulate { *out + sum } else { sum };
                        }
                    }
                }
            }
        }
    }

    /// [`super::transpose`] of exactly `rows × cols` values, on a processor with AVX-512F: blocks
    /// of up to 16×16, the rows and columns past the matrix's edge masked out.
    pub(super) fn transpose(src: &[f32], dst: &mut [f32], rows: usize, cols: usize, column: Option<&[f32]>) {
        assert!(src.len() == rows * cols && dst.len() == rows * cols && available(), "transpose: sizes or AVX-512F");
        assert!(column.is_none_or(|c| c.len() == cols), "transpose: one addend per column");
        // SAFETY: AVX-512F is present (checked above).
        unsafe { transpose_blocks(src, dst, rows, cols, column) }
    }

    /// [`transpose`] in a function compiled for AVX-512F (so that the intrinsics inline).
    #[target_feature(enable = "avx512f")]
    fn transpose_blocks(src: &[f32], dst: &mut [f32], rows: usize, cols: usize, column: Option<&[f32]>) {
        for r0 in (0..rows).step_by(16) {
            let nr = (rows - r0).min(16);
            for c0 in (0..cols).step_by(16) {
                let nc = (cols - c0).min(16);
                // SAFETY: columns c0..c0 + nc of the addends exist (one per column).
                let add = column.map(|a| unsafe { _mm512_maskz_loadu_ps(first_lanes(nc), a.as_ptr().add(c0)) });
                // SAFETY: block rows r0..r0 + nr and columns c0..c0 + nc lie inside both
                // matrices (both `rows × cols`), and the masks confine every access to them:
                // rows past nr and columns past nc have an empty mask (never accessed, so their
                // addresses, which may lie past the end, are formed with wrapping arithmetic).
                // Every loop runs 16 times, so that it unrolls and the block stays in registers.
                unsafe {
                    let mut v = [_mm512_setzero_ps(); 16];
                    for (i, x) in v.iter_mut().enumerate() {
                        let mask = if i < nr { first_lanes(nc) } else { 0 };
                        *x = _mm512_maskz_loadu_ps(mask, src.as_ptr().wrapping_add((r0 + i) * cols + c0));
                        if let Some(add) = add {
                            *x = _mm512_add_ps(*x, add);
                        }
                    }
                    transpose16(&mut v);
                    for (j, &x) in v.iter().enumerate() {
                        let mask = if j < nc { first_lanes(nr) } else { 0 };
                        _mm512_mask_storeu_ps(dst.as_mut_ptr().wrapping_add((c0 + j) * rows + r0), mask, x);
                    }
                }
            }
        }
    }

    /// Transposes 16 rows of 16 values in registers: pairs of rows interleaved, then pairs of
    /// pairs, then 128-bit lanes twice.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn transpose16(r: &mut [__m512; 16]) {
        let mut t = [_mm512_setzero_ps(); 16];
        for i in 0..8 {
            // [a0 b0 a1 b1 | a4 b4 a5 b5 | …], [a2 b2 a3 b3 | …]
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        for i in 0..4 {
            // [a0 b0 c0 d0 | a4 b4 c4 d4 | a8 … | a12 …], then columns 1, 2, 3 likewise
            let (lo, hi) = (_mm512_castps_pd(t[4 * i]), _mm512_castps_pd(t[4 * i + 2]));
            r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi));
            r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi));
            let (lo, hi) = (_mm512_castps_pd(t[4 * i + 1]), _mm512_castps_pd(t[4 * i + 3]));
            r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi));
            r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi));
        }
        for i in 0..4 {
            // [abcd i | abcd 8+i | efgh i | efgh 8+i], [abcd 4+i | abcd 12+i | efgh 4+i | …]
            t[i] = _mm512_shuffle_f32x4::<0x88>(r[i], r[4 + i]);
            t[4 + i] = _mm512_shuffle_f32x4::<0xDD>(r[i], r[4 + i]);
            t[8 + i] = _mm512_shuffle_f32x4::<0x88>(r[8 + i], r[12 + i]);
            t[12 + i] = _mm512_shuffle_f32x4::<0xDD>(r[8 + i], r[12 + i]);
        }
        for i in 0..4 {
            // column i: [abcd i | efgh i | ijkl i | mnop i]
            r[i] = _mm512_shuffle_f32x4::<0x88>(t[i], t[8 + i]);
            r[8 + i] = _mm512_shuffle_f32x4::<0xDD>(t[i], t[8 + i]);
            r[4 + i] = _mm512_shuffle_f32x4::<0x88>(t[4 + i], t[12 + i]);
            r[12 + i] = _mm512_shuffle_f32x4::<0xDD>(t[4 + i], t[12 + i]);
        }
    }

    /// A product's sizes: `c[m × n] = a[m × k] · b[k × n]`.
    #[derive(Clone, Copy)]
    struct Dims {
        m: usize,
        n: usize,
        k: usize,
    }

    /// The product over column panels of up to 64, each with the widest tile that fits.
    #[target_feature(enable = "avx512f")]
    unsafe fn product(
        d: Dims,
        c: *mut f32,
        crs: usize,
        a: (*const f32, usize, usize),
        b: (*const f32, usize),
        accumulate: bool,
    ) {
        let mut j = 0;
        while j < d.n {
            let width = (d.n - j).min(64);
            let vectors = width.div_ceil(16);
            let tail = width - 16 * (vectors - 1);
            let mask: __mmask16 = first_lanes(tail);
            // SAFETY: columns j..j + width of `b` and `c` exist (width ≤ n − j).
            let (cj, bj) = unsafe { (c.add(j), (b.0.add(j), b.1)) };
            let panel = Panel { k: d.k, c: cj, crs, a, b: bj, mask, accumulate };
            // SAFETY: as for `product`; each tile stays within the panel's columns.
            unsafe {
                match vectors {
                    4 => panel.rows::<6, 4, 4>(d.m),
                    3 => panel.rows::<8, 4, 3>(d.m),
                    2 => panel.rows::<12, 6, 2>(d.m),
                    _ => panel.rows::<14, 7, 1>(d.m),
                }
            }
            j += width;
        }
    }

    /// One column panel: `NV` vectors wide, the last under `mask`.
    struct Panel {
        k: usize,
        c: *mut f32,
        crs: usize,
        a: (*const f32, usize, usize),
        b: (*const f32, usize),
        mask: __mmask16,
        accumulate: bool,
    }

    impl Panel {
        /// Rows in tiles of `MR`, a last short tile in one of `MH` (≤ `MR`) when it fits.
        #[target_feature(enable = "avx512f")]
        unsafe fn rows<const MR: usize, const MH: usize, const NV: usize>(&self, m: usize) {
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(MR);
                // SAFETY: rows i..i + rows of `a` and `c` exist.
                unsafe {
                    if rows <= MH {
                        self.tile::<MH, NV>(i, rows);
                    } else {
                        self.tile::<MR, NV>(i, rows);
                    }
                }
                i += rows;
            }
        }

        /// Rows `i..i + rows` (`rows ≤ MR`) of the panel.
        #[target_feature(enable = "avx512f")]
        #[inline]
        unsafe fn tile<const MR: usize, const NV: usize>(&self, i: usize, rows: usize) {
            let (a, ars, acs) = self.a;
            let (b, brs) = self.b;
            let mut acc = [[_mm512_setzero_ps(); NV]; MR];
            let mut ar = [a; MR];
            for (r, p) in ar.iter_mut().enumerate() {
                // SAFETY: row i + min(r, rows − 1) < m of `a`.
                *p = unsafe { a.add((i + r.min(rows - 1)) * ars) };
            }
            for p in 0..self.k {
                // SAFETY: row p < k of `b`; the last vector reads only the mask's lanes.
                let bp = unsafe { b.add(p * brs) };
                let mut bv = [_mm512_setzero_ps(); NV];
                for (v, x) in bv.iter_mut().enumerate() {
                    *x = unsafe {
                        if v + 1 == NV {
                            _mm512_maskz_loadu_ps(self.mask, bp.add(16 * v))
                        } else {
                            _mm512_loadu_ps(bp.add(16 * v))
                        }
                    };
                }
                for r in 0..MR {
                    // SAFETY: element (row, p) of `a`.
                    let x = _mm512_set1_ps(unsafe { *ar[r].add(p * acs) });
                    for v in 0..NV {
                        acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
                    }
                }
            }
            for (r, acc_r) in acc.iter().enumerate() {
                if r >= rows {
                    break;
                }
                // SAFETY: row i + r < m of `c`; the last vector touches only the mask's lanes.
                let cr = unsafe { self.c.add((i + r) * self.crs) };
                for (v, &sum) in acc_r.iter().enumerate() {
                    let mask = if v + 1 == NV { self.mask } else { u16::MAX };
                    unsafe {
                        let out: __m512 = if self.accumulate {
                            _mm512_add_ps(sum, _mm512_maskz_loadu_ps(mask, cr.add(16 * v)))
                        } else {
                            sum
                        };
                        _mm512_mask_storeu_ps(cr.add(16 * v), mask, out);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both product paths against a naive product, over shapes with partial tiles and
    /// partial vectors, strided and transposed operands, overwriting and accumulating.
    #[test]
    fn both_paths_match_a_naive_product() {
        type Path = fn(MatMut<'_>, MatRef<'_>, MatRef<'_>, bool);
        let mut paths: Vec<(&str, Path)> = vec![("gemm", gemm_matmul), ("dispatch", matmul)];
        #[cfg(target_arch = "x86_64")]
        if avx512::available() {
            paths.push(("avx512", avx512::matmul));
        }
        // The dot-product kernel takes only a transposed `b`.
        #[cfg(target_arch = "x86_64")]
        let dots = avx512::available().then_some(("dots", avx512::dots as Path));
        for (m, n, k) in [
            (1, 1, 1),
            (5, 7, 3),
            (16, 64, 196),
            (13, 16, 64),
            (400, 256, 32),
            (7, 33, 5),
            (20, 81, 9),
            (3, 150, 2),
            // a linear layer's forward at the fast engine's micro-batch (the dispatch's dot
            // products), and one with every tile and lane partial
            (4, 32, 512),
            (6, 33, 300),
        ] {
            let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 23) as f32 * 0.25 - 2.0).collect();
            let b: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 19) as f32 * 0.5 - 4.0).collect();
            #[cfg(target_arch = "x86_64")]
            let all = paths.iter().chain(&dots);
            #[cfg(not(target_arch = "x86_64"))]
            let all = paths.iter();
            for (name, path) in all {
                for (transposed_b, accumulate) in [(false, false), (true, false), (false, true), (true, true)] {
                    if *name == "dots" && !transposed_b {
                        continue;
                    }
                    // b stored as itself or as its transpose
                    let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
                    let bv = if transposed_b { MatRef::row_major(&bt, n, k).t() } else { MatRef::row_major(&b, k, n) };
                    let mut c = vec![1.5f32; m * n];
                    path(MatMut::row_major(&mut c, m, n), MatRef::row_major(&a, m, k), bv, accumulate);
                    for i in 0..m {
                        for j in 0..n {
                            let dot: f32 = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
                            let want = dot + if accumulate { 1.5 } else { 0.0 };
                            let got = c[i * n + j];
                            assert!(
                                (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                                "{name} {m}x{n}x{k} t={transposed_b} acc={accumulate} at ({i},{j}): {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// Both transpose paths, over sizes with partial blocks in each direction.
    #[test]
    fn transpose_matches_the_definition() {
        for (rows, cols) in [(1, 1), (16, 16), (196, 16), (25, 32), (32, 25), (3, 40), (17, 33), (0, 5)] {
            let src: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let want: Vec<f32> = (0..rows * cols).map(|i| src[(i % rows.max(1)) * cols + i / rows.max(1)]).collect();
            let mut got = vec![-1.0; rows * cols];
            transpose(&src, &mut got, rows, cols, None);
            assert_eq!(got, want, "{rows}x{cols}");
            // with one addend per column of `src`
            let column: Vec<f32> = (0..cols).map(|c| 0.25 - c as f32).collect();
            let want_added: Vec<f32> = want.iter().enumerate().map(|(i, &v)| v + column[i / rows.max(1)]).collect();
            let mut added = vec![-1.0; rows * cols];
            transpose(&src, &mut added, rows, cols, Some(&column));
            assert_eq!(added, want_added, "{rows}x{cols} adding");
            #[cfg(target_arch = "x86_64")]
            if avx512::available() {
                let mut got = vec![-1.0; rows * cols];
                avx512::transpose(&src, &mut got, rows, cols, None);
                assert_eq!(got, want, "{rows}x{cols} (AVX-512)");
                avx512::transpose(&src, &mut got, rows, cols, Some(&column));
                assert_eq!(got, want_added, "{rows}x{cols} adding (AVX-512)");
            }
        }
    }

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
