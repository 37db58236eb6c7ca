//! The kernels of [`super`] in CubeCL, their launches on burn's `CubeBackend`, and their
//! registration with burn's dispatch and kernel fusion (`#[backend_extension]`).

use burn::backend::fusion::custom::TensorSpec;
use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, Dispatch, backend_extension};
use burn::tensor::{DType, Int, Shape, Tensor, TensorData};
use burn_cubecl::CubeBackend;

use super::ConvGeometry;

/// Rows one unit of the clip's kernel adds up ([`super::clip_sum`]).
const ROWS_PER_UNIT: usize = 64;

/// dpgd's operations beyond burn's, on the backends that have them.
#[backend_extension(Cube: cfg(feature = "wgpu"), Fusion: cfg(feature = "wgpu"))]
pub trait DpgdKernels: Backend {
    /// Partial integer sums of the live rows (`[units, width]`, i32): unit u of column j holds
    /// Σ round(factorsᵢ·rows\[positionsᵢ, j\]) over i in u·[`ROWS_PER_UNIT`] .. (u + 1)·[`ROWS_PER_UNIT`].
    #[fusion(meta = partial_sums_spec)]
    fn clip_partial_sums(
        rows: FloatTensor<Self>,
        factors: FloatTensor<Self>,
        positions: IntTensor<Self>,
    ) -> IntTensor<Self>;

    /// [`super::block_square_sums`] with `block` values per block.
    #[fusion(meta = block_sums_spec)]
    fn block_square_sums(rows: FloatTensor<Self>, block: usize) -> FloatTensor<Self>;

    /// [`super::conv_weight_rows`].
    #[fusion(meta = conv_weight_spec)]
    fn conv_weight_rows(x: FloatTensor<Self>, delta: FloatTensor<Self>, geometry: ConvGeometry) -> FloatTensor<Self>;
}

fn units(live: usize) -> usize {
    live.div_ceil(ROWS_PER_UNIT).max(1)
}

fn partial_sums_spec(rows: &TensorSpec, factors: &TensorSpec, _positions: &TensorSpec) -> TensorSpec {
    TensorSpec::new(Shape::new([units(factors.shape[0]), rows.shape[1]]), DType::I32)
}

fn block_sums_spec(rows: &TensorSpec, block: &usize) -> TensorSpec {
    TensorSpec::new(Shape::new([rows.shape[0], rows.shape[1] / block]), rows.dtype)
}

fn conv_weight_spec(x: &TensorSpec, delta: &TensorSpec, geometry: &ConvGeometry) -> TensorSpec {
    TensorSpec::new(conv_weight_shape(&x.shape, &delta.shape, geometry), x.dtype)
}

fn conv_weight_shape(x: &Shape, delta: &Shape, g: &ConvGeometry) -> Shape {
    Shape::new([delta[0], delta[1], x[1] / g.groups.max(1) * g.kernel[0] * g.kernel[1]])
}

pub(super) fn clip_sum(rows: &Tensor<2>, live: &[(usize, f32)]) -> Option<Tensor<1, Int>> {
    let device = rows.device();
    let l = live.len();
    let [b, width] = rows.dims();
    // f32 rows only: a conversion would round values up past what their norm bound covers.
    if rows.dtype() != DType::F32 || live.iter().any(|&(r, _)| r >= b) || i32::try_from(b).is_err() {
        return None;
    }
    // The factors as given, in f32 whatever the device's default float type.
    let factors = TensorData::new(live.iter().map(|&(_, f)| f).collect(), [l]);
    let factors = Tensor::<1>::from_data(factors, (&device, DType::F32));
    let positions: Vec<i32> = live.iter().map(|&(r, _)| r as i32).collect();
    let positions = Tensor::<1, Int>::from_data(TensorData::new(positions, [l]), &device);
    let partial = <Dispatch as DpgdKernels>::clip_partial_sums(
        rows.clone().without_autodiff().into_dispatch(),
        factors.into_dispatch(),
        positions.into_dispatch(),
    );
    let partial = Tensor::<2, Int>::from_dispatch(partial);
    Some(partial.sum_dim(0).reshape([width]))
}

pub(super) fn block_square_sums(rows: &Tensor<2>, block: usize, width: usize) -> Option<Tensor<2>> {
    let [b, n] = rows.dims();
    let rows = rows.clone().without_autodiff();
    // Zeros up to `width` (none where the rows are already that wide, as the trainer's are).
    let rows = if width > n {
        Tensor::cat(vec![rows.clone(), Tensor::zeros([b, width - n], (&rows.device(), rows.dtype()))], 1)
    } else {
        rows
    };
    Some(Tensor::<2>::from_dispatch(<Dispatch as DpgdKernels>::block_square_sums(rows.into_dispatch(), block)))
}

