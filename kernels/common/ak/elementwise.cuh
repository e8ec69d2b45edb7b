// The element walk shared by the activation and gated families: out_b[r, c] = f(in_a[r, c]) for
// kIn input and kOut output rows of `cols` contiguous elements each, f in f32 with one rounding
// per output.
//
// A 2-D block covers (cols, rows) so that short rows still fill the block; both dimensions
// grid-stride. A row whose pointers are all 16-byte aligned takes the vector path for its first
// cols / V * V elements (V = 16 / sizeof(T)), kUnroll packets of every input in flight per thread
// before the first use; the rest (tails, misaligned rows) takes the scalar path. Indices are
// 64-bit throughout.
#pragma once

#include <cstdint>

#include "ak/dtype.cuh"

namespace ak::elementwise {

// The pointers of one row: where its inputs are read and its outputs written.
template <class T_, int kIn_, int kOut_>
struct Row {
  using T = T_;
  static constexpr int kIn = kIn_, kOut = kOut_;
  const T* in[kIn];
  T* out[kOut];

  __device__ __forceinline__ bool aligned16() const {
    uintptr_t bits = 0;
#pragma unroll
    for (int a = 0; a < kIn; ++a) bits |= reinterpret_cast<uintptr_t>(in[a]);
#pragma unroll
    for (int b = 0; b < kOut; ++b) bits |= reinterpret_cast<uintptr_t>(out[b]);
    return (bits & 15u) == 0;
  }
};

// row_at(r) gives row r's pointers (a Row).
template <int kUnroll, class RowAt, class F>
__device__ __forceinline__ void run(int64_t rows, int64_t cols, const RowAt& row_at, const F& f) {
  using R = decltype(row_at(rows));
  using T = typename R::T;
  constexpr int kIn = R::kIn, kOut = R::kOut;
  static_assert(kOut <= kIn, "outputs are written into the input packets");
  using V = Vec<T>;
  const int64_t col0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t col_step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; row < rows;
       row += int64_t(gridDim.y) * blockDim.y) {
    const R r = row_at(row);
    const int64_t nvec = r.aligned16() ? cols / V::kSize : 0;
    for (int64_t i = col0; i < nvec; i += col_step * kUnroll) {
      V buf[kUnroll][kIn];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = i + u * col_step;
        if (j < nvec) {
#pragma unroll
          for (int a = 0; a < kIn; ++a) buf[u][a] = load_vec(r.in[a] + j * V::kSize);
        }
      }
      // Each output packet takes the place of an input packet (kOut <= kIn): no more registers
      // than the loads already hold.
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = i + u * col_step;
        if (j < nvec) {
#pragma unroll
          for (int k = 0; k < V::kSize; ++k) {
            float x[kIn], y[kOut];
#pragma unroll
            for (int a = 0; a < kIn; ++a) x[a] = to_f32(buf[u][a].v[k]);
            f(x, y);
#pragma unroll
            for (int b = 0; b < kOut; ++b) buf[u][b].v[k] = from_f32<T>(y[b]);
          }
#pragma unroll
          for (int b = 0; b < kOut; ++b) store_vec(r.out[b] + j * V::kSize, buf[u][b]);
        }
      }
    }
    for (int64_t j = nvec * V::kSize + col0; j < cols; j += col_step) {
      float x[kIn], y[kOut];
#pragma unroll
      for (int a = 0; a < kIn; ++a) x[a] = to_f32(r.in[a][j]);
      f(x, y);
#pragma unroll
      for (int b = 0; b < kOut; ++b) r.out[b][j] = from_f32<T>(y[b]);
    }
  }
}

}  // namespace ak::elementwise
