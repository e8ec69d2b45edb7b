// Hopper (sm_90a) attention forward, the FlashAttention-3 design: TMA loads into 128B-swizzled
// shared memory, wgmma, warp specialization. Prefill only (dense and varlen, GQA without packing,
// causal / windows, softcap, LSE); paged KV and split-KV decode stay on the FA2 path (the op
// layer never picks this one for them).
//
// Each CTA walks a static list of query tiles of bm = 64 x consumers rows (for_each_tile): for
// dense calls the grid is persistent (at most one CTA per SM), for varlen ones it has one CTA per
// work unit (the op layer decides: the units of a mixed batch differ in size); 1 + consumers
// warpgroups:
//   warpgroup 0   producer: one thread issues the TMA boxes (setmaxnreg.dec: it needs almost no
//                 registers): per query tile Q, then K and V of each key tile into a ring of
//                 `stages` buffers that runs on across tiles (the next tile's K / V land while
//                 the current one finishes), K(j) and V(j) behind separate barriers so S(j) can
//                 start before V(j) lands.
//   warpgroups 1 .. consumers   consumers (setmaxnreg.inc): consumer c owns query rows
//                 [64 c, 64 c + 64). Two (bm 128), or three (bm 192) where a 64-row consumer's
//                 GEMMs are short next to its softmax (d 64): a third warpgroup's softmax then
//                 overlaps the other two's GEMMs.
//
// Tiles in shared memory are the TMA boxes as they land: rows of 64 elements (128 bytes) of the
// head dim, 128B-swizzled, one block of rows per 64 columns of d. S = Q K^T is a wgmma with both
// operands K-major in shared memory. P never leaves registers: the f32 S accumulators of a
// warpgroup, rounded to T in pairs, are exactly the A fragments of O += P V (m64 x k16 A
// fragments share the accumulator layout), and V is read as an MN-major B operand (the transpose
// bit) straight from its row-major tile. Softmax runs online in the log2 domain (the host folds
// scale and log2(e), or the softcap, into scale_log2 / softcap_pre, as for FA2).
//
// Scheduling, per consumer and key tile j: the wgmmas of S(j + 1) and O += P(j) V(j) are issued
// together, then S(j + 1)'s softmax runs while P(j) V(j) is still on the tensor cores
// (intra-warpgroup overlap). The consumers take turns issuing their wgmmas, round-robin (one
// named barrier each): while one runs its softmax, the others' GEMMs have the tensor cores
// (ping-pong).
// At a tile boundary, a consumer's first S and last P V have nothing of its own to overlap
// with: variants with `defer` (for short keys, where a query tile has few key tiles) issue the
// last P V of a tile with the first S of the next one and store the finished tile after that
// S's softmax, carrying the accumulators across tiles (tile_deferred).
//   Variants with `o_tma` store O through shared memory (store_staged): each consumer warp writes
// its 16 finished rows into staging boxes of its own and one lane hands them to TMA stores, so
// the warp is back at its next tile's GEMMs while the stores drain (each global store of the
// register epilogue writes 16 bytes of each of 8 rows).
//   Variants with `early_exp` exponentiate the first columns of each tile of the key loop
// against the rows' reference maxima while the tile's max is still being reduced (softmax): after
// a row's first tile its reference rarely moves (kSlack), and a warp with a row whose reference
// does move computes those columns again, so the results are the plain order's, bit for bit.
//   Variants with `map_split` compile the consumer loop twice, with and without the mapping of
// scores that a softcap or a non-positive scale needs, and pick one copy per launch (consume):
// in a single copy the mapping (a fast_tanh per score, about half the loop's code) sits
// inside every softmax behind a branch that plain calls jump over.
//   Variants with `skip_dark` let a consumer pass the leading key tiles that none of its rows
// sees (pass_dark: a warpgroup whose rows lie past the sequence, the diagonal tiles above a
// causal tile's first rows) with only their turns and ring slots; its tile then starts at the
// first key tile it sees. Variants with `q_ahead` load each tile's Q during the previous tile
// (produce_ahead), not when the K / V ring reaches the tile.
//
// Key tiles are walked from the last to the first, so a causal tile meets its masked key tiles
// first and the rest run without mask arithmetic. Masks, fully masked rows (0 and an LSE of -inf)
// and the visibility rule are the FA2 kernel's. Reads past the end of a dense tensor are zeros (TMA
// bounds); in a varlen batch a tile's rows past its sequence belong to the next one, so keys there
// are masked and the V rows zeroed in shared memory before P V (P is 0 there, but 0 * inf would be
// NaN).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "ak/hopper.cuh"

namespace ak::attention::fa3 {

// Accumulator lists of the S tile widths beyond ak/hopper.cuh's 32 / 64 / 128 registers.
#define AK_FA3_D40                                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39}"
#define AK_FA3_D88                                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "  \
  "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87}"

// d (m64 x kN f32) = a * b (+ d unless scale_d == 0): one k16 step, A and B from shared memory,
// both K-major. kN: the key tile widths of the variants.
template <class T, int kN>
__device__ __forceinline__ void mma_ss(float (&d)[kN / 2], uint64_t a, uint64_t b,
                                       uint32_t scale_d) {
  static_assert(kN == 64 || kN == 80 || kN == 128 || kN == 176, "S tile widths of this path");
#define AK_FA3_SS_T(N, TYPE, DREGS, IA, IB, IS, ...)                                              \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS                                            \
               ", 0;\n"                                                                           \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " " DREGS ", %" IA \
               ", %" IB ", p, 1, 1, 0, 0;\n}\n"                                                   \
               : __VA_ARGS__                                                                      \
               : "l"(a), "l"(b), "r"(scale_d))
#define AK_FA3_SS(N, ...)                      \
  if constexpr (kN == N) {                     \
    if constexpr (std::is_same_v<T, __half>) { \
      AK_FA3_SS_T(N, "f16", __VA_ARGS__);      \
    } else {                                   \
      AK_FA3_SS_T(N, "bf16", __VA_ARGS__);     \
    }                                          \
  }
  AK_FA3_SS(64, AK_WG_D32, "32", "33", "34", AK_WG_ACC32("+f"))
  AK_FA3_SS(80, AK_FA3_D40, "40", "41", "42", AK_WG_ACC32("+f"), AK_WG_ACC8("+f", 32))
  AK_FA3_SS(128, AK_WG_D64, "64", "65", "66", AK_WG_ACC64("+f", 0))
  AK_FA3_SS(176, AK_FA3_D88, "88", "89", "90", AK_WG_ACC64("+f", 0), AK_WG_ACC8("+f", 64),
            AK_WG_ACC8("+f", 72), AK_WG_ACC8("+f", 80))
#undef AK_FA3_SS_T
#undef AK_FA3_SS
}