pub(super) fn conv_weight_rows(x: &Tensor<4>, delta: &Tensor<4>, geometry: ConvGeometry) -> Option<Tensor<3>> {
    let ([b, c_in, ..], [db, c_out, ..]) = (x.dims(), delta.dims());
    let groups = geometry.groups.max(1);
    let mut sizes = geometry.kernel.into_iter().chain(geometry.stride).chain(geometry.dilation);
    if b != db || c_in % groups != 0 || c_out % groups != 0 || x.dtype() != delta.dtype() || sizes.any(|n| n == 0) {
        return None;
    }
    let out = <Dispatch as DpgdKernels>::conv_weight_rows(
        x.clone().without_autodiff().into_dispatch(),
        delta.clone().without_autodiff().into_dispatch(),
        geometry,
    );
    Some(Tensor::<3>::from_dispatch(out))
}

impl DpgdKernels for CubeBackend {
    fn clip_partial_sums(
        rows: FloatTensor<Self>,
        factors: FloatTensor<Self>,
        positions: IntTensor<Self>,
    ) -> IntTensor<Self> {
        device::clip_partial_sums(rows, factors, positions)
    }

    fn conv_weight_rows(x: FloatTensor<Self>, delta: FloatTensor<Self>, geometry: ConvGeometry) -> FloatTensor<Self> {
        device::conv_weight_rows(x, delta, geometry)
    }

    fn block_square_sums(rows: FloatTensor<Self>, block: usize) -> FloatTensor<Self> {
        device::block_square_sums(rows, block)
    }
}

/// The kernels and their launches.
mod device {
    use burn::backend::TensorMetadata;
    use burn::backend::cubecl::dtype_to_storage_type;
    use burn::tensor::DType;
    use burn_cubecl::kernel::into_contiguous;
    use burn_cubecl::ops::numeric::empty_device_dtype;
    use burn_cubecl::tensor::CubeTensor;
    use cubecl::calculate_cube_count_elemwise;
    use cubecl::prelude::*;

    use super::{ConvGeometry, ROWS_PER_UNIT, conv_weight_shape, units};

    /// Launch dimensions with one unit per value of `output`.
    fn one_unit_per_value(client: &cubecl::client::Client, output: &CubeTensor) -> (CubeDim, CubeCount) {
        let n = output.shape().num_elements();
        let cube_dim = CubeDim::new(client, n);
        (cube_dim, calculate_cube_count_elemwise(client, n, cube_dim))
    }

    /// One unit per (row group u, column j): Σ over rows i of group u of
    /// i32(round(rows\[positions\[i\], j\]·factors\[i\])), each product one f32 multiplication,
    /// rounded half to even, converted exactly (|value| < 2³⁰ by the caller's grid).
    #[cube(launch)]
    fn clip_partial_sums_kernel<F: Float, I: Numeric>(
        rows: &Tensor<F>,
        factors: &Tensor<F>,
        positions: &Tensor<I>,
        partial: &mut Tensor<i32>,
        rows_per_unit: usize,
        #[define(F, I)] _dtypes: [ElemType; 2],
    ) {
        if ABSOLUTE_POS >= partial.len() {
            terminate!();
        }
        let width = rows.shape(1);
        let unit = ABSOLUTE_POS / width;
        let column = ABSOLUTE_POS % width;
        let start = unit * rows_per_unit;
        let mut end = start + rows_per_unit;
        if end > factors.len() {
            end = factors.len();
        }
        let mut sum = 0i32;
        for i in start..end {
            let row = usize::cast_from(positions[i]);
            let product = rows[row * width + column] * factors[i];
            sum += i32::cast_from(product.round());
        }
        partial[ABSOLUTE_POS] = sum;
    }

