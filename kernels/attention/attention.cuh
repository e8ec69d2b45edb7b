// Attention family: FlashAttention-2 forward on mma.sync (sm_75 .. sm_120a; on sm_90a for what
// the FlashAttention-3 path of wgmma.cuh does not take: head dims below 64, packed GQA, operands
// TMA cannot map), and the tile math the decode kernel (decode.cuh) shares with it.
//
// Generated entries: AK_ENTRY_FA2(symbol, op, T, V), V the variant's config (d: the compiled head
// dim, bm x bn: query x key tile, threads). `op` is `attn_fwd` or `attn_combine`. AK_ENTRY_FA3:
// the sm_90a variants (attn_fwd only); AK_ENTRY_DEC: attention_decode's (decode.cuh).
//
// attn_fwd, one CTA per (query tile, head slot, batch x split):
//  * Every warp owns 16 * kMT query rows (kMT = 2 in the prefill tiles of d <= 128: each K / V
//    fragment read from shared memory feeds two mma, which keeps ldmatrix traffic under the
//    tensor-core rate; d = 256 has no registers for it). S = Q K^T and O += P V run on
//    mma.sync m16n8k16 (two m16n8k8 on Turing), f32 accumulators. S stays in registers: its
//    accumulator fragments are exactly the A fragments of P V once rounded to T (no
//    shared-memory round trip for P).
//  * Q, K and V tiles sit in shared memory as rows of d elements in 16-byte chunks, the chunk
//    index XORed with row % 8, so ldmatrix's 8 row reads hit 8 distinct bank groups.
//  * The K/V pipeline: one K and one V buffer, loads issued a half iteration ahead: V(j) is in
//    flight while S(j) = Q K(j)^T runs, K(j+1) while O += P(j) V(j) runs (cp.async on sm_80+,
//    zero-filled past the sequence and past d; register-staged copies on sm_75).
//  * Online softmax in the log2 domain: scores are multiplied by scale * log2(e) once (the host
//    folds softcap in: tanh(s * scale / cap) * cap * log2(e)), so every exponential is one exp2.
//    A row whose keys are all masked keeps max = -inf; exponentials are then taken against 0,
//    so it sums to 0 and writes 0 with an LSE of -inf instead of NaN.
//  * Masks: keys past the sequence, causal and sliding windows as one rule per query position
//    i: key j is kept when i + sk - sq - left <= j <= i + sk - sq + right (bottom-right aligned;
//    causal is right = 0, an unbounded side is a huge bound). Only tiles that cross a bound
//    evaluate it per element; the loop visits only key tiles some row of the CTA can see.
//  * GQA packing (flag): the rows of a tile are (query position, head of the KV group) pairs,
//    so a decode step with one query per head still fills the tile and K/V are read once per
//    KV head instead of once per query head.
//  * Paging, split-KV and the combine are decode's (decode.cuh): attn_fwd reads contiguous or
//    varlen K / V and writes its rows.
//  * All offsets are 64-bit; sequence positions are 32-bit (the host caps lengths below 2^31).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "ak/mma.cuh"

namespace ak::attention {

// ak_attention_params.flags bits, from [families.attention.constants] (attention_params.h,
// generated from arch_matrix.toml): kVarlen (sequences from cu_seqlens_q / cu_seqlens_k),
// kSeqused (key lengths from seqused_k[b]), kPaged (K/V rows through block_table; k_sb / v_sb
// are page strides), kSplit (write f32 partials to o_accum / lse_accum), kPackGqa (tile rows are
// (position, head of the group) pairs), kWriteLse, kSoftcap.

// ---------------------------------------------------------------------------------------------
// Copies (the mma.sync and ldmatrix wrappers are ak/mma.cuh's).
// ---------------------------------------------------------------------------------------------
// One 16-byte chunk global -> shared; a null source writes zeros (cp.async then reads 0 bytes
// but still wants a global address: `fallback`, the operand's base). sm_80+: cp.async, completed
// by commit/wait groups; sm_75 has no cp.async, so the copy goes through registers and is
// complete (for the barrier that follows) when the call returns.
__device__ __forceinline__ void copy16(uint8_t* dst, const void* src, const void* fallback) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  cp_async_16(smem_u32(dst), src != nullptr ? src : fallback, src != nullptr ? 16 : 0);
#else
  *reinterpret_cast<uint4*>(dst) =
      src != nullptr ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0, 0, 0, 0);