// d (m64 x kN f32) += a * b: one k16 step, A (m64 x k16) from registers (4 per thread), B from
// shared memory MN-major (transpose bit set).
template <class T, int kN>
__device__ __forceinline__ void mma_rs(float (&d)[kN / 2], const uint32_t* a, uint64_t b) {
  static_assert(kN == 64 || kN == 128 || kN == 256, "head dims of this path");
#define AK_FA3_RS(TYPE, DREGS, A0, A1, A2, A3, IB, IS, ...)                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS                                         \
               ", 0;\n"                                                                        \
               "wgmma.mma_async.sync.aligned.m64n" #TYPE " " DREGS ", {%" A0 ", %" A1 ", %" A2 \
               ", %" A3 "}, %" IB ", p, 1, 1, 1;\n}\n"                                         \
               : __VA_ARGS__                                                                   \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))
  if constexpr (std::is_same_v<T, __half> && kN == 64) {
    AK_FA3_RS(64k16.f32.f16.f16, AK_WG_D32, "32", "33", "34", "35", "36", "37", AK_WG_ACC32("+f"));
  } else if constexpr (std::is_same_v<T, __half> && kN == 128) {
    AK_FA3_RS(128k16.f32.f16.f16, AK_WG_D64, "64", "65", "66", "67", "68", "69",
              AK_WG_ACC64("+f", 0));
  } else if constexpr (std::is_same_v<T, __half>) {
    AK_FA3_RS(256k16.f32.f16.f16, AK_WG_D128, "128", "129", "130", "131", "132", "133",
              AK_WG_ACC64("+f", 0), AK_WG_ACC64("+f", 64));
  } else if constexpr (kN == 64) {
    AK_FA3_RS(64k16.f32.bf16.bf16, AK_WG_D32, "32", "33", "34", "35", "36", "37",
              AK_WG_ACC32("+f"));
  } else if constexpr (kN == 128) {
    AK_FA3_RS(128k16.f32.bf16.bf16, AK_WG_D64, "64", "65", "66", "67", "68", "69",
              AK_WG_ACC64("+f", 0));
  } else {
    AK_FA3_RS(256k16.f32.bf16.bf16, AK_WG_D128, "128", "129", "130", "131", "132", "133",
              AK_WG_ACC64("+f", 0), AK_WG_ACC64("+f", 64));
  }
#undef AK_FA3_RS
}

template <class T, class V>
struct Fwd {
  static constexpr int kD = V::d, kBM = V::bm, kBN = V::bn, kStages = V::stages;
  static constexpr int kQBufs = V::q_bufs;  // 2: the next tile's Q lands while this one runs
  static constexpr bool kDefer = V::defer;  // a tile's last P V runs with the next tile's first S
  static constexpr int kConsumers = kBM / 64;
  static constexpr int kDB = kD / 64;      // 64-column (128-byte) blocks of the head dim
  static constexpr bool kOTma = V::o_tma;  // the epilogue stores O through shared memory, TMA
  static constexpr int kQBytes = kBM * kD * 2, kKVBytes = kBN * kD * 2;
  // kOTma: a warp stages its 16 rows of O kOCols columns at a time (d 256: in two parts, the
  // 32 KiB that eight warps' 128 columns take being what its shared memory has left).
  static constexpr int kOCols = kD < 128 ? kD : 128, kWarpOBytes = 16 * kOCols * 2;
  // The Q buffers, the K ring, the V ring, the O staging boxes (kOTma), then the barriers:
  // q_full[], q_empty[], k_full[], k_empty[], v_full[], v_empty[].
  static constexpr int kKOff = kQBufs * kQBytes, kVOff = kKOff + kStages * kKVBytes;
  static constexpr int kOOff = kVOff + kStages * kKVBytes;
  static constexpr int kBarOff = kOOff + (kOTma ? 4 * kConsumers * kWarpOBytes : 0);
  static constexpr int kSmemUsed = kBarOff + (2 * kQBufs + 4 * kStages) * 8 + 1024;  // + align
  static constexpr int kS = kBN / 2, kO = kD / 2, kP = kBN / 4;  // registers per thread
  // How far (log2 units) a tile's max may pass a row's reference max before the reference moves
  // (softmax): P then stays below 2^8, well inside f16.
  static constexpr float kSlack = 8.f;
  // setmaxnreg: 2 consumers x 128 x 232 + 128 x 40 = 64512 of the 64K-register file; 3 x 128 x
  // 160 + 128 x 32 = 65536 (bm 192: S, P and O of a 128-key tile take 128 of the 160).
  static constexpr int kProducerRegs = kConsumers == 2 ? 40 : 32;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 232 : 160;
  // Named barriers: kTurnBar + c consumer c's turn at the tensor cores, kOwnBar + c consumer c
  // alone.
  static constexpr int kTurnBar = 1, kOwnBar = kTurnBar + kConsumers;

  static_assert(kConsumers == 2 || kConsumers == 3, "two or three consumer warpgroups");
  static_assert(!kDefer || kConsumers == 2, "the deferred schedule runs with two consumers");
  static_assert(V::threads == 128 * (kConsumers + 1), "one producer warpgroup");
  static_assert(kD % 64 == 0 && kBN % 16 == 0 && kBN <= 256, "tile shapes");
  static_assert(kSmemUsed <= V::smem, "pipeline does not fit the variant's shared memory");

  struct Work {
    Seq s;
    int m0, head, hk, b;
    int t_lo, t_hi;  // key tiles [t_lo, t_hi), walked from t_hi - 1 down; none past the sequence
    int64_t shift;   // sk - sq: the bottom-right alignment of the masks
  };

  struct Bars {
    uint32_t q_full, q_empty, k_full, k_empty, v_full, v_empty;
    explicit __device__ __forceinline__ Bars(uint32_t smem)
        : q_full(smem + kBarOff),
          q_empty(q_full + 8 * kQBufs),
          k_full(q_empty + 8 * kQBufs),
          k_empty(k_full + 8 * kStages),
          v_full(k_empty + 8 * kStages),
          v_empty(v_full + 8 * kStages) {}
  };

  // This thread's consumer warpgroup (0 .. kConsumers - 1), broadcast from lane 0: the compiler
  // then knows it is warp-uniform and keeps the Q descriptors made from it, and their per-wgmma
  // offsets, in uniform registers instead of vector ones next to the softmax's.
  static __device__ __forceinline__ int consumer_index() {
    const int wg = static_cast<int>(threadIdx.x / 128) - 1;
    if constexpr (V::wg_uniform) {
      return __shfl_sync(~0u, wg, 0);
    } else {
      return wg;
    }
  }

  // The consumer whose turn follows consumer wg's (round-robin).
  static __device__ __forceinline__ int next_of(int wg) {
    if constexpr (kConsumers == 2) {
      return 1 - wg;
    } else {
      return wg + 1 == kConsumers ? 0 : wg + 1;
    }
  }

  static __device__ __forceinline__ Work work(const ak_attention_params& p, int mb, int head,
                                              int b) {
    Work w;
    w.b = b;
    w.s = sequence(p, b);
    w.m0 = mb * kBM;
    w.head = head;
    w.hk = head / (p.heads / p.kv_heads);
    w.shift = static_cast<int64_t>(w.s.sk) - w.s.sq;
    const int64_t pos_hi = min(w.m0 + kBM, w.s.sq) - 1;
    const int64_t key_lo = max(int64_t{0}, w.m0 + w.shift - p.window_left);
    const int64_t key_hi = min(static_cast<int64_t>(w.s.sk), pos_hi + w.shift + p.window_right + 1);
    w.t_lo = static_cast<int>(key_lo / kBN);
    w.t_hi = key_hi > key_lo && w.m0 < w.s.sq ? static_cast<int>((key_hi + kBN - 1) / kBN) : w.t_lo;
    return w;
  }

