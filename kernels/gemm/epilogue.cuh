// The GEMM epilogue every path shares: per-tensor/row/column scales, bias, conversion to the
// output dtype and bounds-checked stores. One definition keeps the paths' semantics identical
// (the contract is in arch_matrix.toml, [families.gemm]).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

// The element type of an entry whose operands differ (a mixed-operand dtype "<a>x<b>" of the
// matrix, e.g. fp8 e4m3 x e5m2; the build plan instantiates such entries with it): a storage
// type of the operands' size that names both.
template <class A, class B>
struct ak_mixed_t {
  static_assert(sizeof(A) == sizeof(B), "mixed operands share one element size");
  using a_type = A;
  using b_type = B;
  unsigned char storage[sizeof(A)];
};

namespace ak::gemm {

// The element types of a and b for an entry's T (equal unless T is an ak_mixed_t).
template <class T>
struct Operands {
  using A = T;
  using B = T;
};
template <class A_, class B_>
struct Operands<ak_mixed_t<A_, B_>> {
  using A = A_;
  using B = B_;
};

// Flags, OutDtype, ScaleMode and kScaleBlockK / kScaleBlockN (the K and N extents of one block
// scale, DeepSeek's layout) come from [families.gemm.constants] (gemm_params.h, generated from
// arch_matrix.toml).

// Scale of row m applied after accumulation (block scales are applied inside the main loop).
__device__ __forceinline__ float row_scale(const ak_gemm_params& p, int64_t m) {
  if (p.scale_mode_a == kScaleTensor) return static_cast<const float*>(p.scale_a)[0];
  if (p.scale_mode_a == kScaleVector) return static_cast<const float*>(p.scale_a)[m * p.sa_s0];
  return 1.0f;
}

__device__ __forceinline__ float col_scale(const ak_gemm_params& p, int64_t n) {
  if (p.scale_mode_b == kScaleTensor) return static_cast<const float*>(p.scale_b)[0];
  if (p.scale_mode_b == kScaleVector) return static_cast<const float*>(p.scale_b)[n * p.sb_s0];
  return 1.0f;
}

// scale_a(m, kb) * scale_b(n, kb) for K block kb (both modes kScaleBlock).
__device__ __forceinline__ float block_scale_a(const ak_gemm_params& p, int64_t m, int64_t kb) {
  return static_cast<const float*>(p.scale_a)[m * p.sa_s0 + kb * p.sa_s1];
}
__device__ __forceinline__ float block_scale_b(const ak_gemm_params& p, int64_t n, int64_t kb) {
  return static_cast<const float*>(p.scale_b)[(n / kScaleBlockN) * p.sb_s0 + kb * p.sb_s1];
}

__device__ __forceinline__ float bias_at(const ak_gemm_params& p, int64_t n) {
  if (!(p.flags & kBias)) return 0.0f;
  switch (p.out_dtype) {
    case kOutF16:
      return __half2float(static_cast<const __half*>(p.bias)[n]);
    case kOutBf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p.bias)[n]);
    default:
      return static_cast<const float*>(p.bias)[n];
  }
}

// Writes d[m, n] and d[m, n + 1] (each only if inside [M, N]) from finished f32 values; d_off
// (elements) selects the batch's matrix of d.
__device__ __forceinline__ void store2(const ak_gemm_params& p, int64_t m, int64_t n, float v0,
                                       float v1, int64_t d_off) {
  if (m >= p.m || n >= p.n) return;
  const bool both = n + 1 < p.n;
  const int64_t off = d_off + m * p.ldd + n;
  switch (p.out_dtype) {
    case kOutF16: {
      __half* d = static_cast<__half*>(p.d) + off;
      if (both && (reinterpret_cast<uintptr_t>(d) & 3) == 0) {
        *reinterpret_cast<__half2*>(d) = __floats2half2_rn(v0, v1);
      } else {
        d[0] = __float2half_rn(v0);
        if (both) d[1] = __float2half_rn(v1);
      }
      break;
    }
    case kOutBf16: {
      __nv_bfloat16* d = static_cast<__nv_bfloat16*>(p.d) + off;
      if (both && (reinterpret_cast<uintptr_t>(d) & 3) == 0) {
        *reinterpret_cast<__nv_bfloat162*>(d) = __floats2bfloat162_rn(v0, v1);
      } else {
        d[0] = __float2bfloat16_rn(v0);
        if (both) d[1] = __float2bfloat16_rn(v1);
      }
      break;
    }
    default: {
      float* d = static_cast<float*>(p.d) + off;
      if (both && (reinterpret_cast<uintptr_t>(d) & 7) == 0) {
        *reinterpret_cast<float2*>(d) = make_float2(v0, v1);
      } else {
        d[0] = v0;
        if (both) d[1] = v1;
      }
    }
  }
}

// The whole epilogue of two adjacent f32 accumulators: scales, bias, conversion, store.
__device__ __forceinline__ void epilogue2(const ak_gemm_params& p, int64_t m, int64_t n, float acc0,
                                          float acc1, int64_t d_off = 0) {
  if (m >= p.m || n >= p.n) return;
  const float sa = row_scale(p, m);
  const bool both = n + 1 < p.n;
  const float v0 = acc0 * sa * col_scale(p, n) + bias_at(p, n);
  const float v1 = both ? acc1 * sa * col_scale(p, n + 1) + bias_at(p, n + 1) : 0.0f;
  store2(p, m, n, v0, v1, d_off);
}

// Two adjacent s32 accumulators (int8 operands): stored exactly for an s32 output, else scaled
// and converted like f32 accumulators.
__device__ __forceinline__ void epilogue2_s32(const ak_gemm_params& p, int64_t m, int64_t n,
                                              int32_t acc0, int32_t acc1, int64_t d_off = 0) {
  if (p.out_dtype != kOutS32) {
    epilogue2(p, m, n, static_cast<float>(acc0), static_cast<float>(acc1), d_off);
    return;
  }
  if (m >= p.m || n >= p.n) return;
  int32_t* d = static_cast<int32_t*>(p.d) + d_off + m * p.ldd + n;
  const bool both = n + 1 < p.n;
  if (both && (reinterpret_cast<uintptr_t>(d) & 7) == 0) {
    *reinterpret_cast<int2*>(d) = make_int2(acc0, acc1);
  } else {
    d[0] = acc0;
    if (both) d[1] = acc1;
  }
}

}  // namespace ak::gemm