#endif
}

// The same for a chunk known to be inside its operand.
__device__ __forceinline__ void copy16(uint8_t* dst, const void* src) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  cp_async_16(smem_u32(dst), src, 16);
#else
  *reinterpret_cast<uint4*>(dst) = __ldg(reinterpret_cast<const uint4*>(src));
#endif
}

__device__ __forceinline__ void copy_commit() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  cp_async_commit();
#endif
}

template <int N>
__device__ __forceinline__ void copy_wait() {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  cp_async_wait<N>();
#endif
}

template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    r = *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    r = *reinterpret_cast<const uint32_t*>(&h);
  }
  return r;
}

// Byte offset of 16-byte chunk c of row r in a tile of kD-element rows (kD >= 64: 8+ chunks).
template <int kD>
__device__ __forceinline__ uint32_t tile_off(int r, int c) {
  return r * (kD * 2) + ((c ^ (r & 7)) << 4);
}

// ldmatrix addresses of one access pattern: row r_imm + r_lane, chunk c_imm | c_lane, where r_imm
// is a multiple of 8 and c_imm even (unrolled-loop constants) and r_lane, c_lane in {0, 1} the
// thread's part. The swizzle then depends on c_imm & 7 alone, so the thread keeps the 4 possible
// XORed offsets and every access is one of them plus an immediate: without this, ptxas hoists
// one address register per (row, chunk) pair out of the key loop (~100 registers at d = 128).
template <int kD>
struct Swizzled {
  uint32_t base[4];
  __device__ __forceinline__ Swizzled(uint32_t tile, int r_lane, int c_lane) {
    const int y = (r_lane & 7) ^ c_lane;
#pragma unroll
    for (int k = 0; k < 4; ++k) base[k] = tile + r_lane * (kD * 2) + (((2 * k) ^ y) << 4);
  }
  __device__ __forceinline__ uint32_t operator()(int r_imm, int c_imm) const {
    return base[(c_imm & 7) >> 1] + r_imm * (kD * 2) + ((c_imm & ~7) << 4);
  }
  // The same pattern in a tile `bytes` further on (a ring's other stages).
  __device__ __forceinline__ Swizzled at(uint32_t bytes) const {
    Swizzled s = *this;
#pragma unroll
    for (int k = 0; k < 4; ++k) s.base[k] += bytes;
    return s;
  }
};

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Over the whole warp, every lane getting the same bits (a fixed butterfly).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int m = 16; m > 0; m /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// tanh(x) = 1 - 2 / (e^2x + 1): MUFU exp and reciprocal, ~1e-6 absolute error, exact limits at
// +-inf. tanhf's accurate path costs registers the O accumulator needs (d = 256 spilled), and
// tanh.approx's 2^-11 relative error would reach ~1% of a probability under a softcap of 50.
__device__ __forceinline__ float fast_tanh(float x) {
  return 1.f - __fdividef(2.f, __expf(2.f * x) + 1.f);
}

// f(score, mt, j, e) for each of a warp's scores sc[mt][j][e]: 16-row block mt, 8-key fragment
// j, accumulator element e (row g + 8 * (e / 2), key 2 * t4 + (e & 1) of the fragment).
template <int kMT, int kNT, class F>
__device__ __forceinline__ void for_each_score(float (&sc)[kMT][kNT][4], F&& f) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) f(sc[mt][j][e], mt, j, e);
    }
  }
}