  // The schedule, the same for every warpgroup of a CTA: work unit u (CTA x, then
  // x + gridDim.x, ...) is the pair of query tiles mb and M - 1 - mb of one (head, sequence),
  // the later tile first. A causal pair holds M + 1 key tiles whatever mb is, so the static
  // round-robin stays balanced; consecutive units share a head, so the CTAs in flight read the
  // same K / V from L2. Results of a tile never depend on which CTA runs it.
  //   With bm 192, M is odd at lengths of 2^k (3 tiles at 512): a middle tile alone would be a
  // unit of half the work, and where gridDim.x is a multiple of the units per head the same CTAs
  // get every such unit. There the units are the pairs of all heads, then the middle tiles of
  // two consecutive (head, sequence) rows (fa3_units on the host counts them alike). bm 128
  // keeps the first form: its tile counts at 2^k are even, and its code stays as measured.
  template <class F>
  static __device__ __forceinline__ void for_each_tile(const ak_attention_params& p, F&& f) {
    // One flat loop (both tiles of a unit decoded from u each time): less state stays live
    // across a tile.
    // Unsigned: units < 2^31 (the host's bound), so u + gridDim.x cannot wrap.
    const uint32_t mbs = (p.seqlen_q + kBM - 1) / kBM, heads = p.heads;
    if constexpr (kConsumers == 2) {
      const uint32_t pairs = (mbs + 1) / 2, units = pairs * heads * p.batch;
      for (uint32_t u = blockIdx.x, second = 0; u < units;
           u += second ? gridDim.x : 0, second ^= 1) {
        const uint32_t k = u % pairs, hb = u / pairs;
        const uint32_t mb = second ? k : mbs - 1 - k;
        if (second && mb == mbs - 1 - k) continue;  // the middle tile of an odd count: no pair
        f(work(p, static_cast<int>(mb), static_cast<int>(hb % heads),
               static_cast<int>(hb / heads)));
      }
    } else {
      const uint32_t half = mbs / 2, rows = heads * p.batch, paired = half * rows;
      const uint32_t units = paired + (mbs % 2) * ((rows + 1) / 2);
      for (uint32_t u = blockIdx.x, second = 0; u < units;
           u += second ? gridDim.x : 0, second ^= 1) {
        uint32_t mb = half, hb = 2 * (u - paired) + second;
        if (u < paired) {
          const uint32_t k = u % half;
          mb = second ? k : mbs - 1 - k;
          hb = u / half;
        } else if (hb >= rows) {
          continue;  // an odd row count: the last middle tile has no partner
        }
        f(work(p, static_cast<int>(mb), static_cast<int>(hb % heads),
               static_cast<int>(hb / heads)));
      }
    }
  }

  // Map coordinates (d, head, row, batch) of a tile's TMA boxes, and its key tiles; varlen maps
  // are [total, H, d] with a unit batch.
  struct Boxes {
    int32_t qb, q_row, k_row, head, hk, t_lo, t_hi;
  };

  // One thread issues every TMA box. `it` counts key tiles through the K / V ring across the
  // CTA's tiles, so the next tile's loads start while the consumers finish the current one; Q
  // waits until both consumers have issued their last S of the previous tile. A tile without
  // key tiles loads no Q (its consumers never read one).
  //   q_ahead (two Q buffers): each tile's Q is issued after the previous tile's first V, a whole
  // tile ahead of its first S, instead of with its own first K / V, when the ring (two or four
  // key tiles ahead) reaches it: short tiles waited on Q, which comes from DRAM. Its buffer held
  // the Q of the tile two back, which the consumers give back with that tile's last S: with two
  // stages about when the ring has room for the previous tile's first V anyway, with four a
  // little after.
  static __device__ __forceinline__ void produce(const ak_attention_params& p, uint32_t smem) {
    static_assert(!V::q_ahead || kQBufs == 2, "q_ahead loads a Q while the previous one is read");
    const Bars bar(smem);
    const bool varlen = p.flags & kVarlen;
    uint32_t it = 0, tq = 0;
    auto load_q = [&](const Boxes& x) {
      if (x.t_hi == x.t_lo) return;
      const uint32_t qi = tq % kQBufs, q_full = bar.q_full + 8 * qi;
      bar_wait(bar.q_empty + 8 * qi, ((tq / kQBufs) & 1) ^ 1);
      bar_arrive_expect_tx(q_full, kQBytes);
#pragma unroll
      for (int j = 0; j < kDB; ++j) {
        tma_load_4d(smem + qi * kQBytes + j * kBM * 128, &p.tmap_q, q_full, 64 * j, x.head, x.q_row,
                    x.qb);
      }
      ++tq;
    };
    // The key tiles of x; with q_ahead, the Q of the tile after it (has_next) after its first V.
    auto load_kv = [&](const Boxes& x, const Boxes& next, bool has_next) {
      const int n = x.t_hi - x.t_lo;
      for (int i = 0; i < n; ++i, ++it) {
        const uint32_t stage = it % kStages, phase = (it / kStages) & 1;
        const int32_t row = x.k_row + (x.t_hi - 1 - i) * kBN;
        // Parity phase ^ 1 passes at once on a fresh barrier: the ring starts empty.
        bar_wait(bar.k_empty + 8 * stage, phase ^ 1);
        bar_arrive_expect_tx(bar.k_full + 8 * stage, kKVBytes);
        const uint32_t k = smem + kKOff + stage * kKVBytes, v = smem + kVOff + stage * kKVBytes;
#pragma unroll
        for (int j = 0; j < kDB; ++j) {
          tma_load_4d(k + j * kBN * 128, &p.tmap_k, bar.k_full + 8 * stage, 64 * j, x.hk, row,
                      x.qb);
        }
        if (!V::q_ahead && i == 0) load_q(x);
        bar_wait(bar.v_empty + 8 * stage, phase ^ 1);
        bar_arrive_expect_tx(bar.v_full + 8 * stage, kKVBytes);
#pragma unroll
        for (int j = 0; j < kDB; ++j) {
          tma_load_4d(v + j * kBN * 128, &p.tmap_v, bar.v_full + 8 * stage, 64 * j, x.hk, row,
                      x.qb);
        }
        if (V::q_ahead && i == 0 && has_next) load_q(next);
      }
      if (V::q_ahead && n == 0 && has_next) load_q(next);
    };
    Boxes cur{};
    bool have = false;
    for_each_tile(p, [&](const Work& w) {
      const Boxes x{varlen ? 0 : w.b,
                    static_cast<int32_t>(w.s.q0) + w.m0,
                    static_cast<int32_t>(w.s.k0),
                    w.head,
                    w.hk,
                    w.t_lo,
                    w.t_hi};
      if constexpr (V::q_ahead) {
        if (have) {
          load_kv(cur, x, true);
        } else {
          load_q(x);
        }
        cur = x;
        have = true;
      } else {
        load_kv(x, x, false);
      }
    });
    if (V::q_ahead && have) load_kv(cur, cur, false);
  }

