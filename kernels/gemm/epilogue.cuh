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

// d[0] and, when `both`, d[1] from v0 / v1 rounded to the 16-bit type H (one 4-byte store when
// aligned).
template <class H, class H2, H (*kRound)(float), H2 (*kRound2)(float, float)>
__device__ __forceinline__ void store2_16(H* d, bool both, float v0, float v1) {
  if (both && (reinterpret_cast<uintptr_t>(d) & 3) == 0) {
    *reinterpret_cast<H2*>(d) = kRound2(v0, v1);
  } else {
    d[0] = kRound(v0);
    if (both) d[1] = kRound(v1);
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
    case kOutF16:
      store2_16<__half, __half2, __float2half_rn, __floats2half2_rn>(
          static_cast<__half*>(p.d) + off, both, v0, v1);
      break;
    case kOutBf16:
      store2_16<__nv_bfloat16, __nv_bfloat162, __float2bfloat16_rn, __floats2bfloat162_rn>(
          static_cast<__nv_bfloat16*>(p.d) + off, both, v0, v1);
      break;
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

// One output value from its f32 sum. Every epilogue (these direct stores, the TMA staging area,
// the swapped tiles) goes through this function, so that a tile's path never changes the rounded
// bits. The rounding is spelled out: left to the compiler, `acc * sa * sb + bias` became an fma
// or a multiply and an add depending on where the bias load landed, and so differed by path.
__device__ __forceinline__ float scaled(float acc, float sa, float sb, float bias) {
  return __fmaf_rn(__fmul_rn(acc, sa), sb, bias);
}

// The whole epilogue of two adjacent f32 accumulators: scales, bias, conversion, store.
__device__ __forceinline__ void epilogue2(const ak_gemm_params& p, int64_t m, int64_t n, float acc0,
                                          float acc1, int64_t d_off = 0) {
  if (m >= p.m || n >= p.n) return;
  const float sa = row_scale(p, m);
  const bool both = n + 1 < p.n;
  const float v0 = scaled(acc0, sa, col_scale(p, n), bias_at(p, n));
  const float v1 = both ? scaled(acc1, sa, col_scale(p, n + 1), bias_at(p, n + 1)) : 0.0f;
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

// ---- split-K ---------------------------------------------------------------------------------
// Split s of a split-K launch leaves its raw partial sums (f32, before scales, bias and rounding;
// fp8 block scales are applied inside the main loop) in ws[s][m][n], rows ldw = n rounded up to
// a multiple of 4 apart, so that the reduction reads aligned 16-byte groups.
__device__ __forceinline__ int64_t split_ld(const ak_gemm_params& p) { return (p.n + 3) & ~3ll; }

// The launch after the splits (flags & kSplitReduce): every column of d is the sum of its
// partials taken in split order 0, 1, ..., through the epilogue. The fixed order makes the
// result bitwise repeatable (f32 addition is not associative: no atomics, no arrival order).
// The reduction is bound by memory latency (one block per SM: it keeps the GEMM's shared-memory
// size), so each thread keeps kGroups independent 16-byte loads in flight.
__device__ __forceinline__ void reduce_splits(const ak_gemm_params& p) {
  constexpr int kGroups = 4;
  const int64_t ldw = split_ld(p), per_row = ldw / 4, groups = p.m * per_row;
  const int64_t plane = p.m * per_row;  // in groups of 4 floats
  const auto* ws = static_cast<const float4*>(p.ws);
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g0 < groups;
       g0 += kGroups * threads) {
    float4 sum[kGroups];
#pragma unroll
    for (int u = 0; u < kGroups; ++u) {
      const int64_t g = g0 + u * threads;
      sum[u] = g < groups ? ws[g] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (int64_t s = 1; s < p.splits; ++s) {
#pragma unroll
      for (int u = 0; u < kGroups; ++u) {
        const int64_t g = g0 + u * threads;
        if (g >= groups) continue;
        const float4 v = ws[s * plane + g];
        sum[u].x += v.x;
        sum[u].y += v.y;
        sum[u].z += v.z;
        sum[u].w += v.w;
      }
    }
#pragma unroll
    for (int u = 0; u < kGroups; ++u) {
      const int64_t g = g0 + u * threads;
      if (g >= groups) continue;
      const int64_t m = g / per_row, n = 4 * (g - m * per_row);
      epilogue2(p, m, n, sum[u].x, sum[u].y);
      epilogue2(p, m, n + 2, sum[u].z, sum[u].w);
    }
  }
}

}  // namespace ak::gemm