// Copies rows [0, kRows) of a tile: row_src(r) is row r's first element, or null for a row
// outside the sequence; chunks past d are zero-filled, so padded head dims contribute nothing.
template <int kD, int kRows, int kThreads, class RowSrc>
__device__ __forceinline__ void load_tile(uint8_t* tile, int d, const void* base, RowSrc row_src) {
  constexpr int kChunks = kD / 8;
  static_assert((kRows * kChunks) % kThreads == 0, "tile chunks must split evenly");
#pragma unroll 1
  for (int i = 0; i < kRows * kChunks / kThreads; ++i) {
    const int idx = static_cast<int>(threadIdx.x) + i * kThreads;
    const int r = idx / kChunks, c = idx % kChunks;
    const uint8_t* row = row_src(r);
    const void* src = (row != nullptr && c * 8 < d) ? row + c * 16 : nullptr;
    copy16(tile + tile_off<kD>(r, c), src, base);
  }
}

// The sequence a CTA works on, from the batch index and the flags.
struct Seq {
  int sq, sk;        // lengths
  int64_t q0, k0;    // first row in the packed (varlen) layout; 0 otherwise
  const uint8_t* q;  // batch base of q (bytes)
  const uint8_t* k;  // batch base of k / v (unused when paged)
  const uint8_t* v;
  uint8_t* o;
};

template <class P>
__device__ __forceinline__ Seq sequence(const P& p, int b) {
  Seq s;
  const auto* q = static_cast<const uint8_t*>(p.q);
  const auto* k = static_cast<const uint8_t*>(p.k);
  const auto* v = static_cast<const uint8_t*>(p.v);
  auto* o = static_cast<uint8_t*>(p.out);
  if (p.flags & kVarlen) {
    const int* cq = static_cast<const int*>(p.cu_seqlens_q);
    const int* ck = static_cast<const int*>(p.cu_seqlens_k);
    s.q0 = cq[b];
    s.k0 = ck[b];
    s.sq = cq[b + 1] - cq[b];
    s.sk = ck[b + 1] - ck[b];
    s.q = q + s.q0 * p.q_ss * 2;
    s.k = k + s.k0 * p.k_ss * 2;
    s.v = v + s.k0 * p.v_ss * 2;
    s.o = o + s.q0 * p.o_ss * 2;
  } else {
    s.q0 = s.k0 = 0;
    s.sq = p.seqlen_q;
    s.sk = p.seqlen_k;
    s.q = q + b * p.q_sb * 2;
    s.o = o + b * p.o_sb * 2;
    s.k = (p.flags & kPaged) ? k : k + b * p.k_sb * 2;
    s.v = (p.flags & kPaged) ? v : v + b * p.v_sb * 2;
  }
  if (p.flags & kSeqused) s.sk = static_cast<const int*>(p.seqused_k)[b];
  return s;
}

// The rows of a CTA's query tile: (position, head of the KV group) pairs when packing GQA (the
// tile then serves KV head `slot`), else positions of query head `slot`.
struct Rows {
  bool pack;
  int group, slot, rows;
  __device__ __forceinline__ int pos_of(int r) const { return pack ? r / group : r; }
  __device__ __forceinline__ int head_of(int r) const {
    return pack ? slot * group + r % group : slot;
  }
  __device__ __forceinline__ int kv_head() const { return pack ? slot : slot / group; }
};

// What a CTA works on, from its grid position (query tile, head slot, batch x split): batch b,
// split `split`, the sequence, and the rows of the tile, which starts at row m0.
struct Work {
  int b, split, m0;
  Seq s;
  Rows rw;
};