  // exp2 as the bare MUFU.EX2: exp2f's handling of results below 2^-126 costs three more
  // instructions per score; such probabilities round to 0 in T's P anyway (f16), or carry no
  // weight next to the row's maximum term, 1 (bf16).
  static __device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  }

  // Whether softmax maps the scores before the max (a softcap, or a scale the max does not
  // commute with).
  static __device__ __forceinline__ bool mapped_scores(const ak_attention_params& p) {
    return (p.flags & kSoftcap) || !(p.scale_log2 > 0.f);
  }

  // Whether key tile `tile` crosses a bound of the rows [wg_lo, wg_lo + 64) (the keys' end, the
  // diagonal, a window's edge): the softmax masks scores of such tiles only.
  static __device__ __forceinline__ bool crosses(const ak_attention_params& p, const Work& w,
                                                 int tile, int wg_lo) {
    const int n0 = tile * kBN;
    const int64_t pos_lo = wg_lo, pos_hi = wg_lo + 63;
    return n0 + kBN > w.s.sk || n0 < pos_hi + w.shift - p.window_left ||
           n0 + kBN - 1 > pos_lo + w.shift + p.window_right;
  }

  // crosses() for the softmax after the next wgmma wait, evaluated ahead of that wait: the empty
  // asm keeps the compiler from sinking its 64-bit tests past the wait's asm to their use, inside
  // the softmax, where they sat behind a branch between S landing and P; here ptxas makes them
  // predicated code beside the wait.
  static __device__ __forceinline__ bool crosses_ahead(const ak_attention_params& p, const Work& w,
                                                       int tile, int wg_lo) {
    uint32_t e = crosses(p, w, tile, wg_lo);
    asm volatile("" : "+r"(e));
    return e != 0;
  }

  // Scores of key tile `tile` to probabilities: log2-domain logits, the mask where the tile
  // crosses a bound of this warpgroup's rows (`edge`: crosses()), the reference max and the sum.
  // alpha: how much the accumulated O rows shrink. kMap: 1 the scores are mapped, 0 they are
  // not, -1 test p.
  //   A row keeps its reference max until a tile's max exceeds it by more than kSlack (log2
  // units): the row's probabilities then stay below 2^kSlack (f16's P holds them), its sum and
  // O are relative to the same reference, so O / sum and the LSE (reference + log2(sum)) are the
  // same up to rounding, and alpha stays exactly 1 on most tiles after a row's first: the O
  // rescale, kO multiplies per tile, is skipped.
  //   kEarly (the key loop's V::early_exp; 0 on a query tile's first key tile, where no row has
  // a reference yet): the first 8 kEarly columns' probabilities go to e, the rest stay in s.
  template <int kMap, int kEarly>
  static __device__ __forceinline__ void softmax(const ak_attention_params& p, const Work& w,
                                                 int tile, bool edge, int wg_lo, int row0,
                                                 float (&s)[kS], float (&e)[kS], float (&mx)[2],
                                                 float (&sum)[2], float (&alpha)[2]) {
    const int t4 = threadIdx.x % 4;
    // With a positive scale the scores stay raw (the max commutes with it) and each
    // probability is exp2(fma(s, scale, -max)); a softcap or another scale maps them first.
    const bool mapped = kMap < 0 ? mapped_scores(p) : kMap == 1;
    if (mapped) {  // one branch for both (a separate plain-scale one becomes unconditional)
      const bool cap = p.flags & kSoftcap;
#pragma unroll
      for (int i = 0; i < kS; ++i) {
        s[i] = (cap ? fast_tanh(s[i] * p.softcap_pre) : s[i]) * p.scale_log2;
      }
    }
    const float sc = mapped ? 1.f : p.scale_log2;
    const int n0 = tile * kBN;
    if (edge) {
      // Per row, the visible columns [lo, hi] of this tile, clamped to it in 64 bits so that
      // the per-score tests are 32-bit, then less this thread's first column 2 t4: each score's
      // test compares them with a constant.
      int lo[2], hi[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t at = row0 + 8 * h + w.shift - n0;  // the row's aligned key, tile-relative
        const int64_t last = min(at + p.window_right, static_cast<int64_t>(w.s.sk) - 1 - n0);
        hi[h] = static_cast<int>(max(int64_t{-1}, min(last, int64_t{kBN}))) - 2 * t4;
        lo[h] = static_cast<int>(max(int64_t{0}, min(at - p.window_left, int64_t{kBN}))) - 2 * t4;
      }
#pragma unroll
      for (int i = 0; i < kS; ++i) {
        const int c = 8 * (i / 4) + (i % 2), h = (i / 2) % 2;  // the score's column less 2 t4
        if (c < lo[h] || c > hi[h]) s[i] = -INFINITY;
      }
    }
    // The row's max of the tile, times sc.
    auto row_max = [&](int h) {
      float m0 = -INFINITY, m1 = -INFINITY;  // two chains: half the dependent FMNMX latency
#pragma unroll
      for (int j = 0; j < kBN / 8; j += 2) {
        m0 = fmaxf(m0, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        if (j + 1 < kBN / 8) m1 = fmaxf(m1, fmaxf(s[4 * j + 4 + 2 * h], s[4 * j + 5 + 2 * h]));
      }
      return quad_max(fmaxf(m0, m1)) * sc;
    };
    // -inf + kSlack is -inf: a row's first tile with a visible key sets its reference. The
    // reference of a row with every score masked so far stays -inf, and its exponentials take
    // 0 for it (exp2(-inf - 0) = 0).
    if constexpr (kEarly == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m = row_max(h);
        const bool moved = m > mx[h] + kSlack;
        const float ref = moved ? m : (mx[h] == -INFINITY ? 0.f : mx[h]);
        alpha[h] = moved ? ex2(mx[h] - m) : 1.f;
        mx[h] = moved ? m : mx[h];
        float add0 = 0.f, add1 = 0.f;
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          s[4 * j + 2 * h] = ex2(fmaf(s[4 * j + 2 * h], sc, -ref));
          s[4 * j + 2 * h + 1] = ex2(fmaf(s[4 * j + 2 * h + 1], sc, -ref));
          (j % 2 ? add1 : add0) += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
        }
        sum[h] = sum[h] * alpha[h] + (add0 + add1);
      }
    } else {
      // The exponentials of the tile's first 8 kEarly columns go to e (s keeps the scores)
      // against the rows' current references before the max is known: they keep the MUFU busy
      // through the max's FMNMX chains and quad shuffles. A warp with a row whose reference
      // moves computes them again, so every probability, and the sum's order of additions, is
      // what the plain order gives, bit for bit.
      static_assert(8 * kEarly <= kBN, "early columns within the tile");
      float ref[2], add[2][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) ref[h] = mx[h] == -INFINITY ? 0.f : mx[h];
      auto early = [&]() {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          add[h][0] = add[h][1] = 0.f;
#pragma unroll
          for (int j = 0; j < kEarly; ++j) {
            const int i = 4 * j + 2 * h;
            e[i] = ex2(fmaf(s[i], sc, -ref[h]));
            e[i + 1] = ex2(fmaf(s[i + 1], sc, -ref[h]));
            add[h][j % 2] += e[i] + e[i + 1];
          }
        }
      };
      early();
      bool redo = false;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float m = row_max(h);
        const bool moved = m > mx[h] + kSlack;
        redo |= moved;
        ref[h] = moved ? m : ref[h];
        alpha[h] = moved ? ex2(mx[h] - m) : 1.f;
        mx[h] = moved ? m : mx[h];
      }
      // early_vote: a NaN early sum (from a NaN score) redoes the early columns too, which
      // changes nothing; what it buys is the vote's dependency on every early exponential, so
      // that ptxas issues them beside the max's FMNMX chains instead of after the chains.
      if constexpr (V::early_vote) {
#pragma unroll
        for (int h = 0; h < 2; ++h) redo |= add[h][0] != add[h][0] || add[h][1] != add[h][1];
      }
      if (__any_sync(~0u, redo)) early();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int j = kEarly; j < kBN / 8; ++j) {
          const int i = 4 * j + 2 * h;
          s[i] = ex2(fmaf(s[i], sc, -ref[h]));
          s[i + 1] = ex2(fmaf(s[i + 1], sc, -ref[h]));
          add[h][j % 2] += s[i] + s[i + 1];
        }
        sum[h] = sum[h] * alpha[h] + (add[h][0] + add[h][1]);
      }
    }
  }

  // P's A fragments from softmax's probabilities (pairs rounded to T): the first 2 early pairs
  // (softmax's kEarly) from e, the rest from s.
  static __device__ __forceinline__ void to_p(uint32_t (&pf)[kP], const float (&s)[kS],
                                              const float (&e)[kS], int early) {
#pragma unroll
    for (int i = 0; i < kP; ++i) {
      pf[i] = i < 2 * early ? pack2<T>(e[2 * i], e[2 * i + 1]) : pack2<T>(s[2 * i], s[2 * i + 1]);
    }
  }

  // Varlen: rows of a V tile past the sequence hold the next sequence's values; zero them (in
  // the consumer's own view: both consumers write the same zeros) before P V reads them.
  static __device__ __forceinline__ void clip_v(const Work& w, int tile, uint32_t v, int wg) {
    const int first = w.s.sk - tile * kBN;
    if (first >= kBN) return;
    constexpr int kChunks = kDB * 8;  // 16-byte chunks per row
    for (int i = threadIdx.x % 128; i < (kBN - first) * kChunks; i += 128) {
      const int r = first + i / kChunks, c = i % kChunks;
      const uint32_t at = v + (c / 8) * kBN * 128 + r * 128 + (c % 8) * 16;
      asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(at), "r"(0) : "memory");
    }
    fence_proxy_async();
    named_sync(kOwnBar + wg, 128);
  }

  // One query tile of this consumer's 64 rows. `it` / `tq`: the ring position and Q loads so
  // far (the producer's order); each round takes this consumer's turn at the tensor cores and
  // hands it to the next consumer.
  template <int kMap>
  static __device__ __forceinline__ void tile(const ak_attention_params& p, const Work& w,
                                              uint32_t smem, uint32_t& it, uint32_t& tq) {
    const Bars bar(smem);
    const int wg = consumer_index(), next = next_of(wg);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    const int wg_lo = w.m0 + wg * 64;
    const int row0 = wg_lo + warp * 16 + lane / 4;  // and row0 + 8
    const int n = w.t_hi - w.t_lo;
    const bool varlen = p.flags & kVarlen;
    float o[kO];
#pragma unroll
    for (int i = 0; i < kO; ++i) o[i] = 0.f;
    float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.f, 0.f}, alpha[2];
    if (n > 0) {
      float s[kS], e[kS];  // e: the loop's early probabilities (V::early_exp)
      uint32_t pf[kP];
      const uint32_t qi = tq % kQBufs;
      const uint64_t qd = smem_desc(smem + qi * kQBytes + wg * 64 * 128, 16, 1024);
      auto issue_s = [&](uint32_t stage) {
        const uint64_t kd = smem_desc(smem + kKOff + stage * kKVBytes, 16, 1024);
#pragma unroll
        for (int j = 0; j < kDB; ++j) {
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) {
            mma_ss<T, kBN>(s, qd + ((j * kBM * 128 + kk * 32) >> 4),
                           kd + ((j * kBN * 128 + kk * 32) >> 4), (j | kk) != 0);
          }
        }
      };
      auto issue_pv = [&](uint32_t stage) {
        const uint64_t vd = smem_desc(smem + kVOff + stage * kKVBytes, kBN * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk) mma_rs<T, kD>(o, pf + 4 * kk, vd + (kk * 2048 >> 4));
      };
      auto release = [&](uint32_t b) {
        if (lane == 0) bar_arrive(b);
      };
      auto v_ready = [&](int i) {
        const uint32_t stage = (it + i) % kStages;
        bar_wait(bar.v_full + 8 * stage, ((it + i) / kStages) & 1);
        if (varlen) clip_v(w, w.t_hi - 1 - i, smem + kVOff + stage * kKVBytes, wg);
      };

      bar_wait(bar.q_full + 8 * qi, (tq / kQBufs) & 1);
      bar_wait(bar.k_full + 8 * (it % kStages), (it / kStages) & 1);
      named_sync(kTurnBar + wg, 256);
      fence_acc(s);
      wgmma_fence();
      issue_s(it % kStages);
      wgmma_commit();
      named_arrive(kTurnBar + next, 256);
      const bool edge0 = crosses_ahead(p, w, w.t_hi - 1, wg_lo);
      wgmma_wait<0>();
      fence_acc(s);
      release(bar.k_empty + 8 * (it % kStages));
      if (n == 1) release(bar.q_empty + 8 * qi);
      softmax<kMap, 0>(p, w, w.t_hi - 1, edge0, wg_lo, row0, s, e, mx, sum, alpha);
      to_p(pf, s, e, 0);
      for (int i = 1; i < n; ++i) {
        const uint32_t stage = (it + i) % kStages, prev = (it + i - 1) % kStages;
        bar_wait(bar.k_full + 8 * stage, ((it + i) / kStages) & 1);
        v_ready(i - 1);
        named_sync(kTurnBar + wg, 256);
        fence_acc(s);
        fence_acc(o);
        fence_acc(pf);
        wgmma_fence();
        issue_s(stage);
        wgmma_commit();
        issue_pv(prev);
        wgmma_commit();
        named_arrive(kTurnBar + next, 256);
        const bool edge = crosses_ahead(p, w, w.t_hi - 1 - i, wg_lo);
        wgmma_wait<1>();  // S(i) has landed; P(i - 1) V(i - 1) may still run
        fence_acc(s);
        release(bar.k_empty + 8 * stage);
        if (i == n - 1) release(bar.q_empty + 8 * qi);  // the producer may refill this Q buffer
        softmax<kMap, V::early_exp>(p, w, w.t_hi - 1 - i, edge, wg_lo, row0, s, e, mx, sum, alpha);
        // Once a row's reference settles (kSlack), alpha is exactly 1 and the rescale is
        // skipped (warp-uniformly). The branch also keeps the wait for P(i - 1) V(i - 1) behind the
        // softmax: without one, ptxas hoists the wait above it and the two no longer overlap.
        if (__any_sync(~0u, alpha[0] != 1.f || alpha[1] != 1.f)) {
          wgmma_wait<0>();
          fence_acc(o);
          fence_acc(pf);
#pragma unroll
          for (int i2 = 0; i2 < kO; ++i2) o[i2] *= alpha[(i2 / 2) % 2];
        } else {
          wgmma_wait<0>();
          fence_acc(o);
          fence_acc(pf);
        }
        release(bar.v_empty + 8 * prev);
        to_p(pf, s, e, V::early_exp);
      }
      const uint32_t last = (it + n - 1) % kStages;
      v_ready(n - 1);
      fence_acc(o);
      fence_acc(pf);
      wgmma_fence();
      issue_pv(last);
      wgmma_commit();
      wgmma_wait<0>();
      fence_acc(o);
      release(bar.v_empty + 8 * last);
      it += n;
      ++tq;
    }
    store(p, smem, w, row0, o, mx, sum);
  }

  // skip_dark: the leading key tiles of w (the first walked, from t_hi - 1 down) that no row of
  // consumer wg sees (all of them where its rows lie past the sequence, as in the last 192-row
  // tile of 512 or 1024 queries; the tiles above the diagonal of a causal 192-row tile's first
  // rows) are passed without S, softmax or P V: the consumer still takes their turns and frees
  // their ring slots (each once it has landed, so that no arrival counts toward an earlier
  // phase), and Q where it passes every tile. Returns their count; tile() runs the rest, from a
  // first tile of its own. Such a tile adds nothing to the rows: its probabilities are all 0.
  static __device__ __forceinline__ int pass_dark(const ak_attention_params& p, const Work& w,
                                                  uint32_t smem, int wg, uint32_t& it,
                                                  uint32_t& tq) {
    const Bars bar(smem);
    const int n = w.t_hi - w.t_lo, wg_lo = w.m0 + wg * 64;
    int dark = n;
    if (wg_lo < w.s.sq) {
      const int64_t row_hi = min(wg_lo + 63, w.s.sq - 1);
      const int64_t last = min(row_hi + w.shift + p.window_right, static_cast<int64_t>(w.s.sk) - 1);
      const int64_t lit_hi = last < 0 ? 0 : last / kBN + 1;  // tiles below it hold a seen key
      dark = static_cast<int>(max(int64_t{0}, min(w.t_hi - lit_hi, static_cast<int64_t>(n))));
    }
    const bool lead = threadIdx.x % 32 == 0;
    for (int i = 0; i < dark; ++i, ++it) {
      const uint32_t stage = it % kStages, phase = (it / kStages) & 1;
      bar_wait(bar.k_full + 8 * stage, phase);
      if (lead) bar_arrive(bar.k_empty + 8 * stage);
      if (i == n - 1) {
        const uint32_t qi = tq % kQBufs;
        bar_wait(bar.q_full + 8 * qi, (tq / kQBufs) & 1);
        if (lead) bar_arrive(bar.q_empty + 8 * qi);
        ++tq;
      }
      named_sync(kTurnBar + wg, 256);
      named_arrive(kTurnBar + next_of(wg), 256);
      bar_wait(bar.v_full + 8 * stage, phase);
      if (lead) bar_arrive(bar.v_empty + 8 * stage);
    }
    return dark;
  }

  // The deferred schedule (kDefer): a tile's last P V is issued with the next tile's first S, in
  // one turn where tile() has two half ones (S(0) alone, the last P V alone), and the finished
  // tile is stored after that S's softmax. It is tile()'s schedule with another first round and
  // end, written out in full (tile_deferred repeats tile()'s rounds, store_to store()'s row
  // writes): sharing the code (helpers, or one function with the deferred parts under if
  // constexpr) changed the SASS ptxas makes of tile() for the other variants, and of this
  // schedule, with speed moving by a few per cent either way; written apart, tile() compiles as
  // it did before this schedule existed.

  // Where a consumer's rows of a tile go: the output of its head and sequence, and position 0
  // of them in p.lse.
  struct Dest {
    uint8_t* o;
    int64_t lse;
    int row0, sq;
    int head, mrow, mb;  // kOTma: the out map's head, row of position 0 and batch coordinates
  };

  static __device__ __forceinline__ Dest dest_of(const ak_attention_params& p, const Work& w,
                                                 int row0) {
    const bool varlen = p.flags & kVarlen;
    Dest to;
    to.o = w.s.o + w.head * p.o_sh * 2;
    to.lse = (varlen ? w.s.q0 : w.b * p.lse_sb) + w.head * p.lse_sh;
    to.row0 = row0;
    to.sq = w.s.sq;
    to.head = w.head;
    to.mrow = varlen ? static_cast<int>(w.s.q0) : 0;
    to.mb = varlen ? 0 : w.b;
    return to;
  }

  // A consumer's registers across its tiles: o / pf / pmx / psum / to belong to the pending tile
  // (pend) from the end of its last round until the next tile's first round has run its P V.
  struct State {
    float o[kO];
    uint32_t pf[kP];
    float mx[2], sum[2], pmx[2], psum[2];
    uint32_t it, tq;  // key tiles through the K / V ring and Q loads so far (the producer's order)
    bool pend;
    Dest to;
  };

  static __device__ __forceinline__ void pv_of(uint32_t smem, uint32_t stage, State& st) {
    const uint64_t vd = smem_desc(smem + kVOff + stage * kKVBytes, kBN * 128, 1024);
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      mma_rs<T, kD>(st.o, st.pf + 4 * kk, vd + (kk * 2048 >> 4));
    }
  }

  // The epilogue of one warp's 16 rows through shared memory (kOTma): o times the rows' inv,
  // rounded to T, goes into the warp's own staging boxes (64 columns x 16 rows each, the out
  // map's 128B swizzle) by stmatrix, and one thread hands each box to a TMA store. The warp goes
  // on to its next tile while the stores drain; its boxes are only rewritten once the previous
  // stores have read them. No barrier beyond the warp's own.
  //   The dense out map clips rows past the sequence; a varlen one holds the next sequence's
  //   rows there, so a varlen warp whose rows cross the end (and every warp, where the output
  //   has no map) copies its rows before the end out of the boxes in 16-byte pieces instead.
  static __device__ __forceinline__ void store_staged(const ak_attention_params& p, uint32_t smem,
                                                      const Dest& to, const float (&o)[kO],
                                                      const float (&inv)[2]) {
    const int lane = threadIdx.x % 32, lo = to.row0 - lane / 4;  // the warp's first row
    uint32_t box = smem + kOOff + (threadIdx.x / 32 - 4) * kWarpOBytes;
    // Opaque to the compiler: the stmatrix addresses below are not hoisted out of the tile
    // loop, where they would hold registers across every round.
    asm volatile("" : "+r"(box));
    const bool tma = (p.flags & kTmaOut) && (!(p.flags & kVarlen) || lo + 16 <= to.sq);
    constexpr int kChunks = kOCols / 8;  // 16-byte chunks per row and part
#pragma unroll
    for (int part = 0; part < kD / kOCols; ++part) {
      if (lane == 0) bulk_wait<true>();
      __syncwarp();
      // stmatrix x4 takes four 8 x 8 matrices: rows 0-7 / 8-15 of 16-byte chunk 2j, then of
      // chunk 2j + 1; lane l gives the address of row l % 16 of chunk 2j + l / 16.
#pragma unroll
      for (int j = 0; j < kOCols / 16; ++j) {
        const float* a = o + 8 * (j + part * kOCols / 16);
        const uint32_t c = 2 * j + lane / 16, r = lane % 16;
        const uint32_t at = box + c / 8 * 2048 + r * 128 + ((c % 8) ^ (r % 8)) * 16;
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(at),
                     "r"(pack2<T>(a[0] * inv[0], a[1] * inv[0])),
                     "r"(pack2<T>(a[2] * inv[1], a[3] * inv[1])),
                     "r"(pack2<T>(a[4] * inv[0], a[5] * inv[0])),
                     "r"(pack2<T>(a[6] * inv[1], a[7] * inv[1]))
                     : "memory");
      }
      fence_proxy_async();
      __syncwarp();
      const int col0 = part * kOCols;
      if (tma) {
        if (lane == 0) {
#pragma unroll
          for (int j = 0; j < kOCols / 64; ++j) {
            tma_store_4d(&p.tmap_o, box + j * 2048, col0 + 64 * j, to.head, to.mrow + lo, to.mb);
          }
          bulk_commit();
        }
        continue;
      }
      for (int i = lane; i < 16 * kChunks; i += 32) {
        const int r = i / kChunks, c = i % kChunks;
        if (lo + r < to.sq && col0 + 8 * c < p.d) {
          uint4 v;
          asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                       : "r"(box + c / 8 * 2048 + r * 128 + ((c % 8) ^ (r % 8)) * 16));
          *reinterpret_cast<uint4*>(to.o + (lo + r) * p.o_ss * 2 + col0 * 2 + c * 16) = v;
        }
      }
    }
  }

  // store() for the pending tile, whose Work is gone, and for every tile of a kOTma variant.
  // kApprox: 1 / sum by rcp.approx (1 ulp): 1.f / total has a slow path that is a call, whose
  // clobbers would spill the next tile's registers, live beside the pending tile's epilogue.
  template <bool kApprox>
  static __device__ __forceinline__ void store_to(const ak_attention_params& p, uint32_t smem,
                                                  const Dest& to, const float (&o)[kO],
                                                  const float (&mx)[2], const float (&sum)[2]) {
    constexpr float kLn2 = 0.693147180559945309f;
    const int t4 = threadIdx.x % 4, d = p.d;
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = to.row0 + 8 * h;
      const float total = quad_sum(sum[h]);
      if constexpr (kApprox) {
        inv[h] = 0.f;
        if (total > 0.f) asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(inv[h]) : "f"(total));
      } else {
        inv[h] = total > 0.f ? 1.f / total : 0.f;
      }
      if (t4 == 0 && (p.flags & kWriteLse) && row < to.sq) {
        const float lse = total > 0.f ? (mx[h] + __log2f(total)) * kLn2 : -INFINITY;
        static_cast<float*>(p.lse)[to.lse + row] = lse;
      }
    }
    if constexpr (kOTma) {
      store_staged(p, smem, to, o, inv);
      return;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = to.row0 + 8 * h;
      if (row >= to.sq) continue;
      uint8_t* orow = to.o + row * p.o_ss * 2;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        const int col = 8 * j + 2 * t4;
        if (col < d) {
          *reinterpret_cast<uint32_t*>(orow + col * 2) =
              pack2<T>(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]);
        }
      }
    }
  }

  // The pending tile's epilogue once its last P V has completed; o starts over at 0.
  static __device__ __forceinline__ void retire(const ak_attention_params& p, uint32_t smem,
                                                State& st) {
    if (threadIdx.x % 32 == 0) bar_arrive(Bars(smem).v_empty + 8 * ((st.it - 1) % kStages));
    store_to<true>(p, smem, st.to, st.o, st.pmx, st.psum);
#pragma unroll
    for (int i = 0; i < kO; ++i) st.o[i] = 0.f;
    st.pend = false;
  }

  // The pending tile's last P V alone: no next tile to pair it with.
  static __device__ __forceinline__ void flush(const ak_attention_params& p, uint32_t smem,
                                               State& st) {
    if (!st.pend) return;
    fence_acc(st.o);
    fence_acc(st.pf);
    wgmma_fence();
    pv_of(smem, (st.it - 1) % kStages, st);
    wgmma_commit();
    wgmma_wait<0>();
    fence_acc(st.o);
    retire(p, smem, st);
  }

  template <int kMap>
  static __device__ __forceinline__ void tile_deferred(const ak_attention_params& p, const Work& w,
                                                       uint32_t smem, State& st) {
    const Bars bar(smem);
    const int wg = consumer_index(), next = next_of(wg);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    const int wg_lo = w.m0 + wg * 64;
    const int row0 = wg_lo + warp * 16 + lane / 4;
    const int n = w.t_hi - w.t_lo;
    const bool varlen = p.flags & kVarlen;
    if (w.m0 >= w.s.sq) return;  // a varlen tile past its sequence: no rows
    const Dest to = dest_of(p, w, row0);
#pragma unroll
    for (int h = 0; h < 2; ++h) st.mx[h] = -INFINITY, st.sum[h] = 0.f;
    if (n == 0) {  // rows that see no key: 0, with an LSE of -inf
      flush(p, smem, st);
      store_to<true>(p, smem, to, st.o, st.mx, st.sum);
      return;
    }
    float s[kS], e[kS], alpha[2];  // e: the loop's early probabilities (V::early_exp)
    const uint32_t qi = st.tq % kQBufs, it = st.it;
    const uint64_t qd = smem_desc(smem + qi * kQBytes + wg * 64 * 128, 16, 1024);
    auto release = [&](uint32_t b) {
      if (lane == 0) bar_arrive(b);
    };
    auto issue_s = [&](uint32_t stage) {
      const uint64_t kd = smem_desc(smem + kKOff + stage * kKVBytes, 16, 1024);
#pragma unroll
      for (int j = 0; j < kDB; ++j) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          mma_ss<T, kBN>(s, qd + ((j * kBM * 128 + kk * 32) >> 4),
                         kd + ((j * kBN * 128 + kk * 32) >> 4), (j | kk) != 0);
        }
      }
    };
    auto v_ready = [&](int i) {
      const uint32_t stage = (it + i) % kStages;
      bar_wait(bar.v_full + 8 * stage, ((it + i) / kStages) & 1);
      if (varlen) clip_v(w, w.t_hi - 1 - i, smem + kVOff + stage * kKVBytes, wg);
    };
    auto first = [&](bool edge0) {
      fence_acc(s);
      release(bar.k_empty + 8 * (it % kStages));
      if (n == 1) release(bar.q_empty + 8 * qi);
      softmax<kMap, 0>(p, w, w.t_hi - 1, edge0, wg_lo, row0, s, e, st.mx, st.sum, alpha);
    };
    bar_wait(bar.q_full + 8 * qi, (st.tq / kQBufs) & 1);
    bar_wait(bar.k_full + 8 * (it % kStages), (it / kStages) & 1);
    named_sync(kTurnBar + wg, 256);
    fence_acc(s);
    // Each case whole in its own branch, to_p included: with the wgmmas and their waits under
    // two tests of one flag, or the branches merging before to_p, ptxas serializes every wgmma.
    if (st.pend) {
      fence_acc(st.o);
      fence_acc(st.pf);
      wgmma_fence();
      issue_s(it % kStages);
      wgmma_commit();
      pv_of(smem, (it - 1) % kStages, st);
      wgmma_commit();
      named_arrive(kTurnBar + next, 256);
      const bool edge0 = crosses_ahead(p, w, w.t_hi - 1, wg_lo);
      wgmma_wait<1>();
      first(edge0);
      wgmma_wait<0>();
      fence_acc(st.o);
      fence_acc(st.pf);
      retire(p, smem, st);
      to_p(st.pf, s, e, 0);
    } else {
      wgmma_fence();
      issue_s(it % kStages);
      wgmma_commit();
      named_arrive(kTurnBar + next, 256);
      const bool edge0 = crosses_ahead(p, w, w.t_hi - 1, wg_lo);
      wgmma_wait<0>();
      first(edge0);
      to_p(st.pf, s, e, 0);
    }
    for (int i = 1; i < n; ++i) {
      const uint32_t stage = (it + i) % kStages, prev = (it + i - 1) % kStages;
      bar_wait(bar.k_full + 8 * stage, ((it + i) / kStages) & 1);
      v_ready(i - 1);
      named_sync(kTurnBar + wg, 256);
      fence_acc(s);
      fence_acc(st.o);
      fence_acc(st.pf);
      wgmma_fence();
      issue_s(stage);
      wgmma_commit();
      pv_of(smem, prev, st);
      wgmma_commit();
      named_arrive(kTurnBar + next, 256);
      const bool edge = crosses_ahead(p, w, w.t_hi - 1 - i, wg_lo);
      wgmma_wait<1>();
      fence_acc(s);
      release(bar.k_empty + 8 * stage);
      if (i == n - 1) release(bar.q_empty + 8 * qi);
      softmax<kMap, V::early_exp>(p, w, w.t_hi - 1 - i, edge, wg_lo, row0, s, e, st.mx, st.sum,
                                  alpha);
      if (__any_sync(~0u, alpha[0] != 1.f || alpha[1] != 1.f)) {
        wgmma_wait<0>();
        fence_acc(st.o);
        fence_acc(st.pf);
#pragma unroll
        for (int i2 = 0; i2 < kO; ++i2) st.o[i2] *= alpha[(i2 / 2) % 2];
      } else {
        wgmma_wait<0>();
        fence_acc(st.o);
        fence_acc(st.pf);
      }
      release(bar.v_empty + 8 * prev);
      to_p(st.pf, s, e, V::early_exp);
    }
    v_ready(n - 1);  // ready (varlen: clipped) for the next tile's first round
    st.it += n;
    ++st.tq;
