// Rotary position embedding, in place on q [tokens, heads_q, head_dim] and k [tokens, heads_k,
// head_dim] (the apply_rope_with_cos_sin_cache convention of vLLM / FlashInfer):
//   c = cache[pos, i], s = cache[pos, rot_dim / 2 + i]       for pair i < rot_dim / 2
//   x1' = x1 * c - x2 * s,  x2' = x2 * c + x1 * s
// where the pair (x1, x2) is (x[i], x[rot_dim / 2 + i]) in the NeoX layout (rotate halves) and
// (x[2 i], x[2 i + 1]) in the GPT-J layout (interleaved). Elements past rot_dim are untouched
// (partial rotary). f32 math, one rounding on store; the cache is f32 or the storage dtype.
//
// Work split: block.y stacks tokens, block.x walks the token's (head, unit) items; a unit is one
// 16-byte packet of x per half (NeoX: V pairs from two packets; GPT-J: V / 2 pairs from one
// packet, V = 16 / sizeof(T)) when the host found every access 16-byte aligned, else one pair.
// Each token reads its position once; its cos/sin row is re-read by every head from L1.
// A position outside [0, max_pos) leaves that token's q and k unrotated: checking on the host
// would need a device sync, and reading past the cache would fault or return garbage.
#pragma once

#include <type_traits>

#include "ak/dtype.cuh"

namespace ak::rope {

// kThreads (the block size) and the ak_rope_params.flags bits (kNeox, kPosInt32, kCacheF32,
// kVector) come from [families.rope.constants] (rope_params.h, generated from arch_matrix.toml).

template <class T, class C, bool kNeoxLayout, bool kVec, class I>
__device__ __forceinline__ void rotate_token(const ak_rope_params& p, int64_t t, int64_t pos) {
  constexpr int kV = 16 / sizeof(T);
  // Pairs per unit and elements a unit spans in each half (NeoX) or in the row (GPT-J).
  constexpr int kPairs = kVec ? (kNeoxLayout ? kV : kV / 2) : 1;
  const int64_t half = p.rot_dim / 2;
  const I units = static_cast<I>(half / kPairs);
  const I items = static_cast<I>(p.heads_q + p.heads_k) * units;
  const C* cs = static_cast<const C*>(p.cos_sin) + pos * p.cache_stride;
  for (I item = threadIdx.x; item < items; item += blockDim.x) {
    const I h = item / units, u = item - h * units;
    T* x = h < static_cast<I>(p.heads_q)
               ? static_cast<T*>(p.q) + t * p.q_token_stride + h * p.q_head_stride
               : static_cast<T*>(p.k) + t * p.k_token_stride + (h - p.heads_q) * p.k_head_stride;
    const int64_t i0 = static_cast<int64_t>(u) * kPairs;  // first pair of the unit
    float c[kPairs], s[kPairs];
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      c[j] = to_f32(__ldg(cs + i0 + j));
      s[j] = to_f32(__ldg(cs + half + i0 + j));
    }
    if constexpr (kVec && kNeoxLayout) {
      Vec<T> a = load_vec(x + i0), b = load_vec(x + half + i0);
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        const float x1 = to_f32(a.v[j]), x2 = to_f32(b.v[j]);
        a.v[j] = from_f32<T>(x1 * c[j] - x2 * s[j]);
        b.v[j] = from_f32<T>(x2 * c[j] + x1 * s[j]);
      }
      store_vec(x + i0, a);
      store_vec(x + half + i0, b);
    } else if constexpr (kVec) {
      Vec<T> a = load_vec(x + 2 * i0);
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        const float x1 = to_f32(a.v[2 * j]), x2 = to_f32(a.v[2 * j + 1]);
        a.v[2 * j] = from_f32<T>(x1 * c[j] - x2 * s[j]);
        a.v[2 * j + 1] = from_f32<T>(x2 * c[j] + x1 * s[j]);
      }
      store_vec(x + 2 * i0, a);
    } else {
      T* p1 = kNeoxLayout ? x + i0 : x + 2 * i0;
      T* p2 = kNeoxLayout ? x + half + i0 : x + 2 * i0 + 1;
      const float x1 = to_f32(*p1), x2 = to_f32(*p2);
      *p1 = from_f32<T>(x1 * c[0] - x2 * s[0]);
      *p2 = from_f32<T>(x2 * c[0] + x1 * s[0]);
    }
  }
}

template <class T, class C, bool kNeoxLayout, bool kVec, class I>
__device__ __forceinline__ void run_tokens(const ak_rope_params& p) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; t < p.tokens;
       t += step) {
    const int64_t pos = (p.flags & kPosInt32) ? __ldg(static_cast<const int32_t*>(p.positions) + t)
                                              : __ldg(static_cast<const int64_t*>(p.positions) + t);
    if (pos < 0 || pos >= p.max_pos) continue;
    rotate_token<T, C, kNeoxLayout, kVec, I>(p, t, pos);
  }
}

// Layout and packet width are compile-time (they shape every access); the index type is 32-bit
// unless a token has 2**31 or more items, which then take one pair per item (sizes that large
// are far from any model: the 64-bit copy only keeps them correct).
template <class T, class C>
__device__ __forceinline__ void dispatch(const ak_rope_params& p) {
  const bool wide = (p.heads_q + p.heads_k) * p.rot_dim >= (int64_t{1} << 31);
  const bool neox = p.flags & kNeox, vec = p.flags & kVector;
  if (wide) {
    if (neox) {
      run_tokens<T, C, true, false, int64_t>(p);
    } else {
      run_tokens<T, C, false, false, int64_t>(p);
    }
  } else if (neox) {
    if (vec) {
      run_tokens<T, C, true, true, uint32_t>(p);
    } else {
      run_tokens<T, C, true, false, uint32_t>(p);
    }
  } else if (vec) {
    run_tokens<T, C, false, true, uint32_t>(p);
  } else {
    run_tokens<T, C, false, false, uint32_t>(p);
  }
}

template <class T>
__device__ __forceinline__ void run(const ak_rope_params& p) {
  if constexpr (std::is_same_v<T, float>) {
    dispatch<T, float>(p);
  } else if (p.flags & kCacheF32) {
    dispatch<T, float>(p);
  } else {
    dispatch<T, T>(p);
  }
}

}  // namespace ak::rope

#define AK_ENTRY(symbol, op, T)                                    \
  extern "C" __global__ void __launch_bounds__(ak::rope::kThreads) \
      symbol(const __grid_constant__ ak_rope_params p) {           \
    ak::rope::run<T>(p);                                           \
  }
