// Hopper (sm_90a) GEMM path: TMA loads into 128B-swizzled shared memory, wgmma.mma_async from
// shared-memory descriptors, warp specialization and a persistent tile loop.
//
//   warpgroup 0        producer: one thread issues the TMA boxes of each pipeline stage (it gives
//                      registers back with setmaxnreg.dec, it needs almost none)
//   warpgroups 1..C    consumers: warpgroup c owns rows [64 (c - 1), 64 c) of the CTA tile and
//                      runs m64 x bn wgmmas on them (bn 64, 128 or 256; setmaxnreg.inc: the
//                      accumulators live in registers)
//
// Stage s of the ring holds A (bm rows x 128 B of K) and B (bn rows x 128 B of K); the producer
// waits on empty[s], the consumers on full[s] (completed by the TMA transaction bytes). The
// consumers keep one wgmma batch in flight and release a stage once the batch reading it retired.
// Tiles are walked persistently (tile += gridDim.x) in groups of kGroupM tile rows, so the CTAs in
// flight share A rows and B columns in L2. Epilogue: 16-bit outputs (the host sets kTmaStore and
// encodes tmap_d) are scaled, biased and rounded in registers (row / column scales and bias read
// when the tile starts or under its last wgmma batch: kEarlyFactors, kLastFactors), written to a
// 128B-swizzled staging area and stored by TMA, 64 x 64 boxes that the consumers leave in flight
// while they start the next tile's main loop; other outputs (f32, s32, d not TMA-legal) are
// staged 32 columns at a time and run through the shared ak::gemm::epilogue2 / epilogue2_s32
// (bounds-checked coalesced stores). The producer meanwhile prefetches the next tile's stages.
//
// Clusters (V::cluster = 2 without V::ksplit, compiled in with __cluster_dims__, so a plain launch
// whose grid is a multiple of the cluster runs them): the CTAs of a cluster take vertically
// neighbouring tiles that share their B tile. Each CTA loads its own A and one slice of the B
// tile, multicast into the same stage of every CTA of the cluster, so B is read from L2 once per
// cluster. A stage is refilled only once every consumer warp of every CTA has released it (each
// warp arrives on the empty barrier of each CTA); the walk is over cluster tiles, so all CTAs of
// a cluster run the same stages in the same order, and a producer waits for the peers' last
// releases before it exits (they arrive on its barriers).
//
// Split-K (p.splits > 1, chosen by the host for few-tile problems): the walk covers splits x tiles
// units, each a tile's K range [s * k_split, (s + 1) * k_split); a unit writes its raw f32
// partials to the workspace straight from registers, and a second launch of the same entry
// (kSplitReduce) adds them in split order through the shared epilogue: bitwise repeatable.
//
// Split-K inside a cluster (V::ksplit = V::cluster = 2): the cluster's CTAs run the same tile,
// CTA r the r-th share of its K stages, and the accumulators meet in the leader (rank 0) through
// distributed shared memory: each other CTA's consumers store theirs into the leader's receive
// area with st.async (completing the leader's mbarrier), the leader adds them in rank order
// (bitwise repeatable), releases the area (a remote arrival per CTA) and runs the usual
// epilogue. No workspace and no second launch. The host takes it where one CTA a tile would leave
// most SMs idle, and where the K is long and the grid one wave either way: the cluster's two
// CTAs then each stream half of a tile's stages, less traffic per SM than two tiles' whole K,
// which holds up better at the power-capped clock.
//
// Swapped variants (V::swap_ab, small M): the kernel computes d^T = b^T a^T. b's tile is wgmma's A
// operand (the consumers' 64-row slices run along N) and a's tile its B operand (n16 / n32 along
// M), so a tile spends no tensor-core work on rows past M; the epilogue writes d transposed
// through the staging area, with scales and bias read when the tile starts. They split K only
// inside their cluster (the workspace split is not theirs: p.splits is ignored).
//
// Operand layouts are compiled in (V::a_mmajor, V::b_kmajor). K-major operands use K-major
// descriptors (one 128-byte swizzle row = the stage's whole K); M/N-major 16-bit operands keep the
// TMA boxes (64 elements of M/N x BK rows of K) as they land and use the transpose bits with
// MN-major descriptors. 8-bit operands are K-major only (the wgmma rule; the host guarantees it).
//
// fp8 accumulation (Accum): fp8 wgmma adds into its accumulators with reduced precision. Unless
// the host sets kFastAccum, each stage's partial sum (BK = 128 is exactly one scale block) goes
// into temporary registers (a wgmma batch per kPart = min(bn, 128) columns, inside one scale_b
// block) that are waited for and added to the f32 accumulators ("promoted"), with block scales
// times scale_a(row, kb) * scale_b(col block, kb): the two-level accumulation of DeepSeek-V3. Tiles
// of at most 128 columns have the registers for two stages' partials (three on wg_128x64, kSets)
// and promote one while the others' wgmmas run, in trips of a few stages that drain the wgmma
// pipeline only at their end (kPromoteTrip); wider tiles promote part by part. Block scales
// reach each consumer warp through a small ring in shared memory that the warp fills itself with
// cp.async two K blocks ahead (read from global memory at the promotion, their L2 latency
// stalled it: see Ring).
// Every stage rather than every few: on an H100, promoting every 256 K made 128x256 tiles 4 %
// faster and the error of a long K 30 times larger (every 128 K gives the errors of cuBLAS
// without fast accumulation).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "ak/hopper.cuh"
#include "ak/mma.cuh"
#include "epilogue.cuh"

namespace ak::gemm::wg {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// ---- shared-memory addresses (the barrier, TMA and wgmma helpers are ak/hopper.cuh's) ----

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// m64 x n16 / n32 accumulator lists (8 / 16 registers), for the swapped small-M tiles.
#define AK_WG_D8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define AK_WG_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define AK_WG_ACC_N16(C) AK_WG_ACC8(C, 0)
#define AK_WG_ACC_N32(C) AK_WG_ACC8(C, 0), AK_WG_ACC8(C, 8)
#define AK_WG_ACC_N64(C) AK_WG_ACC32(C)
#define AK_WG_ACC_N128(C) AK_WG_ACC64(C, 0)
#define AK_WG_ACC_N256(C) AK_WG_ACC64(C, 0), AK_WG_ACC64(C, 64)
// One wgmma with accumulators d, descriptors a / b and scale_d (0: d = a * b, else d += a * b).
// IA/IB/IS are the operand numbers of a, b and scale_d (they follow the accumulators); TAIL is
// the instruction's immediate operands after scale-d, matched by the extra inputs in `...`.
#define AK_WG_MMA(INSTR, DREGS, ACC, C, IA, IB, IS, TAIL, ...)                                    \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\n" INSTR " " DREGS ", %" IA ", %" IB \
               ", p" TAIL ";\n}\n"                                                                \
               : ACC(C)                                                                           \
               : "l"(a), "l"(b), "r"(scale_d)__VA_ARGS__)
// The m64 x kN wgmma of one shape suffix ("k16.f32.bf16.bf16", ...): T16 ... T256 are the
// immediate tails of each width (their operand numbers follow the width's accumulators).
#define AK_WG_MMA_N(SHAPE, C, T16, T32, T64, T128, T256, ...)                                     \
  if constexpr (kN == 16) {                                                                       \
    AK_WG_MMA("wgmma.mma_async.sync.aligned.m64n16" SHAPE, AK_WG_D8, AK_WG_ACC_N16, C, "8", "9",  \
              "10", T16, __VA_ARGS__);                                                            \
  } else if constexpr (kN == 32) {                                                                \
    AK_WG_MMA("wgmma.mma_async.sync.aligned.m64n32" SHAPE, AK_WG_D16, AK_WG_ACC_N32, C, "16",     \
              "17", "18", T32, __VA_ARGS__);                                                      \
  } else if constexpr (kN == 64) {                                                                \
    AK_WG_MMA("wgmma.mma_async.sync.aligned.m64n64" SHAPE, AK_WG_D32, AK_WG_ACC_N64, C, "32",     \
              "33", "34", T64, __VA_ARGS__);                                                      \
  } else if constexpr (kN == 128) {                                                               \
    AK_WG_MMA("wgmma.mma_async.sync.aligned.m64n128" SHAPE, AK_WG_D64, AK_WG_ACC_N128, C, "64",   \
              "65", "66", T128, __VA_ARGS__);                                                     \
  } else {                                                                                        \
    AK_WG_MMA("wgmma.mma_async.sync.aligned.m64n256" SHAPE, AK_WG_D128, AK_WG_ACC_N256, C, "128", \
              "129", "130", T256, __VA_ARGS__);                                                   \
  }

template <class T>
using AccT = std::conditional_t<std::is_same_v<T, int8_t>, int32_t, float>;

// V::swap_ab (1: the variant computes d^T = b^T a^T; variants without the field do not).
template <class V, class = void>
struct SwapAB : std::false_type {};
template <class V>
struct SwapAB<V, std::void_t<decltype(V::swap_ab)>> : std::bool_constant<V::swap_ab != 0> {};

// V::ksplit (the CTAs of a cluster that split one tile's K; 1 for variants without the field).
template <class V, class = void>
struct KSplit : std::integral_constant<int, 1> {};
template <class V>
struct KSplit<V, std::void_t<decltype(V::ksplit)>> : std::integral_constant<int, V::ksplit> {};