template <class P>
__device__ __forceinline__ Work cta_work(const P& p, int bm) {
  Work w;
  w.b = static_cast<int>(blockIdx.z) / p.num_splits;
  w.split = static_cast<int>(blockIdx.z) % p.num_splits;
  w.m0 = static_cast<int>(blockIdx.x) * bm;
  w.s = sequence(p, w.b);
  w.rw.pack = p.flags & kPackGqa;
  w.rw.group = p.heads / p.kv_heads;
  w.rw.slot = blockIdx.y;
  w.rw.rows = w.rw.pack ? w.s.sq * w.rw.group : w.s.sq;
  return w;
}

// The key tiles [t_lo, t_hi) that rows [m0, m0 + bm) can see (of kBN keys each), the slice of
// split `split` of `splits` when split-KV cuts them into contiguous ranges.
struct KeyRange {
  int64_t shift, pos_lo, pos_hi;  // key - query offset; the tile's first and last positions
  int t_lo, t_hi;
  // Whether key tile n0 crosses a bound (the sequence end or a window side), so that its
  // scores need the per-element mask.
  template <class P>
  __device__ __forceinline__ bool crosses(const P& p, int n0, int bn, int sk) const {
    return n0 + bn > sk || n0 < pos_hi + shift - p.window_left ||
           n0 + bn - 1 > pos_lo + shift + p.window_right;
  }
};

template <int kBN, class P>
__device__ __forceinline__ KeyRange key_range(const P& p, const Seq& s, const Rows& rw, int m0,
                                              int bm, int split) {
  KeyRange kr;
  kr.shift = static_cast<int64_t>(s.sk) - s.sq;
  kr.pos_lo = rw.pos_of(m0);
  kr.pos_hi = rw.pos_of(min(m0 + bm, rw.rows) - 1);
  const int64_t key_lo = max(int64_t{0}, kr.pos_lo + kr.shift - p.window_left);
  const int64_t key_hi = min(static_cast<int64_t>(s.sk), kr.pos_hi + kr.shift + p.window_right + 1);
  kr.t_lo = static_cast<int>(key_lo / kBN);
  kr.t_hi = key_hi > key_lo ? static_cast<int>((key_hi + kBN - 1) / kBN) : kr.t_lo;
  const int splits = p.num_splits;
  if (splits > 1) {
    const int per = (kr.t_hi - kr.t_lo + splits - 1) / splits;
    kr.t_lo = min(kr.t_hi, kr.t_lo + split * per);
    kr.t_hi = min(kr.t_hi, kr.t_lo + per);
  }
  return kr;
}

// Copies the query tile: rows [m0, m0 + kBM) of the CTA, zeros past the last row.
template <int kD, int kBM, int kThreads, class P>
__device__ __forceinline__ void load_q(uint8_t* tile, const P& p, const Seq& s, const Rows& rw,
                                       int m0) {
  load_tile<kD, kBM, kThreads>(tile, p.d, p.q, [&](int r) {
    const int row = m0 + r;
    if (row >= rw.rows) return static_cast<const uint8_t*>(nullptr);
    return s.q + static_cast<int64_t>(rw.pos_of(row)) * p.q_ss * 2 + rw.head_of(row) * p.q_sh * 2;
  });
}

// S = Q K^T of one key tile: a warp's kMT 16-row blocks against kNT 8-key fragments. The
// k-steps past a smaller head dim d are skipped; kFullD (d == kD known) drops those checks, and
// with them the branch per k-step that keeps the loads of one step from overlapping another's
// mma.
template <class T, bool kFullD, int kD, int kMT, int kNT>
__device__ __forceinline__ void qk_tile(float (&sc)[kMT][kNT][4], const Swizzled<kD>& q_addr,
                                        const Swizzled<kD>& k_addr, int d) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int j = 0; j < kNT; ++j) sc[mt][j][0] = sc[mt][j][1] = sc[mt][j][2] = sc[mt][j][3] = 0.f;
  }
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    if (!kFullD && ks * 16 >= d) break;  // zero padding of a smaller head dim
    uint32_t a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) ldmatrix_x4(a[mt], q_addr(mt * 16, ks * 2));