#pragma unroll
    for (int h = 0; h < 2; ++h) st.pmx[h] = st.mx[h], st.psum[h] = st.sum[h];
    st.to = to;
    st.pend = true;
  }

  static __device__ __forceinline__ void store(const ak_attention_params& p, uint32_t smem,
                                               const Work& w, int row0, float (&o)[kO],
                                               const float (&mx)[2], const float (&sum)[2]) {
    if constexpr (kOTma) {
      store_to<false>(p, smem, dest_of(p, w, row0), o, mx, sum);
      return;
    }
    constexpr float kLn2 = 0.693147180559945309f;
    const int t4 = threadIdx.x % 4, d = p.d;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + 8 * h;
      const float total = quad_sum(sum[h]);
      if (row >= w.s.sq) continue;
      const float inv = total > 0.f ? 1.f / total : 0.f;
      uint8_t* orow = w.s.o + row * p.o_ss * 2 + w.head * p.o_sh * 2;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        const int col = 8 * j + 2 * t4;
        if (col < d) {
          *reinterpret_cast<uint32_t*>(orow + col * 2) =
              pack2<T>(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
        }
      }
      if (t4 == 0 && (p.flags & kWriteLse)) {
        const float lse = total > 0.f ? (mx[h] + __log2f(total)) * kLn2 : -INFINITY;
        const int64_t at = (p.flags & kVarlen) ? w.s.q0 : w.b * p.lse_sb;
        static_cast<float*>(p.lse)[at + w.head * p.lse_sh + row] = lse;
      }
    }
  }

  // A consumer's whole walk over its tiles, with softmax<kMap>.
  template <int kMap>
  static __device__ __forceinline__ void consume(const ak_attention_params& p, uint32_t smem) {
    if constexpr (kDefer) {
      State st;
#pragma unroll
      for (int i = 0; i < kO; ++i) st.o[i] = 0.f;
      st.it = st.tq = 0;
      st.pend = false;
      for_each_tile(p, [&](const Work& w) { tile_deferred<kMap>(p, w, smem, st); });
      flush(p, smem, st);
    } else if constexpr (V::skip_dark) {
      uint32_t it = 0, tq = 0;
      const int wg = consumer_index();
      for_each_tile(p, [&](const Work& w) {
        Work lit = w;
        lit.t_hi -= pass_dark(p, w, smem, wg, it, tq);
        tile<kMap>(p, lit, smem, it, tq);
      });
    } else {
      uint32_t it = 0, tq = 0;
      for_each_tile(p, [&](const Work& w) { tile<kMap>(p, w, smem, it, tq); });
    }
  }

  static __device__ __forceinline__ void run(const ak_attention_params& p) {
    extern __shared__ uint8_t smem_raw[];
    const uint32_t smem = (smem_u32(smem_raw) + 1023) & ~1023u;  // 128B swizzle atoms
    if (threadIdx.x == 0) {
      const Bars bar(smem);
      for (int s = 0; s < kQBufs; ++s) {
        bar_init(bar.q_full + 8 * s, 1);
        bar_init(bar.q_empty + 8 * s, kConsumers * 4);
      }
      for (int s = 0; s < kStages; ++s) {
        bar_init(bar.k_full + 8 * s, 1);
        bar_init(bar.k_empty + 8 * s, kConsumers * 4);
        bar_init(bar.v_full + 8 * s, 1);
        bar_init(bar.v_empty + 8 * s, kConsumers * 4);
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x < 128) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs));
      if (threadIdx.x == 0) {
        prefetch_tensormap(&p.tmap_q);
        prefetch_tensormap(&p.tmap_k);
        prefetch_tensormap(&p.tmap_v);
        produce(p, smem);
      }
      return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs));
    // Turns go round, the first consumer first: the last hands it its first turn, and the first
    // takes the last's final hand-over at the end, so every named barrier ends balanced.
    const int wg = threadIdx.x / 128 - 1;
    if (wg == kConsumers - 1) named_arrive(kTurnBar, 256);
    if constexpr (V::map_split) {
      if (mapped_scores(p)) {
        consume<1>(p, smem);
      } else {
        consume<0>(p, smem);
      }
    } else {
      consume<-1>(p, smem);
    }
    if (wg == 0) named_sync(kTurnBar, 256);
    if constexpr (kOTma) {
      if (threadIdx.x % 32 == 0) bulk_wait<true>();  // shared memory outlives the last stores
    }
  }
};

}  // namespace ak::attention::fa3