// V::promote_sets (the promoted loop's register sets of partial sums; 2 for variants without the
// field).
template <class V, class = void>
struct PromoteSets : std::integral_constant<int, 2> {};
template <class V>
struct PromoteSets<V, std::void_t<decltype(V::promote_sets)>>
    : std::integral_constant<int, V::promote_sets> {};

// ---- distributed shared memory (split-K inside a cluster) ----

// This CTA's shared-memory address `addr` as the address of the same offset in cluster CTA `cta`.
__device__ __forceinline__ uint32_t map_cta(uint32_t addr, uint32_t cta) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(cta));
  return remote;
}

// 16 bytes into another CTA's shared memory (`at`, `bar` cluster addresses): the store completes
// its bytes on that CTA's mbarrier `bar`, which its waiters then see like a TMA load's.
__device__ __forceinline__ void st_async16(uint32_t at, uint32_t bar, uint32_t x, uint32_t y,
                                           uint32_t z, uint32_t w) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, "
      "[%5];" ::"r"(at),
      "r"(x), "r"(y), "r"(z), "r"(w), "r"(bar)
      : "memory");
}

// An arrival on another CTA's mbarrier (cluster address) that releases this thread's (and, after
// a barrier, its group's) earlier shared-memory accesses to the cluster.
__device__ __forceinline__ void bar_arrive_remote(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar)
               : "memory");
}