#pragma unroll
    for (int j = 0; j < kNT; j += 2) {
      uint32_t bk[4];
      ldmatrix_x4(bk, k_addr(j * 8, ks * 2));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma_m16n8k16<T>(sc[mt][j], a[mt], bk[0], bk[1]);
        mma_m16n8k16<T>(sc[mt][j + 1], a[mt], bk[2], bk[3]);
      }
    }
  }
}

// Scores to the log2 domain: one branch per tile, not per element (both sides cost MUFU
// throughput, the softmax's bottleneck).
template <int kMT, int kNT, class P>
__device__ __forceinline__ void log2_scores(float (&sc)[kMT][kNT][4], const P& p) {
  if (p.flags & kSoftcap) {
    for_each_score(
        sc, [&](float& x, int, int, int) { x = fast_tanh(x * p.softcap_pre) * p.scale_log2; });
  } else {
    for_each_score(sc, [&](float& x, int, int, int) { x *= p.scale_log2; });
  }
}

// The per-element mask of a tile that crosses a bound: key n0 + column against row row0 + ...
template <int kMT, int kNT, class P>
__device__ __forceinline__ void mask_scores(float (&sc)[kMT][kNT][4], const P& p, const Rows& rw,
                                            const KeyRange& kr, int sk, int n0, int row0) {
  const int lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  for_each_score(sc, [&](float& x, int mt, int j, int e) {
    const int64_t key = n0 + j * 8 + 2 * t4 + (e & 1);
    const int64_t i = rw.pos_of(row0 + mt * 16 + g + 8 * (e / 2)) + kr.shift;
    if (key >= sk || key < i - p.window_left || key > i + p.window_right) x = -INFINITY;
  });
}

// Online softmax over one key tile: the new row max, what was accumulated rescaled, the scores
// exponentiated in place (they become P). row_sum stays per thread (its columns) until the end.
// kVoteRescale: the warp skips rescaling O where no row's max moved (every alpha is exactly 1,
// so the result is the same bits): one vote instead of kDT * 2 multiplies per row half, which
// pays where a warp's instruction count per tile is its critical path (decode).
template <bool kVoteRescale = false, int kMT, int kNT, int kDT>
__device__ __forceinline__ void online_softmax(float (&sc)[kMT][kNT][4], float (&o)[kMT][kDT][4],
                                               float (&row_max)[kMT][2], float (&row_sum)[kMT][2]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = row_max[mt][h];
#pragma unroll
      for (int j = 0; j < kNT; ++j) mx = fmaxf(mx, fmaxf(sc[mt][j][2 * h], sc[mt][j][2 * h + 1]));
      mx = quad_max(mx);
      const float ref = mx == -INFINITY ? 0.f : mx;  // all masked so far: exp2(-inf - 0) = 0
      const float alpha = exp2f(row_max[mt][h] - ref);
      row_max[mt][h] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        sc[mt][j][2 * h] = exp2f(sc[mt][j][2 * h] - ref);
        sc[mt][j][2 * h + 1] = exp2f(sc[mt][j][2 * h + 1] - ref);
        sum += sc[mt][j][2 * h] + sc[mt][j][2 * h + 1];
      }
      row_sum[mt][h] = row_sum[mt][h] * alpha + sum;
      if (kVoteRescale && !__any_sync(0xffffffffu, alpha != 1.f)) continue;
#pragma unroll
      for (int i = 0; i < kDT; ++i) {
        o[mt][i][2 * h] *= alpha;
        o[mt][i][2 * h + 1] *= alpha;
      }
    }
  }
}

