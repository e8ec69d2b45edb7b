// Elementwise activations out = f(x) over a [rows, cols] view with row strides.
//
// The runtime collapses any rank to rows x cols (one row when the tensor is contiguous); cols are
// contiguous. A 2-D block covers (cols, rows) so that short rows still fill the block. Rows whose
// pointers are 16-byte aligned take the vector path for their first cols/V*V elements; the rest
// (tails, misaligned rows) take the scalar path. Indices are 64-bit throughout.
#pragma once

#include "ak/activations.cuh"
#include "ak/dtype.cuh"

namespace ak::activation {

constexpr int kMaxThreads = 256;
constexpr int kUnroll = 4;  // independent 16-byte loads in flight per thread

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

}  // namespace ak::activation

#define AK_ENTRY(symbol, op, T)                                             \
  extern "C" __global__ void __launch_bounds__(ak::activation::kMaxThreads) \
      symbol(const __grid_constant__ ak_activation_params p) {              \
    ak::activation::run<ak::op##_fn<T>, T>(p);                              \
  }