// bar_wait whose phase completes from another CTA: acquires at cluster scope.
__device__ __forceinline__ void bar_wait_cluster(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// The entry type with its operands exchanged (a swapped variant feeds b to wgmma's A operand):
// mixed fp8 pairs swap their element types, the others are their own.
template <class T>
struct Exchanged {
  using type = T;
};
template <class A, class B>
struct Exchanged<ak_mixed_t<A, B>> {
  using type = ak_mixed_t<B, A>;
};

// d (m64 x kN fragment) = a * b (+ d unless scale_d == 0), one K step of 32 bytes. kTA / kTB: the
// operand is MN-major in shared memory (16-bit types only).
template <class T, int kN, bool kTA, bool kTB>
__device__ __forceinline__ void mma(AccT<T> (&d)[kN / 2], uint64_t a, uint64_t b,
                                    uint32_t scale_d) {
  static_assert(kN == 16 || kN == 32 || kN == 64 || kN == 128 || kN == 256,
                "wgmma tile widths used by this path");
  static_assert(sizeof(T) == 2 || (!kTA && !kTB), "8-bit wgmma operands are K-major only");
  constexpr int ta = kTA, tb = kTB;
  if constexpr (std::is_same_v<T, __half>) {
    AK_WG_MMA_N("k16.f32.f16.f16", "+f", ", 1, 1, %11, %12", ", 1, 1, %19, %20", ", 1, 1, %35, %36",
                ", 1, 1, %67, %68", ", 1, 1, %131, %132", , "n"(ta), "n"(tb))
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    AK_WG_MMA_N("k16.f32.bf16.bf16", "+f", ", 1, 1, %11, %12", ", 1, 1, %19, %20",
                ", 1, 1, %35, %36", ", 1, 1, %67, %68", ", 1, 1, %131, %132", , "n"(ta), "n"(tb))
  } else if constexpr (sizeof(T) == 1 && !std::is_same_v<T, int8_t>) {
    // fp8: e4m3 / e5m2 for each operand (mixed entries name both, see ak_mixed_t).
    constexpr bool kA4 = std::is_same_v<typename Operands<T>::A, __nv_fp8_e4m3>;
    constexpr bool kB4 = std::is_same_v<typename Operands<T>::B, __nv_fp8_e4m3>;
    if constexpr (kA4 && kB4) {
      AK_WG_MMA_N("k32.f32.e4m3.e4m3", "+f", ", 1, 1", ", 1, 1", ", 1, 1", ", 1, 1", ", 1, 1")
    } else if constexpr (kA4) {
      AK_WG_MMA_N("k32.f32.e4m3.e5m2", "+f", ", 1, 1", ", 1, 1", ", 1, 1", ", 1, 1", ", 1, 1")
    } else if constexpr (kB4) {
      AK_WG_MMA_N("k32.f32.e5m2.e4m3", "+f", ", 1, 1", ", 1, 1", ", 1, 1", ", 1, 1", ", 1, 1")
    } else {
      AK_WG_MMA_N("k32.f32.e5m2.e5m2", "+f", ", 1, 1", ", 1, 1", ", 1, 1", ", 1, 1", ", 1, 1")
    }
  } else {
    static_assert(std::is_same_v<T, int8_t>, "element type without a wgmma path");
    AK_WG_MMA_N("k32.s32.s8.s8", "+r", "", "", "", "", "")
  }
}

#undef AK_WG_MMA_N
#undef AK_WG_MMA
#undef AK_WG_ACC_N256
#undef AK_WG_ACC_N128
#undef AK_WG_ACC_N64
#undef AK_WG_ACC_N32
#undef AK_WG_ACC_N16
#undef AK_WG_D16
#undef AK_WG_D8

// ---- the kernel ----------------------------------------------------------------------------

template <class T, class V>
struct Kernel {
  static constexpr bool kInt8 = std::is_same_v<T, int8_t>;
  static constexpr bool kFp8 = sizeof(T) == 1 && !kInt8;  // e4m3 / e5m2, mixed pairs included
  // Swapped variants (small M): the wgmma tile's rows run along N (b's tile is wgmma's A
  // operand, 64 rows per consumer) and its columns along M (a's tile is wgmma's B operand, n16 /
  // n32 wide, shared by the consumers), so no tensor-core work goes to rows past M. kBM x kBN is
  // the wgmma tile (its rows p.n's when swapped), V::bm x V::bn the output tile; kAMajorMN /
  // kBMajorK the layouts of wgmma's A and B operands in shared memory.
  static constexpr bool kSwap = SwapAB<V>::value;
  static constexpr int kBM = kSwap ? V::bn : V::bm, kBN = kSwap ? V::bm : V::bn;
  static constexpr bool kAMajorMN = kSwap ? !V::b_kmajor : V::a_mmajor;
  static constexpr bool kBMajorK = kSwap ? !V::a_mmajor : V::b_kmajor;
  using TM = std::conditional_t<kSwap, typename Exchanged<T>::type, T>;  // wgmma's A x B types
  static constexpr int kStages = V::stages;
  static constexpr int kBK = V::k_bytes / sizeof(T);  // K per stage
  static constexpr int kKSteps = V::k_bytes / 32;     // wgmmas per stage (32 bytes of K each)
  static constexpr int kConsumers = V::threads / 128 - 1;
  // kCluster CTAs a cluster: kKSplit of them split one tile's K (rank 0 the leader), or kMcast
  // tiles stacked along M share their B tile by multicast.
  static constexpr int kCluster = V::cluster;
  static constexpr int kKSplit = KSplit<V>::value;
  static constexpr int kMcast = kKSplit > 1 ? 1 : kCluster;
  static constexpr int kBoxBytes = 64 * 128;  // one 64-row (or 64 x 128 B MN) swizzled box
  static constexpr int kABytes = kBM * 128, kBBytes = kBN * 128;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // Epilogue staging, per consumer warpgroup: its 64 rows x kChunk columns of accumulators. The
  // row pitch of kChunk + 8 words puts the fragment's 8 rows x 4 lanes (8-byte stores) on
  // distinct banks.
  static constexpr int kChunk = 32, kPitch = kChunk + 8;
  // The TMA-store epilogue (16-bit outputs) stages 64 rows x kPart columns: 64 x 64 boxes of the
  // output map, 128B-swizzled like the operand boxes. One area per consumer serves both. kPart is
  // also the width of the fp8 block-scaled partial sums (at most one 128-column scale_b block).
  static constexpr int kOutBoxBytes = 64 * 128;
  static constexpr int kPart = kBN < 128 ? kBN : 128;
  // Swapped tiles stage their kBN rows of d (64 N-contiguous values each) with a pitch of
  // kSwapPitch words: the fragment's transposed stores (lane / 4 along a row, 2 (lane % 4) rows
  // apart) fall on distinct banks.
  static constexpr int kSwapPitch = 64 + 4;
  static constexpr int kEpiRows =
      kSwap && kBN * kSwapPitch > 64 * kPitch ? kBN * kSwapPitch : 64 * kPitch;
  static constexpr int kEpiBytes =
      kEpiRows * 4 > 2 * kOutBoxBytes ? kEpiRows * 4 : 2 * kOutBoxBytes;
  // Split-K inside a cluster: the leader's receive area holds, per other CTA and consumer, the
  // warpgroup's accumulators as kBN / 8 planes of 128 threads x 16 bytes (4 accumulators of a
  // thread side by side: conflict-free 16-byte stores and loads).
  static constexpr int kPlaneBytes = 128 * 16;
  static constexpr int kRxPart = kBN / 8 * kPlaneBytes;  // one consumer of one CTA
  static constexpr int kRxBytes = (kKSplit - 1) * kConsumers * kRxPart;
  // fp8 block scales (unswapped tiles): per consumer warp, a ring of kScaleSlots K blocks'
  // scales, kScaleFloats each: scale_a of the warp's 16 fragment rows, then scale_b of each
  // kPart-column part (see fetch_scales).
  static constexpr int kScaleSlots = 3;
  static constexpr int kScaleFloats = 16 + 2;
  static constexpr int kScaleBytes =
      kFp8 && !kSwap ? kConsumers * 4 * kScaleSlots * kScaleFloats * 4 : 0;
  // Stages, epilogue staging, the receive area, then full[] and empty[] barriers (and with
  // kKSplit, rx_full[] / rx_free[] per consumer), then the scale rings; +1024 to align the base
  // for the 128B swizzle.
  static constexpr int kEpiOffset = kStages * kStageBytes;
  static constexpr int kRxOffset = kEpiOffset + kConsumers * kEpiBytes;
  static constexpr int kBarOffset = kRxOffset + kRxBytes;
  static constexpr int kBarCount = 2 * kStages + (kKSplit > 1 ? 2 * kConsumers : 0);
  static constexpr int kScaleOffset = kBarOffset + kBarCount * 8;
  static constexpr int kSmemUsed = kScaleOffset + kScaleBytes + 1024;
  // Tile rows per group of the persistent walk (L2 reuse of B across the group's CTAs).
  static constexpr int kGroupM = 8;
  // Stages per trip of the promoted main loop (promoted_trip): the pipeline drains once a trip.
  // 4 for unswapped tiles of 64 columns (H200, fp8 128x4096x14336 on one consumer of 64 x 64:
  // trips of 2, 4, 8 and 16 ran at 0.93, 1.00, 0.97 and 0.94 of the anchor; two consumers of
  // 128 x 64 at 128x8192x8192: 0.96 with 2, 0.97 with 4, trips of 8 lost at K = 1024); 2 for
  // 128 columns, whose registers hold no longer trips (4 and 8 spilled).
  static constexpr int kPromoteTrip = kBN == 64 && !kSwap ? 4 : 2;
  // Register sets of the promoted loop's partial sums: kSets - 1 stages' batches stay queued
  // behind the one being promoted (each holds its stage until it retires). 3 on wg_128x64, whose
  // two consumers then keep the tensor cores fed through each other's promotions (H200, fp8
  // 1024^3 and 128x8192x8192: 2-3 % faster than 2 sets; 4 sets, trips of 8, and 3 sets on
  // wg_64x64, wg_128x64k2 or the swapped tiles were not: python/aotkernels/ops/gemm.py).
  static constexpr int kSets = PromoteSets<V>::value;
  static_assert(kSets >= 2 && kSets < kStages, "a promoted stage in flight, and one to load");
  // setmaxnreg split of the 64K-register file: the producer keeps the minimum it needs, the
  // consumers (m64 x 256 f32 accumulators = 128 registers, plus fp8 block-scale partials) take
  // 232; 2 consumers + 1 producer warpgroup: 2 * 128 * 232 + 128 * 40 = 64512.
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;

  static_assert(!V::layout_from_flags, "wgmma variants compile their operand layout in");
  static_assert(V::k_bytes == 128, "one 128-byte swizzle row of K per stage");
  static_assert(kBM == 64 * kConsumers, "one m64 consumer warpgroup per 64 tile rows");
  static_assert(kSwap ? (kBN == 16 || kBN == 32) && kMcast == 1
                      : kBN == 64 || kBN == 128 || kBN == 256,
                "n64 / n128 / n256 wgmma tiles; swapped: n16 / n32, no multicast cluster");
  static_assert(sizeof(T) == 2 || (!V::a_mmajor && V::b_kmajor), "8-bit operands are K-major");
  static_assert(!kSwap || kBMajorK, "swapped: a (wgmma's B, n16 / n32 rows) is K-major");
  static_assert(kSmemUsed <= V::smem, "pipeline does not fit the variant's shared memory");
  static_assert(kConsumers * 128 * kConsumerRegs + 128 * kProducerRegs <= 65536);
  // 4-CTA K-split clusters ran at 0.3-0.7x of the unsplit tile on an H200 (2026-11-28), about
  // twice its time on every shape: most likely the persistent grid's 33 clusters of 4 do not all
  // fit the GPCs at once, and the last ones run as a second wave.
  static_assert(kKSplit > 1 ? kKSplit == kCluster && kKSplit == 2 : kCluster == 1 || kCluster == 2,
                "multicast clusters of 1 or 2 CTAs along M; K split by the 2 CTAs of a cluster");
  static_assert(kGroupM % kMcast == 0 && (kBN / 64) % kMcast == 0, "whole B slices per CTA");

  using Acc = AccT<T>;
  using Pair = std::conditional_t<kInt8, int2, float2>;

  struct Tile {
    int32_t m0, n0;
    int64_t z;  // the batch's matrix
  };

  // One unit of the persistent walk: a tile, and the K stages [kt0, kt1) of its split.
  struct Work {
    Tile t;
    int32_t kt0, kt1;
    int64_t split;
  };

  // The epilogue's scale and bias factors of one tile, read when the tile starts so that their
  // latency hides behind its main loop (read in the epilogue, each load waits behind the
  // staging stores before it, and the tensor cores idle meanwhile).
  // Rows r0 and r0 + 8 of the fragment take sa0 / sa1; a per-tensor scale_b is sb. Per-column
  // scales and the bias (`cols`) are spread over the warp, lane l holding columns 32 i + l of
  // the tile; the epilogue fetches its columns' values with shuffles.
  struct TileFactors {
    float sa0, sa1, sb;
    float col_s[kBN / 32 > 0 ? kBN / 32 : 1], col_b[kBN / 32 > 0 ? kBN / 32 : 1];
  };
  // A swapped tile's (store_swapped): row t.n0 + warp + 4 i of d, the i-th this thread stores,
  // takes sa[i]; its two columns (2 lane and 2 lane + 1 of the consumer's 64) sb[] and bias[].
  struct SwapFactors {
    float sa[kBN / 4], sb[2], bias[2];
  };
  using Factors = std::conditional_t<kSwap, SwapFactors, TileFactors>;

  // Matrix by matrix; inside one, grouped order over cluster tiles (kMcast tiles stacked along
  // M): kGroupM tile rows are walked column by column, so concurrently running CTAs cover a
  // compact block of the output. Tile index i is CTA i % kMcast's part of cluster tile
  // i / kMcast; tiles_m is a multiple of kMcast (tiles past M are computed, never stored). The
  // divisions lie on the producer's path to its first TMA load (a run-time divisor costs a
  // reciprocal and a dozen dependent steps): one matrix, one tile column and whole groups, the
  // common cases (the small-M tiles' among them), skip them or divide by kGroup.
  static __device__ __forceinline__ Tile tile_at(int64_t tile, int64_t tiles_m, int64_t tiles_n) {
    constexpr int kGroup = kGroupM / kMcast;
    const int64_t rank = tile % kMcast, rows = tiles_m / kMcast;
    tile /= kMcast;
    const int64_t per_matrix = rows * tiles_n;
    const int64_t z = tile < per_matrix ? 0 : tile / per_matrix;
    tile -= z * per_matrix;
    const int64_t group_tiles = kGroup * tiles_n;
    const int64_t group = tiles_n == 1 ? tile / kGroup : tile / group_tiles;
    const int64_t first_m = group * kGroup;
    const int64_t group_m = min(rows - first_m, static_cast<int64_t>(kGroup));
    const int64_t r = tile - group * group_tiles;
    const int64_t col = group_m == kGroup ? r / kGroup : r / group_m;
    const int64_t row = r - col * group_m;
    return {static_cast<int32_t>(((first_m + row) * kMcast + rank) * kBM),
            static_cast<int32_t>(col * kBN), z};
  }

  // The workspace splits of a launch (1: none; never for swapped variants, nor for those whose
  // cluster splits K: the host skips the reduction launch for both).
  static __device__ __forceinline__ int64_t splits(const ak_gemm_params& p) {
    return kSwap || kKSplit > 1 || p.splits <= 1 ? 1 : p.splits;
  }

  // Split-K (p.splits > 1, one matrix): unit u is split u / num_tiles of tile u % num_tiles, so
  // the first wave runs every tile's first split. k_split is a multiple of 128 elements, so of
  // the stage and of the fp8 scale block: no stage straddles two splits. Inside a cluster
  // (kKSplit), the CTA of rank r takes the r-th of kKSplit runs of whole stages (one stage is one
  // 128-element fp8 scale block); a CTA past a short K gets none.
  static __device__ __forceinline__ Work work_at(const ak_gemm_params& p, int64_t unit,
                                                 int64_t num_tiles, int64_t tiles_m,
                                                 int64_t tiles_n, int32_t k_tiles) {
    if constexpr (kKSplit > 1) {
      const int32_t per = (k_tiles + kKSplit - 1) / kKSplit;
      const int32_t kt0 = min(k_tiles, static_cast<int32_t>(blockIdx.x % kKSplit) * per);
      return {tile_at(unit, tiles_m, tiles_n), kt0, min(k_tiles, kt0 + per), 0};
    }
    if (splits(p) <= 1) return {tile_at(unit, tiles_m, tiles_n), 0, k_tiles, 0};
    const int64_t split = unit / num_tiles;
    const Tile t = tile_at(unit - split * num_tiles, tiles_m, tiles_n);
    const int32_t per = static_cast<int32_t>(p.k_split / kBK);
    const int32_t kt0 = static_cast<int32_t>(split) * per;
    return {t, kt0, min(k_tiles, kt0 + per), split};
  }

  // This CTA's slice of the B tile: rows (K-major) or 64-column boxes (N-major) [kSliceN * rank,
  // kSliceN * (rank + 1)), multicast to every CTA of the cluster.
  static constexpr int kSliceN = kBN / kMcast;
  static __device__ __forceinline__ void load_b(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                                int32_t inner, int32_t outer) {
    if constexpr (kMcast == 1) {
      tma_load(dst, map, bar, inner, outer);
    } else {
      tma_load_multicast(dst, map, bar, inner, outer, (1u << kMcast) - 1);
    }
  }

  // The persistent walk's first unit and stride: a K-split cluster's CTAs walk the same units.
  static __device__ __forceinline__ int64_t first_unit() { return blockIdx.x / kKSplit; }
  static __device__ __forceinline__ int64_t unit_step() { return gridDim.x / kKSplit; }

  // Batches: the host folds each batched operand's matrices into its tensor map's outer
  // dimension (rows of M / N when K-major, of K when M / N-major), matrix z starting z * a_bs /
  // lda rows further on (0 rows when broadcast). Swapped variants fill wgmma's A operand from b
  // (tmap_b) and its B operand from a (tmap_a).
  static __device__ __forceinline__ void produce(const ak_gemm_params& p, uint32_t smem,
                                                 uint32_t full, uint32_t empty, int64_t num_tiles,
                                                 int64_t tiles_m, int64_t tiles_n, int32_t k_tiles,
                                                 int64_t num_units) {
    const int64_t a_rows = p.a_bs ? p.a_bs / p.lda : 0, b_rows = p.b_bs ? p.b_bs / p.ldb : 0;
    const CUtensorMap* map_a = kSwap ? &p.tmap_b : &p.tmap_a;
    const CUtensorMap* map_b = kSwap ? &p.tmap_a : &p.tmap_b;
    const int rank = static_cast<int>(blockIdx.x % kMcast);  // a 1-D cluster along x
    int stage = 0;
    uint32_t phase = 0;
    for (int64_t unit = first_unit(); unit < num_units; unit += unit_step()) {
      const Work w = work_at(p, unit, num_tiles, tiles_m, tiles_n, k_tiles);
      const Tile& t = w.t;
      const int32_t a_off = static_cast<int32_t>(t.z * (kSwap ? b_rows : a_rows));
      const int32_t b_off = static_cast<int32_t>(t.z * (kSwap ? a_rows : b_rows));
      for (int32_t kt = w.kt0; kt < w.kt1; ++kt) {
        // Parity phase ^ 1 passes at once on a fresh barrier: the ring starts empty.
        bar_wait(empty + 8 * stage, phase ^ 1);
        const uint32_t bar = full + 8 * stage;
        bar_arrive_expect_tx(bar, kStageBytes);
        const uint32_t a = smem + stage * kStageBytes, b = a + kABytes;
        const int32_t k0 = kt * kBK;
        if constexpr (kAMajorMN) {
#pragma unroll
          for (int i = 0; i < kBM / 64; ++i)
            tma_load(a + i * kBoxBytes, map_a, bar, t.m0 + 64 * i, a_off + k0);
        } else {
          tma_load(a, map_a, bar, k0, a_off + t.m0);
        }
        if constexpr (kBMajorK) {
          load_b(b + rank * kSliceN * 128, map_b, bar, k0, b_off + t.n0 + rank * kSliceN);
        } else {
#pragma unroll
          for (int j = rank * kSliceN / 64; j < (rank + 1) * kSliceN / 64; ++j)
            load_b(b + j * kBoxBytes, map_b, bar, t.n0 + 64 * j, b_off + k0);
        }
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    if constexpr (kMcast > 1) {
      // The other CTAs' consumers arrive on this CTA's empty barriers: one more wait per stage
      // sees each stage's last release, after which no arrival is left in flight.
      for (int s = 0; s < kStages; ++s) {
        bar_wait(empty + 8 * stage, phase ^ 1);
        if (++stage == kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
  }

  // Descriptors of K step 0 of a stage; step kk adds kk * step_a / step_b bytes (>> 4) to them.
  // K-major: SBO = 1024 (8 rows of 128 B), LBO unused by swizzled K-major layouts (encoded 1).
  // MN-major: LBO = 8192 (next 64-element MN box), SBO = 1024 (next 8 rows of K).
  static constexpr uint32_t lbo_a = kAMajorMN ? kBoxBytes : 16;
  static constexpr uint32_t lbo_b = kBMajorK ? 16 : kBoxBytes;
  // K-major: 32 bytes along the swizzled row. MN-major: 16 rows of K (16-bit types) of 128 B.
  static constexpr uint32_t step_a = kAMajorMN ? 16 * 128 : 32;
  static constexpr uint32_t step_b = kBMajorK ? 32 : 16 * 128;
  static __device__ __forceinline__ uint64_t desc_a(uint32_t a_stage, int consumer) {
    // K-major: this warpgroup's 64 rows of 128 B. M-major: its own 64-wide M box (K rows).
    return smem_desc(a_stage + consumer * kBoxBytes, lbo_a, 1024);
  }
  static __device__ __forceinline__ uint64_t desc_b(uint32_t b_stage) {
    return smem_desc(b_stage, lbo_b, 1024);
  }

  // The consumer warp is done with the stage. In a cluster, every CTA's producer refills part of
  // it (its B slice lands in all of them): lane r arrives on CTA r's empty barrier.
  static __device__ __forceinline__ void release(uint32_t empty, int stage) {
    const uint32_t lane = threadIdx.x % 32;
    if constexpr (kMcast == 1) {
      if (lane == 0) bar_arrive(empty + 8 * stage);
    } else {
      if (lane < kMcast) bar_arrive_cluster(empty + 8 * stage, lane);
    }
  }

  // Writes the warpgroup's 64 x kBN accumulators through `buf` (its staging area), kChunk columns
  // at a time: the fragment goes to shared memory (m64nN fragment: register 4 j + r holds row
  // warp * 16 + lane / 4 + 8 (r / 2), column 8 j + 2 (lane % 4) + r % 2), then each half-warp
  // reads back one row's kChunk columns and runs them through the shared epilogue, so rows leave
  // as contiguous runs. The chunk loop stays rolled (only the fragment write is per chunk): fully
  // unrolled, the epilogue's code outgrew the instruction cache and ran at half speed.
  static __device__ __forceinline__ void store_tile(const ak_gemm_params& p, const Work& w,
                                                    int consumer, Acc (&acc)[kBN / 2],
                                                    const Factors& f, Acc* buf) {
    const Tile& t = w.t;
    if constexpr (!kInt8) {
      if (splits(p) > 1) {
        store_partials(p, w, consumer, acc);
        return;
      }
      if (p.flags & kTmaStore) {
        if (p.out_dtype == kOutBf16) {
          store_tile_tma<__nv_bfloat162>(p, t, consumer, acc, f, smem_u32(buf));
        } else {
          store_tile_tma<__half2>(p, t, consumer, acc, f, smem_u32(buf));
        }
        return;
      }
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    Acc* frag = buf + (warp * 16 + lane / 4) * kPitch + 2 * (lane % 4);
    const Acc* line = buf + (2 * warp + lane / 16) * kPitch + 2 * (lane % 16);
    const int64_t row = t.m0 + consumer * 64 + 2 * warp + lane / 16;
    const int64_t d_off = t.z * p.d_bs;
#pragma unroll 1
    for (int c = 0; c < kBN / kChunk; ++c) {
#pragma unroll
      for (int cc = 0; cc < kBN / kChunk; ++cc) {
        if (cc != c) continue;
#pragma unroll
        for (int jj = 0; jj < kChunk / 8; ++jj) {
          const int j = cc * kChunk / 8 + jj;
          *reinterpret_cast<Pair*>(frag + 8 * jj) = {acc[4 * j], acc[4 * j + 1]};
          *reinterpret_cast<Pair*>(frag + 8 * kPitch + 8 * jj) = {acc[4 * j + 2], acc[4 * j + 3]};
        }
      }
      consumer_sync(consumer);
      store_chunk(p, row, t.n0 + c * kChunk + 2 * (lane % 16), line, d_off);
      consumer_sync(consumer);  // the next chunk overwrites the staging area
    }
  }

  // A swapped tile: accumulator (r, c) of consumer q is d[n0 + c, m0 + 64 q + r]. The fragment
  // goes to the consumer's staging area transposed, one row of d (its 64 columns) per accumulator
  // column, and each warp then writes whole rows of d (M is small: the output is a sliver of the
  // traffic, the weights are the rest), scaled with the factors `f` read when the tile started:
  // read here, their latency followed the main loop on every tile's critical path.
  static __device__ __forceinline__ void store_swapped(const ak_gemm_params& p, const Tile& t,
                                                       int consumer, const Acc (&acc)[kBN / 2],
                                                       const Factors& f, Acc* buf) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    const int r0 = warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      Acc* at = buf + (8 * j + 2 * (lane % 4)) * kSwapPitch + r0;
      at[0] = acc[4 * j];
      at[kSwapPitch] = acc[4 * j + 1];
      at[8] = acc[4 * j + 2];
      at[kSwapPitch + 8] = acc[4 * j + 3];
    }
    consumer_sync(consumer);
    const int64_t n = t.m0 + consumer * 64 + 2 * lane;
    const bool both = n + 1 < p.n;
#pragma unroll
    for (int i = 0; i < kBN / 4; ++i) {
      const int c = warp + 4 * i;
      const Pair v = *reinterpret_cast<const Pair*>(buf + c * kSwapPitch + 2 * lane);
      if (kInt8 && p.out_dtype == kOutS32) {
        epilogue2_s32(p, t.n0 + c, n, v.x, v.y);
        continue;
      }
      // epilogue2 with the factors read ahead.
      const int64_t m = t.n0 + c;
      if (m >= p.m || n >= p.n) continue;
      const float x0 = static_cast<float>(v.x), x1 = static_cast<float>(v.y);
      const float v0 = scaled(x0, f.sa[i], f.sb[0], f.bias[0]);
      const float v1 = both ? scaled(x1, f.sa[i], f.sb[1], f.bias[1]) : 0.0f;
      store2(p, m, n, v0, v1, 0);
    }
    consumer_sync(consumer);  // the next tile overwrites the staging area
  }

  static __device__ __forceinline__ bool has_cols(const ak_gemm_params& p) {
    return p.scale_mode_b == kScaleVector || (p.flags & kBias);
  }

  static __device__ __forceinline__ TileFactors factors(const ak_gemm_params& p, const Tile& t,
                                                        int consumer) {
    TileFactors f;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    // Rows past M (never stored) read row M - 1's scale, columns past N column N - 1's.
    const int64_t r0 = t.m0 + consumer * 64 + warp * 16 + lane / 4;
    f.sa0 = row_scale(p, min(r0, p.m - 1));
    f.sa1 = row_scale(p, min(r0 + 8, p.m - 1));
    f.sb = col_scale(p, 0);
    if (has_cols(p)) {
#pragma unroll
      for (int i = 0; i < kBN / 32; ++i) {
        const int64_t n = min(static_cast<int64_t>(t.n0 + 32 * i + lane), p.n - 1);
        f.col_s[i] = col_scale(p, n);
        f.col_b[i] = bias_at(p, n);
      }
    }
    return f;
  }

  static __device__ __forceinline__ SwapFactors swap_factors(const ak_gemm_params& p, const Tile& t,
                                                             int consumer) {
    SwapFactors f;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    // Rows past M (never stored) read row M - 1's scale, columns past N column N - 1's.
#pragma unroll
    for (int i = 0; i < kBN / 4; ++i) {
      f.sa[i] = row_scale(p, min(static_cast<int64_t>(t.n0 + warp + 4 * i), p.m - 1));
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int64_t n = min(static_cast<int64_t>(t.m0 + consumer * 64 + 2 * lane + j), p.n - 1);
      f.sb[j] = col_scale(p, n);
      f.bias[j] = bias_at(p, n);
    }
    return f;
  }

  // The factors of a tile whose epilogue is the TMA store's or a swapped tile's (the others read
  // theirs in the shared epilogue).
  static __device__ __forceinline__ Factors tile_factors(const ak_gemm_params& p, const Tile& t,
                                                         int consumer) {
    if constexpr (kSwap) {
      return swap_factors(p, t, consumer);
    } else {
      if (kInt8 || !(p.flags & kTmaStore)) return Factors{};
      return factors(p, t, consumer);
    }
  }

  // The epilogue of 16-bit outputs (the host sets kTmaStore and encodes tmap_d): each kPart-column
  // part of the warpgroup's 64 rows is scaled, biased and rounded in registers (through
  // `scaled`, as in epilogue2, so the same bits), written to the staging area in the output map's
  // 128B-swizzled box layout, and handed to one TMA store per 64 x 64 box. The consumers go on
  // to the next tile's main loop while the stores drain; the staging area is only rewritten once
  // the previous stores have read it. The map clips rows >= M and columns >= N.
  template <class H2>
  static __device__ __forceinline__ void store_tile_tma(const ak_gemm_params& p, const Tile& t,
                                                        int consumer, float (&acc)[kBN / 2],
                                                        const Factors& f, uint32_t buf) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    const bool leader = threadIdx.x % 128 == 0;
    const int r0 = warp * 16 + lane / 4;  // and r0 + 8: rows in the warpgroup's 64
    const int64_t m0 = t.m0 + consumer * 64;
    const bool cols = has_cols(p);
#pragma unroll
    for (int h = 0; h < kBN / kPart; ++h) {
      if (leader) bulk_wait<true>();
      consumer_sync(consumer);
#pragma unroll
      for (int j = 0; j < kPart / 8; ++j) {
        const int c = 8 * j + 2 * (lane % 4);  // column in the part
        const float* a4 = acc + 4 * (kPart / 8 * h + j);
        float sb0 = f.sb, sb1 = f.sb, b0 = 0.0f, b1 = 0.0f;
        if (cols) {
          // Tile column kPart h + c lives in lane (kPart h + c) % 32 of slot (kPart h + c) / 32.
          const int slot = (kPart * h + 8 * j) / 32, src = (8 * j) % 32 + 2 * (lane % 4);
          sb0 = __shfl_sync(~0u, f.col_s[slot], src);
          sb1 = __shfl_sync(~0u, f.col_s[slot], src + 1);
          b0 = __shfl_sync(~0u, f.col_b[slot], src);
          b1 = __shfl_sync(~0u, f.col_b[slot], src + 1);
        }
        const float t0 = scaled(a4[0], f.sa0, sb0, b0), t1 = scaled(a4[1], f.sa0, sb1, b1);
        const float u0 = scaled(a4[2], f.sa1, sb0, b0), u1 = scaled(a4[3], f.sa1, sb1, b1);
        H2 top, bottom;
        if constexpr (std::is_same_v<H2, __nv_bfloat162>) {
          top = __floats2bfloat162_rn(t0, t1);
          bottom = __floats2bfloat162_rn(u0, u1);
        } else {
          top = __floats2half2_rn(t0, t1);
          bottom = __floats2half2_rn(u0, u1);
        }
        // Box c / 64, row r: 128 bytes, its 16-byte chunk index XORed with r % 8.
        const uint32_t box = buf + (c / 64) * kOutBoxBytes, byte = (c % 64) * 2;
        const uint32_t top_at = box + r0 * 128 + (((byte / 16) ^ (r0 % 8)) * 16) + byte % 16;
        const uint32_t bottom_at = top_at + 8 * 128;  // row r0 + 8: the same swizzle phase
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(top_at),
                     "r"(*reinterpret_cast<uint32_t*>(&top))
                     : "memory");
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(bottom_at),
                     "r"(*reinterpret_cast<uint32_t*>(&bottom))
                     : "memory");
      }
      // The generic-proxy writes above become visible to the TMA (async proxy) reads.
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      consumer_sync(consumer);
      if (leader) {
        const int32_t n0 = t.n0 + kPart * h, row = static_cast<int32_t>(m0);
#pragma unroll
        for (int box = 0; box < kPart / 64; ++box) {
          tma_store(&p.tmap_d, buf + box * kOutBoxBytes, n0 + 64 * box, row);
        }
        bulk_commit();
      }
    }
  }

  // One staged chunk through the shared epilogue, in a copy specialized for the common
  // parameter combinations: no scales, or (8-bit operands) per-tensor / per-row-and-column
  // scales, each per output dtype. The epilogue is latency-bound (only the 8 consumer warps run
  // it), and its run-time dispatch both lengthens each element pair's dependency chain and, fully
  // inlined, outgrows the instruction cache.
  static __device__ __forceinline__ void store_chunk(const ak_gemm_params& p, int64_t row,
                                                     int64_t col, const Acc* line, int64_t d_off) {
    const int mode = p.scale_mode_a == p.scale_mode_b ? p.scale_mode_a : -1;
    if (mode == kScaleNone) {
      switch (p.out_dtype) {
        case kOutBf16:
          return store_rows<kOutBf16, kScaleNone>(p, row, col, line, d_off);
        case kOutF16:
          return store_rows<kOutF16, kScaleNone>(p, row, col, line, d_off);
        case kOutF32:
          return store_rows<kOutF32, kScaleNone>(p, row, col, line, d_off);
        case kOutS32:
          return store_rows<kInt8 ? kOutS32 : -1, kScaleNone>(p, row, col, line, d_off);
      }
    }
    if constexpr (sizeof(T) == 1) {
      if (mode == kScaleTensor || mode == kScaleVector) {
        const bool tensor = mode == kScaleTensor;
        switch (p.out_dtype) {
          case kOutBf16:
            return tensor ? store_rows<kOutBf16, kScaleTensor>(p, row, col, line, d_off)
                          : store_rows<kOutBf16, kScaleVector>(p, row, col, line, d_off);
          case kOutF16:
            return tensor ? store_rows<kOutF16, kScaleTensor>(p, row, col, line, d_off)
                          : store_rows<kOutF16, kScaleVector>(p, row, col, line, d_off);
          case kOutF32:
            return tensor ? store_rows<kOutF32, kScaleTensor>(p, row, col, line, d_off)
                          : store_rows<kOutF32, kScaleVector>(p, row, col, line, d_off);
        }
      }
    }
    store_rows<-1, -1>(p, row, col, line, d_off);
  }

  // This thread's 8 rows (8 apart) x 2 columns of a staged chunk. kOut >= 0: the output dtype
  // and kMode both operands' scale mode, written into a local copy of the parameters as constants
  // so the epilogue's dispatch on them folds away; batches of 4 rows load first, then store, so
  // the shared-memory latency is not on each store's path (the epilogue's bounds checks are
  // branches the loads would not be hoisted over). kOut < 0: the parameters as given, one row at
  // a time (the generic epilogue is too large to unroll).
  template <int kOut, int kMode>
  static __device__ __forceinline__ void store_rows(const ak_gemm_params& p, int64_t row,
                                                    int64_t col, const Acc* line, int64_t d_off) {
    ak_gemm_params q = p;
    if constexpr (kOut >= 0) {
      q.out_dtype = kOut;
      q.scale_mode_a = q.scale_mode_b = kMode;
    }
    constexpr int kBatch = kOut >= 0 ? 4 : 1;
#pragma unroll 1
    for (int i0 = 0; i0 < 8; i0 += kBatch) {
      Pair v[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        v[i] = *reinterpret_cast<const Pair*>(line + 8 * (i0 + i) * kPitch);
      }
#pragma unroll
      for (int i = 0; i < kBatch; ++i) {
        if constexpr (kInt8) {
          epilogue2_s32(q, row + 8 * (i0 + i), col, v[i].x, v[i].y, d_off);
        } else {
          epilogue2(q, row + 8 * (i0 + i), col, v[i].x, v[i].y, d_off);
        }
      }
    }
  }

  // A split's raw partials, straight from the fragment (the host splits no int8 problem): each
  // quad of lanes writes 32 contiguous bytes of a row, so the stores fill whole sectors without
  // staging. Columns up to the workspace's padded width are written (zeros past N: the operand
  // boxes are zero-filled there), so the reduction may read whole 16-byte groups.
  static __device__ __forceinline__ void store_partials(const ak_gemm_params& p, const Work& w,
                                                        int consumer, const float (&acc)[kBN / 2]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    const int64_t r0 = w.t.m0 + consumer * 64 + warp * 16 + lane / 4, ldw = split_ld(p);
    float* ws = static_cast<float*>(p.ws) + (w.split * p.m + r0) * ldw;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const int64_t n = w.t.n0 + 8 * j + 2 * (lane % 4);
      if (n >= ldw) continue;
      if (r0 < p.m) *reinterpret_cast<float2*>(ws + n) = make_float2(acc[4 * j], acc[4 * j + 1]);
      if (r0 + 8 < p.m) {
        *reinterpret_cast<float2*>(ws + 8 * ldw + n) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
      }
    }
  }

  // The TMA stores in flight read shared memory: they have read it before the CTA exits (their
  // writes complete with the grid; waiting for them too put their latency on the tail).
  static __device__ __forceinline__ void finish_stores() {
    if (threadIdx.x % 128 == 0) bulk_wait<true>();
  }

  // Barrier over one consumer warpgroup (ids 1..kConsumers; 0 is __syncthreads).
  static __device__ __forceinline__ void consumer_sync(int consumer) {
    asm volatile("bar.sync %0, 128;" ::"r"(consumer + 1) : "memory");
  }

  // The consumers' next stage of the ring (the parity flips each time the ring wraps).
  static __device__ __forceinline__ void advance(int& stage, uint32_t& phase) {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1;
    }
  }

  // How the main loop accumulates. kDirect: the wgmmas accumulate into the tile's accumulators
  // (16-bit and int8 operands, and fp8 with use_fast_accum). kPromote: each stage's partial sum
  // (one 128-wide K block) goes into fresh registers and is then added into the f32
  // accumulators, which keeps fp8 wgmma's reduced-precision accumulation to one block (two-level
  // accumulation). kBlock: the same, the partial sums scaled by their block's
  // scale_a(row, kb) * scale_b(col block, kb), as DeepSeek-V3 does.
  enum Accum { kDirect, kPromote, kBlock };

  // One stage's partial sum over kPart columns (at most one 128-column scale_b block), and for
  // kBlock its factors for fragment rows r0 / r0 + 8.
  struct Pending {
    float part[kPart / 2];
    float s0, s1;
  };

  // The wgmmas of one stage (at a_stage) for tile columns [kPart h, kPart (h + 1)) (kPart rows of
  // B further on, kPart x 128 B, a whole number of swizzle atoms) into b.part, added to it when
  // `more`.
  static __device__ __forceinline__ void issue_part(Pending& b, uint32_t a_stage, int consumer,
                                                    int h, bool more) {
    const uint64_t da = desc_a(a_stage, consumer), db = desc_b(a_stage + kABytes);
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      mma<TM, kPart, false, false>(b.part, da + (kk * step_a >> 4),
                                   db + ((kPart * 128 * h + kk * step_b) >> 4), more || kk != 0);
    }
  }

  // fp8 block scales, two K blocks ahead of their promotion (an L2 round trip outlasts a
  // stage's wgmmas: loaded when needed, the promotion stalled on them). Each consumer warp copies
  // each K block's scales into the next slot of its ring (in turn across units) with cp.async:
  // lane l < 16 scale_a of its fragment row l, lane 16 + h scale_b of part h (rows past M read
  // row M - 1's, parts past N column N - 1's block: their results are never stored), one commit
  // group per K block (empty past the unit's last). Before reading block kt, a lane waits for
  // its own copies up to kt and the warp syncs; block kt + 2's copy then reuses the slot of
  // kt - 1, which every lane has read before that sync (a warp shares no scale with another
  // warp: no warpgroup barrier).
  struct Ring {
    uint32_t base;     // the warp's ring
    int slot;          // the slot of the next K block to read
    const float* src;  // this lane's scale of K block 0 (null: it copies none)
    int64_t step;      // its stride between K blocks
  };

  static __device__ __forceinline__ Ring ring_at(const ak_gemm_params& p, uint32_t smem,
                                                 int consumer, const Tile& t, int slot) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    Ring r{smem + kScaleOffset + (consumer * 4 + warp) * kScaleSlots * kScaleFloats * 4, slot,
           nullptr, 0};
    if (lane < 16) {
      const int64_t row =
          min(static_cast<int64_t>(t.m0 + consumer * 64 + warp * 16 + lane), p.m - 1);
      r.src = static_cast<const float*>(p.scale_a) + row * p.sa_s0;
      r.step = p.sa_s1;
    } else if (lane < 16 + kBN / kPart) {
      const int64_t n = min(static_cast<int64_t>(t.n0 + kPart * (lane - 16)), p.n - 1);
      r.src = static_cast<const float*>(p.scale_b) + n / kScaleBlockN * p.sb_s0;
      r.step = p.sb_s1;
    }
    return r;
  }

  // K block kt's scales into slot `slot` (a commit group in every lane; nothing past the unit).
  static __device__ __forceinline__ void fetch_scales(const Ring& r, const Work& w, int32_t kt,
                                                      int slot) {
    if (r.src != nullptr && kt < w.kt1) {
      const uint32_t dst = r.base + (slot * kScaleFloats + threadIdx.x % 32) * 4;
      cp_async_4(dst, r.src + kt * r.step);
    }
    cp_async_commit();
  }

  // The next K block's factors of this thread's fragment rows r0 / r0 + 8 (f[2 h], f[2 h + 1]
  // for part h), and block kt + 2's copy into the slot before it.
  template <int kN>
  static __device__ __forceinline__ void read_scales(Ring& r, const Work& w, int32_t kt,
                                                     float (&f)[kN]) {
    static_assert(kN == 2 * (kBN / kPart), "two factors per part");
    cp_async_wait<1>();
    __syncwarp();
    const uint32_t at = r.base + (r.slot * kScaleFloats + threadIdx.x % 32 / 4) * 4;
    const uint32_t at_b = r.base + (r.slot * kScaleFloats + 16) * 4;
    const float a0 = ld_shared_f32(at), a1 = ld_shared_f32(at + 8 * 4);
#pragma unroll
    for (int h = 0; h < kBN / kPart; ++h) {
      const float b = ld_shared_f32(at_b + h * 4);
      f[2 * h] = a0 * b;
      f[2 * h + 1] = a1 * b;
    }
    fetch_scales(r, w, kt + 2, r.slot == 0 ? kScaleSlots - 1 : r.slot - 1);
    r.slot = r.slot == kScaleSlots - 1 ? 0 : r.slot + 1;
  }

  // Part h of acc += b.part (times its factors with kBlock), once b's batch has retired.
  template <int kAccum>
  static __device__ __forceinline__ void promote(float (&acc)[kBN / 2], Pending& b, int h) {
    fence_acc(b.part);
#pragma unroll
    for (int i = 0; i < kPart / 2; i += 4) {
      if constexpr (kAccum == kBlock) {
        acc[kPart / 2 * h + i] += b.part[i] * b.s0;
        acc[kPart / 2 * h + i + 1] += b.part[i + 1] * b.s0;
        acc[kPart / 2 * h + i + 2] += b.part[i + 2] * b.s1;
        acc[kPart / 2 * h + i + 3] += b.part[i + 3] * b.s1;
      } else {
        acc[kPart / 2 * h + i] += b.part[i];
        acc[kPart / 2 * h + i + 1] += b.part[i + 1];
        acc[kPart / 2 * h + i + 2] += b.part[i + 2];
        acc[kPart / 2 * h + i + 3] += b.part[i + 3];
      }
    }
  }

  // kDirect: one wgmma batch in flight; a stage is released once the batch reading it retired.
  static __device__ __forceinline__ void main_direct(uint32_t smem, uint32_t full, uint32_t empty,
                                                     int consumer, const Work& w, int& stage,
                                                     uint32_t& phase, Acc (&acc)[kBN / 2]) {
    if (kKSplit > 1 && w.kt0 == w.kt1) return;  // a cluster CTA past a short K
    int last = 0;
    for (int32_t kt = w.kt0; kt < w.kt1; ++kt) {
      bar_wait(full + 8 * stage, phase);
      const uint32_t a = smem + stage * kStageBytes;
      const uint64_t da = desc_a(a, consumer), db = desc_b(a + kABytes);
      fence_acc(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        mma<TM, kBN, kAMajorMN, !kBMajorK>(acc, da + (kk * step_a >> 4), db + (kk * step_b >> 4),
                                           1);
      }
      wgmma_commit();
      // The batch before this one has retired: its stage can be refilled.
      wgmma_wait<1>();
      fence_acc(acc);
      if (kt > w.kt0) release(empty, stage == 0 ? kStages - 1 : stage - 1);
      last = stage;
      advance(stage, phase);
    }
    wgmma_wait<0>();
    fence_acc(acc);
    release(empty, last);
  }

  // b's factors: K block kt's block scales (kBlock; kPromote adds unscaled).
  template <int kAccum>
  static __device__ __forceinline__ void scale_part(Ring& r, const Work& w, int32_t kt,
                                                    Pending& b) {
    if constexpr (kAccum == kBlock) {
      float f[2];
      read_scales(r, w, kt, f);
      b.s0 = f[0];
      b.s1 = f[1];
    }
  }

  // Stage kt (ring slot `stage`) into b's fresh registers: a committed batch, its block scales
  // read from the ring meanwhile.
  template <int kAccum>
  static __device__ __forceinline__ void start_part(Ring& r, const Work& w, int32_t kt,
                                                    uint32_t smem, uint32_t full, int consumer,
                                                    int stage, uint32_t phase, Pending& b) {
    bar_wait(full + 8 * stage, phase);
    fence_acc(b.part);
    wgmma_fence();
    issue_part(b, smem + stage * kStageBytes, consumer, 0, false);
    wgmma_commit();
    scale_part<kAccum>(r, w, kt, b);
  }

  // kN stages from kt (ring slot `stage`) into kSets register sets in turn: stage j + kSets - 1's
  // batch is issued before stage j's sums are promoted, so the tensor cores run the later batches
  // while one is added; the sums are added in stage order (the same bits whatever kSets); the
  // pipeline drains once, at the end (ptxas serializes the wgmmas of a loop whose back edge a
  // batch crosses, so a trip is straight-line code).
  // With `f`, the tile's epilogue factors are read while its last batch runs (see kLastFactors).
  template <int kAccum, int kN>
  static __device__ __forceinline__ void promoted_trip(Ring& r, const Work& w, int32_t kt,
                                                       uint32_t smem, uint32_t full, uint32_t empty,
                                                       int consumer, int& stage, uint32_t& phase,
                                                       float (&acc)[kBN / 2],
                                                       const ak_gemm_params* p = nullptr,
                                                       Factors* f = nullptr) {
    Pending b[kSets];
    int held[kSets];
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      start_part<kAccum>(r, w, kt + j, smem, full, consumer, stage, phase, b[j % kSets]);
      held[j % kSets] = stage;
      advance(stage, phase);
      if (j >= kSets - 1) {
        wgmma_wait<kSets - 1>();
        promote<kAccum>(acc, b[(j - kSets + 1) % kSets], 0);
        release(empty, held[(j - kSets + 1) % kSets]);
      }
      if (f != nullptr && j == kN - 1) *f = tile_factors(*p, w.t, consumer);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int j = kN > kSets - 1 ? kN - kSets + 1 : 0; j < kN; ++j) {
      promote<kAccum>(acc, b[j % kSets], 0);
      release(empty, held[j % kSets]);
    }
  }

  // The promoted main loop. Tiles one part wide (kBN == kPart) run kPromoteTrip stages per trip
  // (promoted_trip), then the rest in trips of 2 and 1. Wider tiles promote part by
  // part. Block scales are read from the ring while the batches run.
  template <int kAccum>
  static __device__ __forceinline__ void main_promoted(const ak_gemm_params& p, uint32_t smem,
                                                       uint32_t full, uint32_t empty, int consumer,
                                                       const Work& w, int& stage, uint32_t& phase,
                                                       int& slot, float (&acc)[kBN / 2],
                                                       Factors& f) {
    Ring r;
    if constexpr (kAccum == kBlock) {
      r = ring_at(p, smem, consumer, w.t, slot);
      fetch_scales(r, w, w.kt0, slot);
      fetch_scales(r, w, w.kt0 + 1, slot == kScaleSlots - 1 ? 0 : slot + 1);
    }
    if constexpr (kLastFactors<kAccum>) {
      // Trips of 2, the last one (2 or 1 stages) reading the factors under its last batch.
      static_assert(kPromoteTrip == 2, "128-column tiles run trips of 2");
      int32_t kt = w.kt0;
      for (; kt + 2 < w.kt1; kt += 2) {
        promoted_trip<kAccum, 2>(r, w, kt, smem, full, empty, consumer, stage, phase, acc);
      }
      if (kt + 2 == w.kt1) {
        promoted_trip<kAccum, 2>(r, w, kt, smem, full, empty, consumer, stage, phase, acc, &p, &f);
      } else if (kt < w.kt1) {
        promoted_trip<kAccum, 1>(r, w, kt, smem, full, empty, consumer, stage, phase, acc, &p, &f);
      } else {
        f = tile_factors(p, w.t, consumer);  // no K stages
      }
    } else if constexpr (kBN == kPart) {
      int32_t kt = w.kt0;
      for (; kt + kPromoteTrip <= w.kt1; kt += kPromoteTrip) {
        promoted_trip<kAccum, kPromoteTrip>(r, w, kt, smem, full, empty, consumer, stage, phase,
                                            acc);
      }
      if constexpr (kPromoteTrip > 2) {
        for (; kt + 2 <= w.kt1; kt += 2) {
          promoted_trip<kAccum, 2>(r, w, kt, smem, full, empty, consumer, stage, phase, acc);
        }
      }
      if (kt < w.kt1)
        promoted_trip<kAccum, 1>(r, w, kt, smem, full, empty, consumer, stage, phase, acc);
    } else {
      // Wider tiles lack the registers for two stages' partial sums: per stage, part by part,
      // one batch into one register set, waited for and promoted.
      for (int32_t kt = w.kt0; kt < w.kt1; ++kt) {
        const int held = stage;
        bar_wait(full + 8 * stage, phase);
        advance(stage, phase);
        float f[2 * (kBN / kPart)];
#pragma unroll
        for (int h = 0; h < kBN / kPart; ++h) {
          Pending b;
          fence_acc(b.part);
          wgmma_fence();
          issue_part(b, smem + held * kStageBytes, consumer, h, false);
          wgmma_commit();
          if constexpr (kAccum == kBlock) {
            if (h == 0) read_scales(r, w, kt, f);
          }
          wgmma_wait<0>();
          if constexpr (kAccum == kBlock) {
            b.s0 = f[2 * h];
            b.s1 = f[2 * h + 1];
          }
          promote<kAccum>(acc, b, h);
        }
        release(empty, held);
      }
    }
    if constexpr (kAccum == kBlock) slot = r.slot;
  }

  // Split-K inside a cluster. The receive area of consumer `consumer` and CTA `rank` (1 ..
  // kKSplit - 1) in the leader, this thread's 16 bytes of plane 0; and the consumer's rx_full /
  // rx_free barriers (each CTA has both; the leader waits on its rx_full, the others on rx_free).
  static __device__ __forceinline__ uint32_t rx_at(uint32_t smem, int consumer, int rank) {
    return smem + kRxOffset + ((rank - 1) * kConsumers + consumer) * kRxPart +
           threadIdx.x % 128 * 16;
  }
  static __device__ __forceinline__ uint32_t rx_full(uint32_t smem, int consumer) {
    return smem + kBarOffset + 8 * (2 * kStages + consumer);
  }
  static __device__ __forceinline__ uint32_t rx_free(uint32_t smem, int consumer) {
    return rx_full(smem, consumer) + 8 * kConsumers;
  }

  static __device__ __forceinline__ uint32_t bits(Acc v) {
    if constexpr (kInt8) {
      return static_cast<uint32_t>(v);
    } else {
      return __float_as_uint(v);
    }
  }
  static __device__ __forceinline__ Acc from_bits(uint32_t v) {
    if constexpr (kInt8) {
      return static_cast<int32_t>(v);
    } else {
      return __uint_as_float(v);
    }
  }

  // A non-leader CTA's accumulators into the leader's receive area, once the leader has handed it
  // back from the previous tile (a fresh barrier's parity phase ^ 1 passes at once).
  static __device__ __forceinline__ void send(uint32_t smem, int consumer, uint32_t& phase,
                                              const Acc (&acc)[kBN / 2]) {
    const int rank = static_cast<int>(blockIdx.x % kKSplit);
    bar_wait_cluster(rx_free(smem, consumer), phase ^ 1);
    phase ^= 1;
    const uint32_t at = map_cta(rx_at(smem, consumer, rank), 0);
    const uint32_t bar = map_cta(rx_full(smem, consumer), 0);
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      st_async16(at + j * kPlaneBytes, bar, bits(acc[4 * j]), bits(acc[4 * j + 1]),
                 bits(acc[4 * j + 2]), bits(acc[4 * j + 3]));
    }
  }

  // The leader: the other CTAs' accumulators added to its own in rank order 1, 2, ... (the same
  // order every run: bitwise repeatable), then the receive area handed back to each of them.
  static __device__ __forceinline__ void gather(uint32_t smem, int consumer, uint32_t& phase,
                                                Acc (&acc)[kBN / 2]) {
    const uint32_t full = rx_full(smem, consumer);
    if (threadIdx.x % 128 == 0) bar_arrive_expect_tx(full, (kKSplit - 1) * kRxPart);
    bar_wait_cluster(full, phase);
    phase ^= 1;
#pragma unroll
    for (int r = 1; r < kKSplit; ++r) {
      const uint32_t at = rx_at(smem, consumer, r);
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        uint32_t x, y, z, w;
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(x), "=r"(y), "=r"(z), "=r"(w)
                     : "r"(at + j * kPlaneBytes)
                     : "memory");
        acc[4 * j] += from_bits(x);
        acc[4 * j + 1] += from_bits(y);
        acc[4 * j + 2] += from_bits(z);
        acc[4 * j + 3] += from_bits(w);
      }
    }
    consumer_sync(consumer);  // every thread has read the area
    if (threadIdx.x % 128 == 0) {
#pragma unroll
      for (int r = 1; r < kKSplit; ++r) bar_arrive_remote(map_cta(rx_free(smem, consumer), r));
    }
  }

  // Whether a tile's epilogue factors are read before its main loop (their latency hidden
  // behind it) rather than after: always but where a promoted loop's registers are full while
  // it runs (tiles over 64 columns, and the block-scaled loop with its scale factors). Swapped
  // tiles' factors are a few registers.
  template <int kAccum>
  static constexpr bool kEarlyFactors =
      kAccum == kDirect || kSwap || (kAccum == kPromote && kBN <= 64);
  // 128 x 128 tiles with two-level accumulation read them under the last wgmma batch of the tile
  // instead: read after the main loop, each load's L2 round trip (row and column scales change
  // with every tile) idled both consumers before the epilogue; read when the tile starts, the
  // first wgmma fence waited for them (and their registers were held all along). (64 x 128 tiles,
  // not measured that way, keep the read after the loop: there it cost registers.)
  template <int kAccum>
  static constexpr bool kLastFactors =
      kAccum == kPromote && !kSwap && kBN == kPart && kBN > 64 && kConsumers == 2;

  template <int kAccum>
  static __device__ __forceinline__ void consume(const ak_gemm_params& p, uint32_t smem,
                                                 uint32_t full, uint32_t empty, Acc* buf,
                                                 int64_t num_tiles, int64_t tiles_m,
                                                 int64_t tiles_n, int32_t k_tiles,
                                                 int64_t num_units) {
    // A stage is one K block of the scales, a part inside one scale_b block.
    static_assert(kAccum == kDirect || (kBK == kScaleBlockK && kScaleBlockN % kPart == 0));
    const int consumer = threadIdx.x / 128 - 1;
    const bool leader = blockIdx.x % kKSplit == 0;
    int stage = 0, slot = 0;
    uint32_t phase = 0, rx_phase = 0;
    for (int64_t unit = first_unit(); unit < num_units; unit += unit_step()) {
      const Work w = work_at(p, unit, num_tiles, tiles_m, tiles_n, k_tiles);
      Factors f;
      if constexpr (kEarlyFactors<kAccum>) f = tile_factors(p, w.t, consumer);
      Acc acc[kBN / 2];
#pragma unroll
      for (int i = 0; i < kBN / 2; ++i) acc[i] = 0;
      if constexpr (kAccum == kDirect) {
        main_direct(smem, full, empty, consumer, w, stage, phase, acc);
      } else {
        main_promoted<kAccum>(p, smem, full, empty, consumer, w, stage, phase, slot, acc, f);
      }
      if constexpr (!kEarlyFactors<kAccum> && !kLastFactors<kAccum>) {
        f = tile_factors(p, w.t, consumer);
      }
      if constexpr (kKSplit > 1) {
        if (!leader) {
          send(smem, consumer, rx_phase, acc);
          continue;
        }
        gather(smem, consumer, rx_phase, acc);
      }
      if constexpr (kSwap) {
        store_swapped(p, w.t, consumer, acc, f, buf);
      } else {
        store_tile(p, w, consumer, acc, f, buf);
      }
    }
    // The leader's last hand-back arrives on this CTA's barrier: it must not exit before.
    if (kKSplit > 1 && !leader) bar_wait_cluster(rx_free(smem, consumer), rx_phase ^ 1);
  }

  static __device__ __forceinline__ void run(const ak_gemm_params& p) {
    if (p.flags & kSplitReduce) {
      reduce_splits(p);
      return;
    }
    extern __shared__ uint8_t smem_raw[];
    const uint32_t raw = smem_u32(smem_raw), smem = (raw + 1023) & ~1023u;
    const uint32_t full = smem + kBarOffset, empty = full + 8 * kStages;
    if (threadIdx.x == 0) {
      // The descriptors' fetch overlaps the set-up (a cold one delays the first TMA load).
      prefetch_tensormap(&p.tmap_a);
      prefetch_tensormap(&p.tmap_b);
      if (p.flags & kTmaStore) prefetch_tensormap(&p.tmap_d);
      for (int s = 0; s < kStages; ++s) {
        bar_init(full + 8 * s, 1);                         // the producer's expect_tx arrival
        bar_init(empty + 8 * s, kConsumers * 4 * kMcast);  // per consumer warp of the cluster
      }
      for (int c = 0; c < (kKSplit > 1 ? kConsumers : 0); ++c) {
        bar_init(rx_full(smem, c), 1);  // the leader's expect_tx arrival
        bar_init(rx_free(smem, c), 1);  // the leader's hand-back
      }
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if constexpr (kCluster > 1) {
      cluster_sync();  // the barriers are set up before any other CTA's TMA or arrival lands
    } else {
      __syncthreads();
    }
    // Tile rows rounded up to whole cluster tiles; swapped tiles' rows run along N.
    const int64_t rows = kSwap ? p.n : p.m, cols = kSwap ? p.m : p.n;
    const int64_t tiles_m = (rows + kBM * kMcast - 1) / (kBM * kMcast) * kMcast;
    const int64_t tiles_n = (cols + kBN - 1) / kBN;
    const int64_t num_tiles = (p.batch > 1 ? p.batch : 1) * tiles_m * tiles_n;
    const int32_t k_tiles = static_cast<int32_t>((p.k + kBK - 1) / kBK);
    const int64_t num_units = num_tiles * splits(p);
    if (threadIdx.x < 128) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs));
      if (threadIdx.x == 0) {
        produce(p, smem, full, empty, num_tiles, tiles_m, tiles_n, k_tiles, num_units);
      }
      return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs));
    Acc* buf = reinterpret_cast<Acc*>(smem_raw + (smem - raw) + kEpiOffset +
                                      (threadIdx.x / 128 - 1) * kEpiBytes);
    if constexpr (kFp8) {
      // Block scales never reach swapped variants (the host's rule): the dead branch names a loop
      // they instantiate anyway, so that they compile no block-scaled one.
      if (!kSwap && p.scale_mode_a == kScaleBlock) {
        consume<kSwap ? kPromote : kBlock>(p, smem, full, empty, buf, num_tiles, tiles_m, tiles_n,
                                           k_tiles, num_units);
      } else if (p.flags & kFastAccum) {
        consume<kDirect>(p, smem, full, empty, buf, num_tiles, tiles_m, tiles_n, k_tiles,
                         num_units);
      } else {
        consume<kPromote>(p, smem, full, empty, buf, num_tiles, tiles_m, tiles_n, k_tiles,
                          num_units);
      }
    } else {
      consume<kDirect>(p, smem, full, empty, buf, num_tiles, tiles_m, tiles_n, k_tiles, num_units);
    }
    finish_stores();
  }
};

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// The entry body: the kernel on sm_90a, empty in every other compilation pass (host and other
// targets see only a declaration-compatible shell; the build instantiates it for sm_90a only).
template <class T, class V>
__device__ __forceinline__ void entry(const ak_gemm_params& p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  Kernel<T, V>::run(p);
#endif
}

}  // namespace ak::gemm::wg

// Variants of one CTA launch as plain CTAs: declared as 1-CTA clusters they ran slower (H100,
// wg_128x256, bf16 4096^3: 668 vs 770 TFLOP/s).
#define AK_ENTRY_WGMMA(symbol, op, T, V)                      \
  extern "C" __global__ void __launch_bounds__(V::threads, 1) \
      symbol(const __grid_constant__ ak_gemm_params p) {      \
    ak::gemm::wg::entry<T, V>(p);                             \
  }
#define AK_ENTRY_WGMMA_CLUSTER(symbol, op, T, V)                                                 \
  extern "C" __global__ void __launch_bounds__(V::threads, 1) __cluster_dims__(V::cluster, 1, 1) \
      symbol(const __grid_constant__ ak_gemm_params p) {                                         \
    ak::gemm::wg::entry<T, V>(p);                                                                \
  }