// O += P V of one key tile: P from the score registers (the S accumulator layout is the A
// fragment layout), V through transposed ldmatrix; kFullD as in qk_tile.
template <class T, bool kFullD, int kD, int kMT, int kNT, int kDT>
__device__ __forceinline__ void pv_tile(float (&o)[kMT][kDT][4], const float (&sc)[kMT][kNT][4],
                                        const Swizzled<kD>& v_addr, int d) {
#pragma unroll
  for (int ks = 0; ks < kNT / 2; ++ks) {
    uint32_t a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      a[mt][0] = pack2<T>(sc[mt][2 * ks][0], sc[mt][2 * ks][1]);
      a[mt][1] = pack2<T>(sc[mt][2 * ks][2], sc[mt][2 * ks][3]);
      a[mt][2] = pack2<T>(sc[mt][2 * ks + 1][0], sc[mt][2 * ks + 1][1]);
      a[mt][3] = pack2<T>(sc[mt][2 * ks + 1][2], sc[mt][2 * ks + 1][3]);
    }
#pragma unroll
    for (int i = 0; i < kDT; i += 2) {
      if (!kFullD && i * 8 >= d) break;
      uint32_t bv[4];
      ldmatrix_x4_trans(bv, v_addr(ks * 16, i));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma_m16n8k16<T>(o[mt][i], a[mt], bv[0], bv[1]);
        mma_m16n8k16<T>(o[mt][i + 1], a[mt], bv[2], bv[3]);
      }
    }
  }
}

constexpr float kLn2 = 0.693147180559945309f;

