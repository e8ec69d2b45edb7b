// Elementwise activations out = f(x) over a [rows, cols] view with row strides, and their
// backward ops out = dx = dy * f'(x) (x the forward's input, dy the gradient of f(x); the
// formulas are in ak/activations.cuh), which read dy with its own row stride.
//
// The runtime collapses any rank to rows x cols (one row when the tensor is contiguous); cols are
// contiguous. A 2-D block covers (cols, rows) so that short rows still fill the block. Rows whose
// pointers are 16-byte aligned take the vector path for their first cols/V*V elements; the rest
// (tails, misaligned rows) take the scalar path. Indices are 64-bit throughout.
#pragma once

#include "ak/activations.cuh"
#include "ak/dtype.cuh"

namespace ak::activation {

// kMaxThreads, kUnroll and kUnrollBackward come from [families.activation.constants]
// (activation_params.h, generated from arch_matrix.toml; the op layer reads the same values).

template <class Op, class T>
__device__ __forceinline__ void run(const ak_activation_params& p) {
  using V = Vec<T>;
  const Op op;
  const int64_t col0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t col_step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows;
       row += int64_t(gridDim.y) * blockDim.y) {
    const T* x = static_cast<const T*>(p.x) + row * p.x_row_stride;
    T* out = static_cast<T*>(p.out) + row * p.out_row_stride;
    const int64_t nvec = aligned16(x, out) ? p.cols / V::kSize : 0;
    for (int64_t i = col0; i < nvec; i += col_step * kUnroll) {
      V buf[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = i + u * col_step;
        if (j < nvec) buf[u] = load_vec(x + j * V::kSize);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = i + u * col_step;
        if (j < nvec) {
#pragma unroll
          for (int k = 0; k < V::kSize; ++k) buf[u].v[k] = from_f32<T>(op(to_f32(buf[u].v[k])));
          store_vec(out + j * V::kSize, buf[u]);
        }
      }
    }
    for (int64_t j = nvec * V::kSize + col0; j < p.cols; j += col_step) {
      out[j] = from_f32<T>(op(to_f32(x[j])));
    }
  }
}

// The backward ops: the same walk over two inputs, out = op(x, dy).
template <class Op, class T>
__device__ __forceinline__ void run_backward(const ak_activation_params& p) {
  using V = Vec<T>;
  const Op op;
  const int64_t col0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t col_step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < p.rows;
       row += int64_t(gridDim.y) * blockDim.y) {
    const T* x = static_cast<const T*>(p.x) + row * p.x_row_stride;
    const T* dy = static_cast<const T*>(p.dy) + row * p.dy_row_stride;
    T* out = static_cast<T*>(p.out) + row * p.out_row_stride;
    const int64_t nvec = aligned16(x, dy, out) ? p.cols / V::kSize : 0;
    for (int64_t i = col0; i < nvec; i += col_step * kUnrollBackward) {
      V xb[kUnrollBackward], gb[kUnrollBackward];
#pragma unroll
      for (int u = 0; u < kUnrollBackward; ++u) {
        const int64_t j = i + u * col_step;
        if (j < nvec) {
          xb[u] = load_vec(x + j * V::kSize);
          gb[u] = load_vec(dy + j * V::kSize);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnrollBackward; ++u) {
        const int64_t j = i + u * col_step;
        if (j < nvec) {
#pragma unroll
          for (int k = 0; k < V::kSize; ++k) {
            xb[u].v[k] = from_f32<T>(op(to_f32(xb[u].v[k]), to_f32(gb[u].v[k])));
          }
          store_vec(out + j * V::kSize, xb[u]);
        }
      }
    }
    for (int64_t j = nvec * V::kSize + col0; j < p.cols; j += col_step) {
      out[j] = from_f32<T>(op(to_f32(x[j]), to_f32(dy[j])));
    }
  }
}

template <class Op, class T>
__device__ __forceinline__ void entry(const ak_activation_params& p) {
  if constexpr (kIsBackward<Op>) {
    run_backward<Op, T>(p);
  } else {
    run<Op, T>(p);
  }
}

}  // namespace ak::activation

#define AK_ENTRY(symbol, op, T)                                             \
  extern "C" __global__ void __launch_bounds__(ak::activation::kMaxThreads) \
      symbol(const __grid_constant__ ak_activation_params p) {              \
    ak::activation::entry<ak::op##_fn<T>, T>(p);                            \
  }