    pub(super) fn clip_partial_sums(rows: CubeTensor, factors: CubeTensor, positions: CubeTensor) -> CubeTensor {
        let (rows, factors, positions) = (into_contiguous(rows), into_contiguous(factors), into_contiguous(positions));
        let [_, width] = rows.shape().dims::<2>();
        let live = factors.shape().dims::<1>()[0];
        let (client, device) = (rows.client.clone(), rows.device.clone());
        let shape = burn::tensor::Shape::new([units(live), width]);
        let partial = empty_device_dtype(client.clone(), device, shape, DType::I32);
        let (cube_dim, cube_count) = one_unit_per_value(&client, &partial);
        let dtypes = [dtype_to_storage_type(rows.dtype), dtype_to_storage_type(positions.dtype)];
        clip_partial_sums_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            rows.into_tensor_arg(),
            factors.into_tensor_arg(),
            positions.into_tensor_arg(),
            partial.clone().into_tensor_arg(),
            ROWS_PER_UNIT,
            dtypes,
        );
        partial
    }

    /// One unit per (row n, block t) of m blocks: Σᵢ rows\[n, t + i·m\]² over i < `block`, in
    /// that order.
    #[cube(launch)]
    fn block_square_sums_kernel<F: Float>(
        rows: &Tensor<F>,
        sums: &mut Tensor<F>,
        block: usize,
        #[define(F)] _dtype: ElemType,
    ) {
        if ABSOLUTE_POS >= sums.len() {
            terminate!();
        }
        let blocks = sums.shape(1);
        let row = ABSOLUTE_POS / blocks;
        let mut at = row * rows.shape(1) + ABSOLUTE_POS % blocks;
        let mut sum = F::new(0.0);
        for _ in 0..block {
            let x = rows[at];
            sum += x * x;
            at += blocks;
        }
        sums[ABSOLUTE_POS] = sum;
    }

    pub(super) fn block_square_sums(rows: CubeTensor, block: usize) -> CubeTensor {
        let rows = into_contiguous(rows);
        let [b, width] = rows.shape().dims::<2>();
        let (client, device, dtype) = (rows.client.clone(), rows.device.clone(), rows.dtype);
        let sums = empty_device_dtype(client.clone(), device, burn::tensor::Shape::new([b, width / block]), dtype);
        let (cube_dim, cube_count) = one_unit_per_value(&client, &sums);
        block_square_sums_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            rows.into_tensor_arg(),
            sums.clone().into_tensor_arg(),
            block,
            dtype_to_storage_type(dtype),
        );
        sums
    }

    /// One unit per weight-gradient entry (n, o, c, i, j): Σ over output positions (y, x), in
    /// row-major order, of delta\[n, o, y, x\]·x\[n, channel, y·sh + i·dh − top, x·sw + j·dw − left\]
    /// where that lies inside the input.
    #[cube(launch)]
    fn conv_weight_rows_kernel<F: Float>(
        x: &Tensor<F>,
        delta: &Tensor<F>,
        out: &mut Tensor<F>,
        kernel_h: usize,
        kernel_w: usize,
        stride_h: usize,
        stride_w: usize,
        dilation_h: usize,
        dilation_w: usize,
        top: usize,
        left: usize,
        groups: usize,
        #[define(F)] _dtype: ElemType,
    ) {
        if ABSOLUTE_POS >= out.len() {
            terminate!();
        }
        let c_in = x.shape(1);
        let h = x.shape(2);
        let w = x.shape(3);
        let c_out = delta.shape(1);
        let ho = delta.shape(2);
        let wo = delta.shape(3);
        let k = out.shape(2);
        let n = ABSOLUTE_POS / (c_out * k);
        let o = (ABSOLUTE_POS / k) % c_out;
        let entry = ABSOLUTE_POS % k;
        let c = entry / (kernel_h * kernel_w);
        let i = (entry / kernel_w) % kernel_h;
        let j = entry % kernel_w;
        let channel = (o / (c_out / groups)) * (c_in / groups) + c;
        let x_base = (n * c_in + channel) * h * w;
        let d_base = (n * c_out + o) * ho * wo;
        // The output positions whose input position lies inside the input: no test in the loop.
        let (y_offset, x_offset) = (i * dilation_h, j * dilation_w);
        let y_start = first_inside(y_offset, top, stride_h);
        let y_end = end_inside(y_offset, top, h, stride_h, ho, y_start);
        let x_start = first_inside(x_offset, left, stride_w);
        let x_end = end_inside(x_offset, left, w, stride_w, wo, x_start);
        let mut sum = F::new(0.0);
        if x_start < x_end {
            // The first column read, x_start·sw + j·dw − left, is inside (so not below 0).
            let first_column = x_start * stride_w + x_offset - left;
            for y in y_start..y_end {
                let mut at = x_base + (y * stride_h + y_offset - top) * w + first_column;
                let d_row = d_base + y * wo;
                for xo in x_start..x_end {
                    sum += delta[d_row + xo] * x[at];
                    at += stride_w;
                }
            }
        }
        out[ABSOLUTE_POS] = sum;
    }

    /// The first output position p with p·stride + offset ≥ pad (its input position inside).
    #[cube]
    fn first_inside(offset: usize, pad: usize, stride: usize) -> usize {
        let mut first = 0;
        if offset < pad {
            first = (pad - offset).div_ceil(stride);
        }
        first
    }

    /// One past the last output position p < `out` with p·stride + offset < pad + size, and at
    /// least `start`.
    #[cube]
    fn end_inside(offset: usize, pad: usize, size: usize, stride: usize, out: usize, start: usize) -> usize {
        let mut end = 0;
        if offset < pad + size {
            end = (pad + size - offset).div_ceil(stride);
        }
        if end > out {
            end = out;
        }
        if end < start {
            end = start;
        }
        end
    }

    pub(super) fn conv_weight_rows(x: CubeTensor, delta: CubeTensor, g: ConvGeometry) -> CubeTensor {
        let (x, delta) = (into_contiguous(x), into_contiguous(delta));
        let shape = conv_weight_shape(&x.shape(), &delta.shape(), &g);
        let (client, device, dtype) = (x.client.clone(), x.device.clone(), x.dtype);
        let out = empty_device_dtype(client.clone(), device, shape, dtype);
        let (cube_dim, cube_count) = one_unit_per_value(&client, &out);
        conv_weight_rows_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            x.into_tensor_arg(),
            delta.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            g.kernel[0],
            g.kernel[1],
            g.stride[0],
            g.stride[1],
            g.dilation[0],
            g.dilation[1],
            g.pad_before[0],
            g.pad_before[1],
            g.groups.max(1),
            dtype_to_storage_type(dtype),
        );
        out
    }
}