// ---------------------------------------------------------------------------------------------
// attn_fwd
// ---------------------------------------------------------------------------------------------
template <class T, class C, class P>
__device__ __forceinline__ void fwd(const P& p) {
  constexpr int kD = C::d, kBM = C::bm, kBN = C::bn, kThreads = C::threads;
  constexpr int kNT = kBN / 8;                     // S fragments per warp row block
  constexpr int kDT = kD / 8;                      // O fragments
  constexpr int kMT = kBM * 32 / (16 * kThreads);  // 16-row blocks per warp
  static_assert(kMT >= 1 && kMT * 16 * (kThreads / 32) == kBM, "warps split the query rows");
  static_assert(kBN % 16 == 0 && kD % 16 == 0 && kD >= 64, "tile shapes");
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* sq_tile = smem;
  uint8_t* sk_tile = sq_tile + kBM * kD * 2;
  uint8_t* sv_tile = sk_tile + kBN * kD * 2;

  const Work w = cta_work(p, kBM);
  const int b = w.b, m0 = w.m0;
  const Seq& s = w.s;
  const Rows& rw = w.rw;
  if (m0 >= rw.rows) return;  // a shorter sequence of a varlen batch: the whole CTA leaves
  const int hk = rw.kv_head();
  const KeyRange kr = key_range<kBN>(p, s, rw, m0, kBM, w.split);

  const int d = p.d;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;

  const int64_t k_ss = p.k_ss * 2, v_ss = p.v_ss * 2;
  const int64_t k_h = hk * p.k_sh * 2, v_h = hk * p.v_sh * 2;
  // Row j of K or V, or null past the sequence.
  auto kv_row = [&](const uint8_t* base, int64_t ss, int64_t head, int j) {
    if (j >= s.sk) return static_cast<const uint8_t*>(nullptr);
    return base + static_cast<int64_t>(j) * ss + head;
  };
  auto load_k = [&](int tile) {
    const int n0 = tile * kBN;
    load_tile<kD, kBN, kThreads>(sk_tile, d, p.k,
                                 [&](int r) { return kv_row(s.k, k_ss, k_h, n0 + r); });
  };
  auto load_v = [&](int tile) {
    const int n0 = tile * kBN;
    load_tile<kD, kBN, kThreads>(sv_tile, d, p.v,
                                 [&](int r) { return kv_row(s.v, v_ss, v_h, n0 + r); });
  };

  load_q<kD, kBM, kThreads>(sq_tile, p, s, rw, m0);
  if (kr.t_lo < kr.t_hi) load_k(kr.t_lo);
  copy_commit();

  // Warps whose rows are all past the sequence only help with the loads.
  const int wrow = warp * 16 * kMT;  // the warp's first row in the tile
  const bool active = m0 + wrow < rw.rows;

  float o[kMT][kDT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int i = 0; i < kDT; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  }
  float row_max[kMT][2], row_sum[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
  const Swizzled<kD> q_addr(smem_u32(sq_tile), wrow + (lane & 15), lane / 16);
  const Swizzled<kD> k_addr(smem_u32(sk_tile), (lane / 16) * 8 + (lane & 7), (lane / 8) & 1);
  const Swizzled<kD> v_addr(smem_u32(sv_tile), ((lane / 8) & 1) * 8 + (lane & 7), lane / 16);

  for (int tile = kr.t_lo; tile < kr.t_hi; ++tile) {
    const int n0 = tile * kBN;
    load_v(tile);
    copy_commit();
    copy_wait<1>();  // Q and K(tile) have landed
    __syncthreads();

    float sc[kMT][kNT][4];
    if (active) qk_tile<T, false>(sc, q_addr, k_addr, d);
    __syncthreads();  // every warp is done with K(tile): its buffer takes K(tile + 1)
    if (tile + 1 < kr.t_hi) load_k(tile + 1);
    copy_commit();

    if (active) {
      log2_scores(sc, p);
      if (kr.crosses(p, n0, kBN, s.sk)) mask_scores(sc, p, rw, kr, s.sk, n0, m0 + wrow);
      online_softmax(sc, o, row_max, row_sum);
    }

    copy_wait<1>();  // V(tile) has landed (K(tile + 1) may still be in flight)
    __syncthreads();
    if (active) pv_tile<T, false>(o, sc, v_addr, d);
    __syncthreads();  // every warp is done with V(tile): its buffer takes V(tile + 1)
  }
  copy_wait<0>();  // nothing may be in flight when the CTA exits (Q alone, if no key tile)

  if (!active) return;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = m0 + wrow + mt * 16 + g + 8 * h;
      const float total = quad_sum(row_sum[mt][h]);
      if (row >= rw.rows) continue;
      const float inv = total > 0.f ? 1.f / total : 0.f;
      const float lse = total > 0.f ? (row_max[mt][h] + __log2f(total)) * kLn2 : -INFINITY;
      const int64_t pos = rw.pos_of(row);
      const int head = rw.head_of(row);
      uint8_t* orow = s.o + pos * p.o_ss * 2 + head * p.o_sh * 2;
#pragma unroll
      for (int i = 0; i < kDT; ++i) {
        const int col = i * 8 + 2 * t4;
        if (col < d) {
          *reinterpret_cast<uint32_t*>(orow + col * 2) =
              pack2<T>(o[mt][i][2 * h] * inv, o[mt][i][2 * h + 1] * inv);
        }
      }
      if (t4 == 0 && (p.flags & kWriteLse)) {
        const int64_t at = (p.flags & kVarlen) ? s.q0 : b * p.lse_sb;
        static_cast<float*>(p.lse)[at + head * p.lse_sh + pos] = lse;
      }
    }
  }
}

}  // namespace ak::attention

// The sm_90a path is only included in the device pass that instantiates it.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "wgmma.cuh"

// fa3 variants serve attn_fwd alone (arch_matrix.toml: ops = ["attn_fwd"]).
#define AK_ENTRY_FA3(symbol, op, T, V)                        \
  extern "C" __global__ void __launch_bounds__(V::threads, 1) \
      symbol(const __grid_constant__ ak_attention_params p) { \
    ak::attention::fa3::Fwd<T, V>::run(p);                    \
  }
#endif

// fa2 variants serve attn_fwd alone (prefill never splits: no attn_combine).
#define AK_ENTRY_FA2(symbol, op, T, V)                        \
  extern "C" __global__ void __launch_bounds__(V::threads, 1) \
      symbol(const __grid_constant__ ak_attention_params p) { \
    ak::attention::fwd<T, V>(p);                              \
  }

#include "decode.cuh"
