"""GEMM on tensor cores: ``matmul`` (f16/bf16) and ``scaled_mm`` (fp8 e4m3/e5m2, int8).

Each GPU runs its own path (arch_matrix.toml, [families.gemm]): mma.sync on sm_75..sm_89 and
sm_120a, wgmma + TMA (warp-specialized, persistent) on sm_90a, tcgen05 on sm_100a (opt-in, see
``_tcgen05_enabled``). The image loaded for the device holds the entries its target can run;
this module picks one per call from the tile table below and the operands' layout.

Tile table (``_pick``, ``_wgmma_tile``), first match wins:

=========================================  ====================================================
condition                                  variant
=========================================  ====================================================
sm_100a, AOTKERNELS_GEMM_TCGEN05=1, TMA    ``tc_128x256``
sm_90a, TMA-legal operands, M <= 32, one   swapped (``_swaps``): ``wg_16x64t`` (M <= 16) or
matrix, a K-major, no block scales         ``wg_32x64t``; ``wg_16x128t`` / ``wg_32x128t``
                                           where N / 64 > SMs; ``wg_16x64tk2`` /
                                           ``wg_32x64tk2`` (K split by a 2-CTA cluster)
                                           where 4 N / 64 <= SMs, or 2 N / 64 <= SMs and K
                                           is at least 96 stages of 128 bytes; no
                                           workspace split
sm_90a, TMA-legal operands, M <= 64        ``wg_64x128``, split-K by ``_split_k``
sm_90a, TMA-legal, M <= 128, 64x128       ``wg_128x64k2`` (K split by a 2-CTA cluster) for
tiles fill at most half the SMs            M > 96, one matrix, no block scales, K of at
                                           least 64 stages of 128 bytes; else ``wg_64x64``
sm_90a, TMA-legal, M <= 128, no block      ``wg_128x128`` (one tile row)
scales, 128x128 tiles > SMs/2
sm_90a, TMA-legal, M <= 128                "few": ``wg_128x64`` (int8, and fp8 without block
                                           scales or fast accumulation), else ``wg_64x128``
sm_90a, TMA-legal, 128x256 tiles < SMs/2   "few" (fill the GPU)
sm_90a, TMA-legal, fp8 block scales        ``wg_128x256``
sm_90a, TMA-legal                          ``wg_128x128`` where its last wave is fuller by
                                           more than ``_FILL_MARGIN``, else ``wg_128x256``
otherwise, 128x128 tiles >= SMs            ``mma_128x128``
otherwise                                  ``mma_64x64``
=========================================  ====================================================

Measured on an H100 SXM (2026-11-27, every wgmma variant and split count forced in one run,
``tools/gemm_sweep.py``; TFLOP/s, b K-major, bf16 / fp8 e4m3 per-tensor scales, bf16 out;
cuBLAS beside; the last column is the table of that day):

=========================  ======  =====  ======  =======  =======  =====================
M x N x K                  64x64   64x128 128x128 128x256  cuBLAS   table then
=========================  ======  =====  ======  =======  =======  =====================
bf16 16x4096x4096          24      26     19      12       28       64x128
bf16 16x4096x14336 (s2)    37      38     32      24       40       64x128, 2 splits
bf16 16x8192x8192          41      41     27      26       43       64x128
bf16 128x4096x4096         228     215    162     94       239      64x64
bf16 128x4096x14336        306     283    205     110      276      64x64
bf16 128x14336x4096        270     307    305     281      311      64x128
bf16 128x8192x8192         310     326    306     207      326      64x128
bf16 1024x14336x4096       402     503    720     676      765      128x128
bf16 1024x4096x4096        381     566    692     711      738      128x256
fp8 128x4096x4096          340     323    252     161      350      64x64
fp8 1024x14336x4096        690     1045   1310    1222     1308     128x128
fp8 block 128x4096x4096    273     219    197     125      247      64x64
fp8 block 8192^3           497     639    957     990      1299     128x256
=========================  ======  =====  ======  =======  =======  =====================

Few tiles (M = 128, small squares) on an H200 (2026-11-28, ``tools/gemm_sweep.py``: one
process, each variant forced unsplit; TFLOP/s; b K-major unless "kn"; fp8 e4m3 per-tensor scales
without fast accumulation, bf16 out; anchor: torch.matmul / torch._scaled_mm / torch._int_mm
beside; [ ] the table's pick that day):

=========================  =======  =======  =======  =======  =======  =======
M x N x K                  64x64    64x128   128x64   128x128  128x256  anchor
=========================  =======  =======  =======  =======  =======  =======
bf16 128x4096x4096         [258]    242      238      166      96       256
bf16 128x4096x4096 kn      [252]    238      245      166      97       265
bf16 128x14336x4096        308      386      371      [399]    322      414
bf16 128x14336x4096 kn     294      392      376      [406]    328      430
bf16 128x4096x14336        [376]    339      314      208      111      380
bf16 128x4096x14336 kn     [356]    326      328      211      112      395
bf16 128x8192x8192         371      [416]    404      376      210      430
bf16 128x8192x8192 kn      357      [428]    422      378      211      450
fp8 128x4096x4096          [340]    280      325      250      155      377
fp8 128x14336x4096         467      567      613      [651]    512      682
fp8 128x4096x14336         [588]    431      524      371      201      619
fp8 128x8192x8192          576      677      [694]    597      363      726
int8 128x14336x4096        460      549      575      [602]    468      481
int8 128x8192x8192         591      656      [672]    587      350      403
bf16 1024^3                171      [224]    228      181      124      250
fp8 1024^3                 201      233      [240]    219      161      265
int8 1024^3                188      220      [241]    199      135      229
=========================  =======  =======  =======  =======  =======  =======

Where that table takes 64 x 64 tiles (M = 128, N = 4096: 128 of them), as many 128 x 64 tiles
whose K a 2-CTA cluster splits (``wg_128x64k2``: the same 128 CTAs, each streaming 128 + 64 rows
of half the K instead of 64 + 64 rows of all of it, a quarter fewer bytes per SM, on two consumers)
hold up at the power cap where the 64 x 64 tile does not. Measured hot / cool as the swapped
tiles' K split below (int8 hot only; the other tiles of that table lost hot on every row):

=========================  ===============  ===============
M x N x K                  wg_64x64         wg_128x64k2
=========================  ===============  ===============
bf16 128x4096x4096         0.884 / 0.998    0.949 / 0.984
bf16 128x4096x4096 kn      0.865            0.963
fp8 128x4096x4096          0.928 / 0.986    0.856 / 0.873
int8 128x4096x4096         1.191            1.176
bf16 128x4096x14336        0.806 / 0.988    0.984 / 1.023
bf16 128x4096x14336 kn     0.735            0.980
fp8 128x4096x14336         0.859 / 0.975    0.921 / 0.974
int8 128x4096x14336        1.476            1.640
=========================  ===============  ===============

The table takes it from 97 to 128 rows, for one matrix without block scales, where K holds at
least 64 stages (32 per CTA, ``_KSPLIT_STAGES``): bf16 K >= 4096, 8-bit K >= 8192. At 96 rows the
64 x 64 tiles measured faster (bf16 96x4096x4096: 0.92 against 0.84 hot, 0.94 against 0.87
cool); at 80 rows and K = 14336 the split was ahead (0.75 against 0.66) but is not taken: the
rule follows the rows measured. A 2-CTA cluster of 64 x 128 tiles multicasting their shared B
tile was no faster than ``wg_64x128`` hot (bf16 128x8192x8192 0.967 against 0.971, kn 0.954
against 0.943, fp8 0.855 against 0.875): not kept. Nor was a K-split 128 x 128 tile at N = 8192
(64 tiles, 128 CTAs; 4 stages beside the receive area): behind the table on every row, hot and
cool (bf16 128x8192x8192 0.899 against 0.970 hot, fp8 0.822 against 0.951, int8 1.77 against
2.01; bf16 1024^3 0.71 against 0.90).

Both K-split rules against the picks before them (forced), the same probe in a second run (hot /
cool, ratio to the anchor):

=========================  ===============  ===============
M x N x K                  before           table
=========================  ===============  ===============
bf16 16x4096x14336         0.837 / 1.038    0.964 / 0.999
bf16 16x4096x14336 kn      0.824 / 0.956    0.913 / 0.952
fp8 16x4096x14336          0.923 / 1.058    1.015 / 1.028
fp8 fast 16x4096x14336     0.944 / 1.092    0.994 / 1.027
int8 32x4096x14336         1.800 / 1.680    1.858 / 1.568
bf16 16x4096x8192          0.935 / 1.090    1.024 / 1.040
bf16 128x4096x4096         0.873 / 0.994    0.936 / 0.983
bf16 128x4096x4096 kn      0.841 / 0.957    0.942 / 0.982
bf16 128x4096x14336        0.830 / 0.987    0.998 / 1.025
bf16 128x4096x14336 kn     0.746 / 0.922    0.985 / 1.015
fp8 128x4096x8192          0.896 / 1.021    0.926 / 0.995
fp8 128x4096x14336         0.867 / 0.992    0.965 / 0.985
int8 128x4096x14336        1.477 / 1.462    1.643 / 1.451
bf16 128x1024x4096         0.645 / 0.678    0.737 / 0.749
bf16 128x2048x4096         0.754 / 0.794    0.836 / 0.816
bf16 128x2048x14336        0.525 / 0.632    0.682 / 0.700
=========================  ===============  ===============

At M = 128 one row of 128-row tiles beats two rows of 64 where it fills more than half the SMs
(N = 14336: 112 tiles of 128 x 128 in one wave against 224 of 64 x 128 in two: fp8 651 against
567); elsewhere the 64-row tiles keep more SMs busy. Two consumers of 64 columns (``wg_128x64``)
beat one of 128 for 8-bit operands (int8 1024^3 241 against 220), not for bf16 (128x8192x8192:
404 against 416). Split-K never paid at M = 128 (1 to 4 splits of every variant; the best split
350 against 376 unsplit at bf16 128x4096x14336, 521 against 588 at fp8): the partials' round
trip and the second launch cost more than the SMs they add. cuBLAS (its kernel names) runs 64 x
64 tiles in 2-CTA clusters at N = 4096, 128 x 64 at N = 8192 and 128 x 112 at N = 14336 (128
CTAs, one wave). Built and forced on an H200 (docs/bench/h200-2026-11-28-gemm13), 128 x 112
tiles were no faster there (bf16 128x14336x4096 0.962 / 0.953 of cuBLAS against 0.969 / 0.954
for 128 x 128), and 128 x 224 ones at M = 1024 (512 tiles in 4 waves where 128 x 128 takes 7)
tied 128 x 128 hot (0.922 against 0.923, medians of 4 runs) and led by 2-3 % only cool: neither
kept. A 2-CTA cluster of 64 x 64 tiles multicasting their shared B tile was no faster (paired:
fp8 128x4096x4096 342 against 347, bf16 259 against 262): not kept. The table against the
previous one (main at 0614ad2: ``wg_64x128`` wherever 64 x 128 tiles filled more than half the
SMs), same run, alternating, ratio to the anchor (a second run of the final build in brackets):
fp8 128x14336x4096 0.84 -> 0.95 (0.83 -> 0.94), bf16 0.93 -> 0.95 (0.88 -> 0.96), kn 0.89 ->
0.94 (0.90 -> 0.93), int8 1.13 -> 1.25 (1.13 -> 1.24); int8 1024^3 0.95 -> 1.04 (0.94 -> 1.03),
fp8 0.88 -> 0.92 (0.88 -> 0.91); int8 128x8192x8192 1.63 -> 1.68 (1.60 -> 1.65), fp8 0.94 ->
0.95 (0.94 -> 0.93: within the noise). Every other row of the bench runs the kernel it ran
before.

Swapped tiles (the variants whose ``swap_ab`` is set): the kernel computes d^T = b^T a^T, so N
runs along wgmma's M (64 rows per consumer warpgroup) and M along its N (n16 / n32). A 64-row
tile at M = 16 spends 3/4 of its tensor-core work (and of the fp8 two-level promotion) on rows
past M, a swapped one none (n16) or half (n32), and N / 64 (or N / 128) CTAs stream the weights.
cuBLAS does the same at M = 16 (its kernels there are nvjet ``64x16`` tiles). The 128-column
forms (two consumers sharing a's tile) take the shapes whose 64-column tiles would take more than
one wave. Measured on an H200 (2026-11-28, one process, alternating rounds; ratio to the anchor:
torch.matmul, torch._scaled_mm per-tensor without fast accumulation, torch._int_mm; b K-major
unless "kn"; "main": ``wg_64x128`` with its split rule; the table's pick in brackets, and timed
again in the last column, which differs from it by the run-to-run noise):

=========================  ======  ========  ========  =========  =========  =========
M x N x K                  main    16x64t    32x64t    16x128t    32x128t    table
=========================  ======  ========  ========  =========  =========  =========
bf16 16x4096x4096          0.74    [0.95]    0.92      0.90                  0.95
fp8 16x4096x4096           0.66    [0.85]    0.82      0.80                  0.85
bf16 16x8192x8192          0.78    [0.91]    0.90      0.92                  0.90
fp8 16x8192x8192           0.75    [0.91]    0.90      0.88                  0.91
bf16 16x14336x4096         0.90    0.91      0.91      [0.95]                0.95
bf16 16x14336x4096 kn      0.87    0.90      0.90      [0.94]                0.94
fp8 16x14336x4096          0.88    0.84      0.84      [0.91]                0.91
bf16 24x14336x4096         0.93              0.92      0.86       [0.95]     0.95
bf16 32x14336x4096         0.96              0.90      0.86       [0.95]     0.95
fp8 32x14336x4096          0.90              0.80      0.82       [0.88]     0.88
int8 32x14336x4096         0.95    0.77      0.97      0.97       [1.02]     1.02
int8 32x8192x8192          0.95    0.93      [1.06]    1.07                  1.05
=========================  ======  ========  ========  =========  =========  =========

Earlier runs of the same build (table then without the 128-column tiles): bf16 16x4096x14336
0.82 -> 0.88 (kn 0.81 -> 0.83), fp8 16x4096x14336 0.81 -> 1.02, int8 32x4096x4096 0.96 -> 1.24,
int8 32x4096x14336 1.07 -> 1.52, bf16 1x4096x4096 0.69 -> 0.94, 8x4096x4096 0.71 -> 0.93,
32x4096x4096 0.76 -> 0.91, fp8 32x4096x4096 0.66 -> 0.77. Splitting a swapped tile's K through
the workspace never paid (``wg_16x64t`` with 2 splits: 0.84 against 0.92 unsplit at bf16
16x4096x4096, 0.87 against 0.88 at 16x4096x14336; 4 splits slower still): the reduction launch
costs more than the SMs it adds. At M = 64 (two or four swapped tile columns) the 64-row tile
is faster (bf16 64x4096x4096: 0.76 against 0.52 for ``wg_16x64t`` and 0.63 for ``wg_32x64t``
with 2 splits).

Split-K inside a thread-block cluster (the variants whose ``ksplit`` is set, ``wg_16x64tk2`` and
``wg_32x64tk2``): the cluster's two CTAs stream the two halves of one swapped tile's K stages,
and the leader adds the other's accumulators from distributed shared memory in rank order, with
no workspace and no second launch. Where the unsplit grid fills half the SMs (N = 4096: 64
tiles on 132 SMs) it is slower on every row: on an H200 (2026-11-28, the bench's own M <= 32
rows in 4 fresh processes per configuration, alternated; median ratio to the anchor, int8 at
M = 32):

=========================  ========  ========
M x N x K                  unsplit   2-CTA K
=========================  ========  ========
bf16 16x4096x4096          1.013     0.957
bf16 16x4096x4096 kn       1.015     0.914
bf16 16x4096x14336         1.010     0.970
bf16 16x4096x14336 kn      0.982     0.928
fp8 16x4096x4096           0.889     0.830
fp8 16x4096x14336          1.010     0.974
int8 32x4096x4096          1.350     1.221
int8 32x4096x14336         1.643     1.552
=========================  ========  ========

Those processes timed a cool GPU. ``bench gemm`` runs its rows back to back, at the 700 W power
cap (1455-1800 MHz), and there the unsplit tile loses where K is long. Re-measured hot and cool
(H200, 2026-11-28, one process; before each of 4 rounds 0.4 s of 8192^3 bf16 matmuls, "hot", or
1 s idle, 3 rounds, "cool"; the candidates and the anchor alternated; ratio to the anchor, hot /
cool; int8 at M = 32, hot only):

=========================  ===============  ===============
M x N x K                  unsplit          2-CTA K
=========================  ===============  ===============
bf16 16x4096x4096          0.991 / 1.080    1.007 / 1.020
bf16 16x4096x4096 kn       0.961 / 1.059    0.963 / 0.967
fp8 16x4096x4096           0.922 / 0.984    0.910 / 0.912
bf16 16x4096x14336         0.832 / 1.039    0.946 / 0.988
bf16 16x4096x14336 kn      0.824 / 1.009    0.905 / 0.938
fp8 16x4096x14336          0.918 / 1.052    1.004 / 1.011
fp8 fast 16x4096x14336     0.958            1.001
int8 32x4096x4096          1.483            1.369
int8 32x4096x14336         1.815            1.848
=========================  ===============  ===============

So the table also splits the K of N / 64 tiles up to half the SMs where K holds at least 96 stages
of 128 bytes (48 per CTA, ``_KSPLIT_STAGES_SWAPPED``): 5-14 % ahead hot at K = 14336, 1-7 %
behind cool there; at K = 4096 (64 or 32 stages) the split loses in both states.
Forced on more tiles it loses more (bf16 16x8192x8192 0.883 against 0.939, 16x14336x4096 0.766
against 0.938; one process), and 4-CTA clusters took about twice the unsplit time on every shape
(most likely not all of a persistent grid of 33 clusters of 4 fit the GPCs at once). Where one
CTA a tile leaves three quarters of the SMs idle, the split pays, and the table takes it there
(H200, 2026-11-28, one process, alternating rounds; ratio to the anchor; 48 tiles tie):

=========================  ========  ========
M x N x K (tiles)          unsplit   2-CTA K
=========================  ========  ========
bf16 16x1024x4096 (16)     0.697     0.839
bf16 16x1024x4096 kn       0.680     0.799
bf16 16x1024x14336         0.446     0.655
bf16 16x2048x4096 (32)     0.809     0.932
bf16 16x2048x8192          0.716     0.919
bf16 32x2048x4096          0.772     0.871
fp8 16x1024x4096           0.817     0.885
fp8 16x2048x4096           0.804     0.849
fp8 16x2048x8192           0.795     0.942
int8 32x1024x4096          1.374     1.452
int8 32x2048x8192          1.569     1.770
bf16 16x3072x4096 (48)     0.968     0.964
=========================  ========  ========

Two consumer warpgroups taking turns on one 64-row slice's K stages (each in its own
accumulators, one adding the other's sums), tried as 384-thread forms of ``wg_16x64t``,
``wg_32x64t`` and ``wg_64x64``, were no faster beyond the noise (H200, 2026-11-28, one process,
alternating; ratio to the anchor, table / that form: fp8 16x4096x4096 0.89 / 0.84, bf16
16x4096x14336 0.98 / 0.88, fp8 128x4096x4096 0.91 / 0.92, fp8 1024^3 0.91 / 0.75): not kept.
Part of what the M <= 32 rows lost was the epilogue's scale and bias reads after the main loop,
on every tile's critical path: the swapped tiles now read them when the tile starts, as do the
promoted (fp8, not block-scaled) tiles of at most 64 columns, and the CTA exits once its TMA
stores have read shared memory. Same H200, fresh processes of main and of this build alternated,
median ratio to the anchor, main -> now: fp8 16x4096x4096 0.90 -> 0.97, fp8 32x4096x4096 0.84 ->
0.92, fp8 16x8192x8192 0.92 -> 0.96, fp8 16x4096x14336 1.02 -> 1.06, fp8 128x4096x4096 0.91 ->
0.94, fp8 1024^3 0.93 -> 0.95, bf16 16x4096x4096 1.02 -> 1.05; the same bits.

cuBLAS's fp8 16x4096x4096 kernel runs 64 x 8 swapped tiles in 2-CTA clusters that split M and
multicast their shared weight tile (128 CTAs at N = 4096, each weight byte out of L2 once). Built
as swapped tiles of n8 / n16 per CTA (M = 16 / 32) in such clusters, they were no faster on any row
(H200, 2026-11-28, one process, alternating; ratio to the anchor, table / cluster tile: fp8
16x4096x4096 0.967 / 0.949, 32x4096x4096 0.914 / 0.920, 16x8192x8192 0.953 / 0.926, 16x14336x4096
0.955 / 0.800; bf16 16x4096x4096 1.045 / 1.025, 16x4096x14336 1.010 / 0.990, 16x2048x4096 0.960 /
0.817 against the K split; at 16 stages instead of 23 still behind) and ncu timed the fp8
16x4096x4096 kernel as long as the one-CTA tile's (9.15 against 9.12 us, cuBLAS 8.29 us, each
reading 16.9 MB at 38-42 % of the DRAM peak): the L2-to-SM traffic that multicast halves is not
what these calls wait on. Not kept. What they did wait on, in part, was the start: the tile walk's
run-time divisions (four reciprocal-based ones) lay between the producer's setmaxnreg and its first
TMA load; one matrix, one tile column and whole groups now skip them or divide by a constant (the
same tile order). Fresh processes of main and of this build alternated (3 each), median ratio to
the anchor, main -> now, the same bits: fp8 16x4096x4096 0.98 -> 1.01, 16x8192x8192 0.96 -> 0.96,
16x14336x4096 0.96 -> 0.97, 32x4096x4096 0.93 -> 0.94, 16x4096x14336 1.06 -> 1.08; bf16
16x4096x4096 1.06 -> 1.07, 16x8192x8192 0.95 -> 0.95, 16x4096x14336 1.02 -> 1.03 (kn 0.97 -> 1.00);
int8 32x4096x4096 1.36 -> 1.40; fp8 1024^3 0.93 -> 0.95; bf16 1024^3 0.93 -> 0.93.

Split-K through the workspace pays only while one row of tiles streams a long K: M <= 64 (less
the calls that take a swapped tile, whose K splits only inside a cluster, see above), at least
48 stages of 128 bytes of K per split, as many splits as fill half of 132 CTAs (``_split_k``; at
most 16).
Measured on an H100 (2026-11-28, ``wg_64x128`` forced with 1 to 4 splits, TFLOP/s of two runs;
run-to-run noise reaches 10 % on these 15-35 us calls; one bf16 sample of run 2 was disturbed):

=========================  ===========  ===========  ===========  ===========  =====
M x N x K (stages)         1 split      2            3            4            table
=========================  ===========  ===========  ===========  ===========  =====
fp8 16x4096x14336 (112)    60.5, 54.7   60.5, 61.5   58.8, 59.2   59.7, 59.6   2
fp8 64x4096x14336 (112)    250.9        228.8        219.2        222.7        2
fp8 16x4096x4096 (32)      39.7, 37.6   31.6, 33.5   32.0, 33.3   32.8, 33.9   1
fp8 16x8192x8192 (64)      70.9, 72.6   63.5, 64.7   61.7, 60.7   62.0, 62.2   1
bf16 16x4096x14336 (224)   34.4         37.5         36.7         37.1         2
bf16 16x8192x8192 (128)    40.5, 41.8   38.3, 38.3   37.4, 36.7   37.4, 37.1   1
bf16 16x4096x4096 (64)     26.3, 24.1   23.8, 24.9   23.8, 24.2   24.1, 24.8   1
=========================  ===========  ===========  ===========  ===========  =====

Two splits of 56 stages pay at M = 16 (fp8 16x4096x14336; ``torch._scaled_mm`` 65-67), splits
of 32 stages or fewer do not, and splits that take the grid past half the SMs (64 tiles in 2, 32
tiles in 3 or 4) are no faster than fewer. The one M = 64 sample (run 1) ran faster unsplit.
Every rule is a function of the shape and the SM count, so the choice is deterministic and needs
no tuning cache.

Thread-block clusters (a variant's ``cluster`` in arch_matrix.toml): ``wg_128x256c2`` runs
two CTAs on vertically neighbouring 128 x 256 tiles that multicast their shared B tile, so B
leaves L2 once per pair. The table does not pick it: forced beside the one-CTA tiles in one run
(H100 SXM, 2026-11-28, TFLOP/s, b K-major, bf16 out; run-to-run noise is about 3 %) it is no
faster, and with it in the table the bench ran 0.98x (geomean of the 34 bf16 / fp8 rows it
took, 0.92-1.08x per row) of the same build without it, int8 0.92-0.99x. A 2-CTA 128 x 128
tile, measured the same way, was 0.92-1.14x of ``wg_128x128`` and 0.98x where the table picks
that tile (bf16 1024x14336x4096): it was not kept.

=========================  =======  =========  =======
M x N x K                  128x256  128x256c2  cuBLAS
=========================  =======  =========  =======
bf16 4096^3                770      761        790
bf16 8192^3                696      678        789
bf16 8192x4096x4096        751      653        788
bf16 1024x4096x14336       802      753        807
fp8 4096^3                 1399     1377       1344
fp8 8192^3                 1293     1300       1435
fp8 1024x8192x8192         1477     1454       1378
int8 8192^3                1367     1385       982
fp8 block 8192^3           1021     1084       1316
=========================  =======  =========  =======

The two rows where the cluster looked ahead were re-measured on an H200 (2026-11-28,
``tools/gemm_sweep.py`` three times, the two tiles' order alternated; TFLOP/s of each sweep):
no difference beyond the spread, so the table still does not pick it.

=========================  ==================  ==================  ==================
M x N x K                  128x256             128x256c2           cuBLAS
=========================  ==================  ==================  ==================
fp8 block 4096^3           1061, 1062, 1062    1052, 1051, 1053    1254, 1252, 1252
fp8 block 8192^3           961, 1002, 961      988, 962, 1008      1331, 1331, 1166
int8 4096^3                1208, 1208, 1222    1214, 1142, 1240    784, 736, 795
int8 8192^3                1370, 1317, 1395    1366, 1388, 1386    921, 931, 925
=========================  ==================  ==================  ==================

fp8 accumulation (``scaled_mm``'s ``use_fast_accum``, as ``torch._scaled_mm``'s): Hopper's fp8
wgmma adds into its accumulators with reduced precision. With the default False, the wgmma path
sums each 128-wide block of K (one pipeline stage) in fresh registers and adds it into the f32
accumulators, as block scales do. Measured on an H100 (2026-11-28, K = 16384, f32 out, max error
over max |f64 reference|): positive operands in [1, 2) 3.8e-5 (cuBLAS without fast accumulation:
the same), 0.29 with direct accumulation (cuBLAS fast accumulation: the same); Gaussian operands
1.1e-4 vs 7.0e-3. Promoting every 256 K instead was about 4 % faster on 128x256 tiles (4096³:
1369 vs 1311 TFLOP/s) with 30 times the error (1.2e-3). Two-level costs 1-6 % on large shapes
(4096³ per-tensor: 1347 vs 1406 TFLOP/s, 8192³ 1405 vs 1422) and up to 22 % at M = 16
(16x4096x4096: 28 vs 36). The H100's mma.sync path (forced) gave 0 and 1.4e-6 in both modes: it
runs the same code for both.

The promoted loop of tiles up to 128 columns keeps one stage's wgmmas running while it adds the
previous stage's sums, and drains the wgmma pipeline once per trip of a few stages (4 on the
64-column tiles, 2 on 128: their registers hold no more). Draining every two stages had cost the
one consumer of ``wg_64x64`` (the table's tile at M = 128, N = 4096) 6-7 % (H200,
2026-11-28, one process, alternating; ratio to the anchor, trips of 2 / 4, the same bits): fp8
128x4096x4096 0.915 / 0.983, 128x4096x14336 0.925 / 0.983; ``wg_128x64`` (two consumers, which
fill each other's drains) 128x8192x8192 0.958 / 0.970, 1024^3 0.969 / 0.975. Trips of 8 and 16
were slower than 4 (128x4096x14336: 0.97, 0.94), 2-CTA clusters of 64 x 64 tiles multicasting B
too (0.962 with trips of 4).

``wg_128x64`` holds three stages' partial sums (``promote_sets`` in arch_matrix.toml): each
consumer keeps two batches queued behind the one it promotes, so the two consumers' promotions
leave the tensor cores fewer gaps. Measured on an H200 (2026-11-28, one process, hot as the
K-split tables above, alternating rounds; ratio to the anchor; "main": the same variant with two
sets, main's kernels loaded beside this build's, docs/bench/h200-2026-11-28-fp8m14, runs 1-5;
the same bits on every row; int8 runs the unchanged direct loop, a measure of the noise):

=========================  ======  ======  ======  ===============
M x N x K (run)            main    3 sets  4 sets  3 sets, trips 8
=========================  ======  ======  ======  ===============
fp8 1024^3 (1)             0.935   0.953
fp8 1024^3 (2)             0.933   0.962   0.939   0.960
fp8 1024^3 (2, again)      0.938   0.959
fp8 1024^3 (3)             0.947   0.952
fp8 1024^3 (4, 5)          0.928   0.957
                           0.929   0.950
fp8 128x8192x8192 (1)      0.940   0.949
fp8 128x8192x8192 (2)      0.945   0.963   0.937   0.951
fp8 128x8192x8192 (2b)     0.942   0.959
fp8 128x8192x8192 (3)      0.940   0.957
fp8 128x8192x8192 (4, 5)   0.942   0.955
                           0.951   0.963
fp8 2048x1024x1024 (3, 4)  0.800   0.824
                           0.808   0.829
fp8 512x2048x4096 (5)      0.919   0.969
fp8 128x6144x4096 (5)      0.888   0.929
fp8 256x1024x8192 (5)      0.657   0.710
int8 1024^3 (3)            1.011   1.033
=========================  ======  ======  ======  ===============

The deeper queue did not pay elsewhere: on ``wg_128x64k2`` (6 stages, three of them then held by
the consumer) it lost (fp8 128x4096x14336 0.975 -> 0.911, 128x4096x8192 0.964 -> 0.913); on the
one consumer of ``wg_64x64`` it tied (fp8 128x4096x4096 0.926 -> 0.923); on the swapped tiles,
with four sets in trips of 8 or two in trips of 8, it tied or lost (fp8 16x4096x4096 0.905 ->
0.893 / 0.902, 16x8192x8192 0.966 -> 0.970 / 0.973, ``wg_16x128t`` 16x14336x4096 0.978 ->
0.974). Trips of 3 on ``wg_128x128`` spill (24 bytes of stack) and lost (128x14336x4096 0.941 ->
0.922). With fast accumulation (no promotion to hide) one consumer of 128 columns is the faster
few-tile form, as for bf16 (``wg_128x64`` / ``wg_64x128``, same runs: fp8 fast 1024^3 0.919 /
0.934, 0.920 / 0.932, 0.906 / 0.930, 0.921 / 0.938, 0.926 / 0.942; 128x8192x8192 0.949 / 0.965,
0.939 / 0.954, 0.949 / 0.962; 512x2048x4096 0.890 / 0.933; 128x6144x4096 0.836 / 0.859;
256x1024x8192 0.696 / 0.739), and the table takes it there.
The other forced picks at the bench's rows kept the table's (fp8 1024x4096x4096: 128 x 256 0.958
/ 0.961, 128 x 128 0.954, 128 x 64 0.795; 2048^3 128 x 256 0.956, 128 x 64 0.793;
1024x14336x4096 0.988 / 0.987; fast 1024x14336x4096 0.877 / 0.875, 1024x8192x8192 0.988 /
0.968; fast 128x4096x4096 ``wg_64x64`` 0.861, ``wg_128x64k2`` 0.843, ``wg_64x128`` 0.810; fast
16x4096x4096 ``wg_16x64t`` 0.958, ``wg_32x64t`` 0.942, ``wg_16x64tk2`` 0.925).

Wider tiles have no registers for a second stage's partial sums: ``wg_128x256`` waits for each
128-column part's wgmmas and adds them before the next part starts, so each consumer drains the
wgmma pipeline twice a stage and the other consumer alone keeps the tensor cores busy meanwhile.
From 4096 rows the table gives promoted calls (fp8 without block scales or fast accumulation)
``wg_128x128`` instead (``_PROMOTED_NARROW_M``). ncu on an H200 (2026-11-28, one call each,
clocks free; SM cycles, 128x128 / 128x256 / cuBLAS): fp8 8192^3 1175k / 1203k / 1136k,
8192x14336x4096 1077k / 1108k / 1040k, 1024x8192x8192 166k / 172k / 153k; the narrower tile
also read less from DRAM (8192^3: 634 / 732 MB; cuBLAS 527). Forced beside the anchor, hot (the
K-split tables' probe; run 1: docs/bench/h200-2026-11-28-session12, 3 rounds; run 2:
docs/bench/h200-2026-11-28-int13, 5 rounds; ratio to ``torch._scaled_mm``, 128x128 / 128x256):

=========================  ============================  ============================
M x N x K                  run 1                         run 2
=========================  ============================  ============================
fp8 4096^3                 0.979 / 0.964                 0.969 / 0.966
fp8 8192^3                 0.940 / 0.924, 0.970 / 0.936  0.948 / 0.941
fp8 8192x4096x4096         0.965 / 0.963                 0.975 / 0.969
fp8 8192x14336x4096        0.974 / 0.914                 0.973 / 0.941
fp8 8192x4096x14336        0.969 / 0.964                 1.014 / 0.994
fp8 rowcol 8192^3          0.934 / 0.949                 0.945 / 0.919
fp8 1024x8192x8192         0.949 / 0.978                 0.990 / 0.975
fp8 1024x4096x14336        0.924 / 0.918                 0.986 / 0.964
fp8 2048^3                                               0.941 / 0.958
fp8 fast 8192^3                                          1.072 / 1.013
fp8 fast 4096^3                                          0.924 / 0.964
=========================  ============================  ============================

Below 4096 rows the runs disagree or the wide tile wins, and fast accumulation (no promotion to
hide) is mixed: those keep the fill rule's pick.

The 128 x 128 promoted tiles read their epilogue factors (row / column scales, bias) while the
tile's last wgmma batch runs (kernels/gemm/wgmma.cuh, ``kLastFactors``). Read after the main
loop, row and column scales (new with every tile) cost an L2 round trip with both consumers idle.
H200, 2026-11-28, the K-split tables' hot probe, main's install and this build in fresh processes
alternated (2 each, 3 rounds; median ratio to ``torch._scaled_mm``, main -> now;
docs/bench/h200-2026-11-28-blk14): rowcol 4096^3 0.925 -> 0.960, rowcol 8192^3 0.950 -> 0.966;
per-tensor (a scale already in L1) 4096^3 0.980 -> 0.982, 8192x4096x4096 0.976 -> 0.969, 8192^3
0.983 -> 0.971, 8192x14336x4096 0.966 -> 0.996, within the spread. Measured the same way and not
kept: the factors read when the tile starts (the first wgmma fence waits for the loads:
per-tensor 4096^3 0.992 -> 0.927, 8192x4096x4096 0.970 -> 0.915); prefetched into L1 when the
tile starts (rowcol 0.929 -> 0.913, 0.923 -> 0.921); the second consumer started 4 stages after
the first so that their epilogues alternate (10-13 % slower on every 128 x 128 row: per-tensor
4096^3 0.995 -> 0.872).

fp8 block scales (DeepSeek-V3's 1 x 128 / 128 x 128) take ``wg_128x256`` on large shapes. Its
promotion reads each K block's scales from a per-warp ring in shared memory that cp.async fills
two K blocks ahead (kernels/gemm/wgmma.cuh, ``Ring``); read from global memory at the promotion,
their L2 latency had stalled the consumers once per stage. Forced on an H200 (2026-11-28,
``tools/gemm_sweep.py --dtypes fp8block``, TFLOP/s, anchor ``torch._scaled_mm`` with the same
block scales; main's kernels in brackets, from the previous round of the same session):

=========================  =============  =============  =============  =======
M x N x K                  128x128        128x256        128x256c2      anchor
=========================  =============  =============  =============  =======
fp8 block 4096^3           1022 (932)     1206 (1062)    1199 (1056)    1251
fp8 block 8192^3           1030 (900)     1110 (1011)    1130 (1029)    1274
=========================  =============  =============  =============  =======

The cluster tile stays within the run-to-run spread of ``wg_128x256`` (ahead on 3 of 8 forced
rows over the session's builds, behind on 5), so the table keeps the one-CTA tile. In ``bench
gemm --dtypes fp8`` of the same build the ratio to the anchor went from 0.850 to 0.960 at
4096^3 and from 0.784 to 0.923 at 8192^3 (docs/bench/h200-2026-11-28-blk10).

Block scales on 128 x 128 tiles stay well behind 128 x 256 (H200, 2026-11-28, hot, ratio to the
anchor, 4096^3 and 8192^3: 0.85-0.88 against 0.92-0.95). ncu (clocks free, 4096^3): 220k SM
cycles against 172k for per-tensor scales on the same tile, 52M warp instructions against 39M:
each K block's scale copy and read adds about 44 instructions per consumer warp and stage to a
loop whose issue, more than the copies' latency, sets its pace. Copies 5 blocks ahead (rings in
the idle epilogue staging area) gained 1-3 % on 128 x 128 and lost 4-8 % on 128 x 256; copies
running on into the next tile's first blocks gained 0-2 % and lost 11-14 % on 128 x 256: neither
kept.

"TMA-legal": K >= 1, M, N and K below 2**31 (TMA coordinates are 32-bit), both operands
16-byte aligned with a row stride that is a multiple of 16 bytes (and at least the row), and
for 1-byte dtypes both operands K-major (``a`` row-major, ``b`` column-major). Everything else
(odd strides, ``K == 0``, extents of 2**31 or more) runs the mma.sync variants, which take any
layout, alignment and size (64-bit indexing, one block per tile along grid.x).
``AOTKERNELS_GEMM_PATH=mma_sync|wgmma|tcgen05`` forces a path (tests use it to run every path
on one GPU).

Batches (``matmul`` on [..., M, K] @ [..., K, N]): one launch walks every matrix, the k-th of
a / b / out ``k`` batch strides further on (0 for broadcast operands); the batch dims must
collapse into one stride each (contiguous, broadcast and expanded batches do). mma.sync runs one
matrix per grid.z; wgmma walks the tiles of every matrix from its persistent grid, each batched
operand's matrices folded into its TMA map's outer dimension (whole rows apart; an M/N-major
operand also needs K a multiple of the 64-element stage). ``[B, M, K] @ [K, N]`` with a's rows
back to back is one GEMM of B * M rows. tcgen05 takes one matrix per launch.
"""

from __future__ import annotations

import math
import os
from typing import Any, NamedTuple

from .. import loader as _loader
from ..arrays import ITEMSIZE, dtype_name
from ..dtypes import DTYPES, FP8, split_dtype
from ..errors import NoKernelImageError
from ._op import (
    Args,
    Attr,
    Backward,
    BackwardCtx,
    Launch,
    Meta,
    Op,
    Output,
    OutSpec,
    Tensor,
    TensorMap,
    check_dtype,
    check_vector,
    tensor_map_2d,
)

__all__ = ["matmul", "scaled_mm"]

FAMILY = "gemm"
_MAX_GRID_YZ = 65535  # CUDA grid.z limit (mma.sync: one matrix per grid.z)
# The out_dtype member (of [families.gemm.constants]) for each output dtype.
_OUT_CODES = {"f32": "out_f32", "f16": "out_f16", "bf16": "out_bf16", "int32": "out_s32"}
_OUT_BOX = 64  # the TMA-store epilogue's boxes of d: 64 x 64 elements (128 bytes of a row)
_PATHS = ("mma_sync", "wgmma", "tcgen05")


class _Operand(NamedTuple):
    ld: int  # row stride in elements of its memory layout
    major: str  # "k" (K is the unit-stride dim) or "m" / "n"


def _matrix_layout(op: str, arg: str, info: Meta, outer: str) -> _Operand:
    """How a 2-D operand lies in memory: one of its dims must have unit stride.

    ``outer`` is the letter of the non-K dim ("m" for a [M, K], "n" for b [K, N]).
    """
    if len(info.shape) != 2:
        want = "[M, K]" if arg == "a" else "[K, N]"
        raise ValueError(f"{op}: {arg} must be 2-D {want}, got shape {tuple(info.shape)}")
    (r, c), (sr, sc) = info.shape, info.strides
    k_is_rows = arg == "b"  # a is [M, K] (K = cols); b is [K, N] (K = rows)
    # Prefer K-major when both readings hold (a dim of size 1 has any stride).
    if k_is_rows:
        if sr == 1 or r == 1:
            return _Operand(sc if c > 1 else max(r, 1), "k")
        if sc == 1 or c == 1:
            return _Operand(sr if r > 1 else max(c, 1), outer)
    else:
        if sc == 1 or c == 1:
            return _Operand(sr if r > 1 else max(c, 1), "k")
        if sr == 1 or r == 1:
            return _Operand(sc if c > 1 else max(r, 1), outer)
    raise ValueError(
        f"{op}: {arg} must be row- or column-major (one dimension with stride 1), got strides "
        f"{tuple(info.strides)} for shape {tuple(info.shape)}; pass a contiguous copy"
    )


def _tma_legal(info: Meta, lay: _Operand, inner: int) -> bool:
    item = ITEMSIZE[info.dtype]
    return (
        info.align == 16 and (lay.ld * item) % 16 == 0 and lay.ld >= inner and lay.ld * item < 2**40
    )


def _tcgen05_enabled() -> bool:
    # The tcgen05 kernels are built into the sm_100a image but have never run on a Blackwell
    # GPU (none was available): until they have, they run only when asked for.
    return os.environ.get("AOTKERNELS_GEMM_TCGEN05", "") not in ("", "0")


class _Pick(NamedTuple):
    symbol: str
    variant: str
    path: str


def _k_stages(k: int, itemsize: int) -> int:
    """The 128-byte K stages of a call (every wgmma variant's k_bytes; the split rules count
    them)."""
    return math.ceil(k * itemsize / 128)


def _tiles(batch: int, m: int, n: int, bm: int, bn: int) -> int:
    """The bm x bn tiles covering ``batch`` m x n outputs."""
    return batch * math.ceil(m / bm) * math.ceil(n / bn)


def _last_wave_fill(tiles: int, sms: int) -> float:
    """The fraction of the persistent grid's tile slots that hold a tile (1.0: whole waves)."""
    return tiles / (math.ceil(tiles / sms) * sms)


# A 128 x 128 tile beats 128 x 256 only where its last wave is this much fuller (measured: M =
# 1024, N = 14336, K = 4096, 0.97 vs 0.85 full: 720 vs 676 TFLOP/s bf16; at equal fill the wider
# tile is 2-6 % faster).
_FILL_MARGIN = 0.05


# fp8 two-level accumulation: from this many rows 128 x 128 tiles (one stage's promotion under
# the next stage's wgmmas) beat 128 x 256 ones (each 128-column part drained before it is
# promoted); below it the H200 measurements were mixed (the module docstring).
_PROMOTED_NARROW_M = 4096

# Swapped tiles (d^T = b^T a^T, the variants whose ``swap_ab`` is set): (rows of M, variant of
# 64 columns, variant of 128 columns, variant of 64 columns whose 2-CTA cluster splits K), the
# fewest rows that hold M taken; 128 columns (two consumer warpgroups) where the 64-column tiles
# would take more than one wave of the SMs, K split in the cluster where they would fill at most
# a quarter of them (at half, 64 tiles on 132 SMs, the unsplit grid measured faster).
_SWAP_TILES = (
    (16, "wg_16x64t", "wg_16x128t", "wg_16x64tk2"),
    (32, "wg_32x64t", "wg_32x128t", "wg_32x64tk2"),
)
_SWAP_MAX_M = _SWAP_TILES[-1][0]

# 2-CTA K splits of a grid that is one wave either way (the swapped 64-column tiles at up to half
# the SMs; 128 x 64 in place of 64 x 64 tiles at M <= 128): the fewest 128-byte K stages per CTA
# with which the split pays on a power-capped H200 (the module docstring's hot table).
_KSPLIT_STAGES_SWAPPED = 48
_KSPLIT_STAGES = 32


def _swaps(m: int, batch: int, block_scaled: bool, a_kmajor: bool) -> bool:
    """Whether a call takes a swapped tile: M up to ``_SWAP_MAX_M``, one matrix, a K-major (b's
    tile is wgmma's A operand, a's its B operand), no block scales (those keep their 1 x 128 /
    128 x 128 blocks on unswapped tiles)."""
    return m <= _SWAP_MAX_M and batch == 1 and not block_scaled and a_kmajor


def _wgmma_tile(
    m: int, n: int, batch: int, sms: int, block_scaled: bool, a_kmajor: bool = True,
    itemsize: int = 2, *, k: int, promoted: bool = False, fast: bool = False,
) -> str:  # fmt: skip
    """The wgmma variant of one call (the tile table in the module docstring). Shapes that split
    along K (``_split_k``) take ``wg_64x128`` whatever the GPU: the workspace is sized from the
    shape alone. ``itemsize``: bytes per operand element; ``k``: the call's K (the K splits
    inside a cluster need enough 128-byte stages of it); ``promoted``: fp8 two-level
    accumulation without block scales (``use_fast_accum`` off); ``fast``: fp8 without block
    scales, ``use_fast_accum`` on (the wgmmas accumulate directly)."""
    stages = _k_stages(k, itemsize)
    if _swaps(m, batch, block_scaled, a_kmajor):
        rows, tile64, tile128, split2 = next(t for t in _SWAP_TILES if m <= t[0])
        tiles = _tiles(1, m, n, rows, 64)
        if tiles > sms:
            return tile128
        if 4 * tiles <= sms or (2 * tiles <= sms and stages >= 2 * _KSPLIT_STAGES_SWAPPED):
            return split2
        return tile64
    if m <= _SPLIT_MAX_M:
        return "wg_64x128"
    # Few tiles: 8192 outputs each, as two consumers of 64 columns for int8 and promoted fp8
    # (faster there, slower for bf16 and fast fp8: the H200 tables in the module docstring), else
    # one of 128.
    few = "wg_128x64" if itemsize == 1 and not block_scaled and not fast else "wg_64x128"
    if m <= 128:
        if _tiles(batch, m, n, 64, 128) <= sms // 2:
            # 64 x 128 tiles would leave half the SMs idle: 64 x 64 ones, or as many 128 x 64
            # tiles whose K a 2-CTA cluster splits where K is long, from 97 rows (at 96 the 64 x
            # 64 tiles measured faster).
            split = m > 96 and stages >= 2 * _KSPLIT_STAGES and batch == 1 and not block_scaled
            return "wg_128x64k2" if split else "wg_64x64"
        if not block_scaled and _tiles(batch, m, n, 128, 128) > sms // 2:
            return "wg_128x128"  # one tile row: fewer, larger tiles where they fill the GPU
        return few
    wide = _tiles(batch, m, n, 128, 256)
    if wide < sms // 2:
        return few  # few tiles: fill the GPU
    if block_scaled:
        return "wg_128x256"
    if promoted and m >= _PROMOTED_NARROW_M:
        return "wg_128x128"  # its promotion overlaps the next stage's wgmmas (module docstring)
    narrow = _tiles(batch, m, n, 128, 128)
    if _last_wave_fill(narrow, sms) > _last_wave_fill(wide, sms) + _FILL_MARGIN:
        return "wg_128x128"
    return "wg_128x256"


def _pick(
    op: str,
    dtype: str,
    m: int,
    n: int,
    k: int,
    layout: str,
    tma_ok: bool,
    fam: Any,
    batch: int = 1,
    block_scaled: bool = False,
    promoted: bool = False,
    fast: bool = False,
) -> _Pick:
    """The variant for one call (the tile table in the module docstring). ``dtype`` names the
    entries (``"<a>x<b>"`` for mixed fp8 operands); ``batch`` matrices share the launch;
    ``promoted``: fp8 two-level accumulation (no block scales, ``use_fast_accum`` off);
    ``fast``: fp8 without block scales, ``use_fast_accum`` on."""
    forced = os.environ.get("AOTKERNELS_GEMM_PATH", "")
    if forced and forced not in _PATHS:
        raise ValueError(f"AOTKERNELS_GEMM_PATH must be one of {', '.join(_PATHS)}, got {forced!r}")
    if forced == "tcgen05" and batch > 1:
        raise NotImplementedError(
            f"{op}: AOTKERNELS_GEMM_PATH=tcgen05 takes one matrix per call, got a batch of "
            f"{batch} (the tcgen05 kernels have no batch loop; unset it for batched matmul)"
        )
    sms = fam.device.sm_count
    item = ITEMSIZE[split_dtype(dtype)[0]]
    if item == 1 and layout != "kk":
        tma_ok = False  # 8-bit wgmma / tcgen05 read both operands K-major only
    order: list[str] = []
    if tma_ok and k >= 1:
        if (_tcgen05_enabled() or forced == "tcgen05") and batch == 1:
            order.append("tc_128x256")
        a_kmajor = layout[0] == "k"
        order.append(
            _wgmma_tile(
                m, n, batch, sms, block_scaled, a_kmajor, item, k=k, promoted=promoted, fast=fast
            )
        )
    order.append("mma_128x128" if _tiles(batch, m, n, 128, 128) >= sms else "mma_64x64")
    base = f"ak_{op}_{dtype}_"
    for variant in order:
        path = fam.variants[variant]["path"]
        if forced and path != forced:
            continue
        symbol = base + variant + ("" if path == "mma_sync" else f"_{layout}")
        if symbol in fam.kernels:
            return _Pick(symbol, variant, path)
    dev = fam.device
    where = f"device {dev.index} ({dev.name}, cc {dev.cc_str}) runs image {fam.choice.target}"
    what = " x ".join(dtype_name(d) for d in split_dtype(dtype))
    if forced:
        raise NoKernelImageError(
            f"{op}: AOTKERNELS_GEMM_PATH={forced} has no {what} kernel for this "
            f"call ({where}; the {forced} path needs TMA-legal operands and its target)"
        )
    raise NoKernelImageError(
        f"{op}: no {what} GEMM kernel for {where}; {what} needs "
        "tensor cores this GPU lacks (fp8: sm_89+, bf16: sm_80+)"
    )


# Split-K (wgmma path, tile table): the CTAs whose half it fills at most (an H100 / H200's SM
# count; the workspace shape must not depend on the device, see _split_k), the fewest 128-byte K
# stages per split, the most splits, and the most rows (one tile row of wg_64x128).
_SPLIT_CTAS = 132
_SPLIT_MIN_STAGES = 48
_SPLIT_MAX = 16
_SPLIT_MAX_M = 64


class _Split(NamedTuple):
    splits: int  # 1: no split-K
    k_split: int  # K elements per split, a multiple of 128 (0 without splits)

    def ws_shape(self, m: int, n: int) -> tuple[int, ...]:
        """The f32 partials [splits, M, N rounded up to a multiple of 4]; (0,) without splits."""
        return (self.splits, m, -(-n // 4) * 4) if self.splits > 1 else (0,)


def _split_k(
    dtype: str, m: int, n: int, k: int, batch: tuple[int, ...], swapped: bool = False
) -> _Split:
    """Split-K for one matrix of at most 64 rows (one row of ``wg_64x128`` tiles; the tile
    table): as many splits as fill half of ``_SPLIT_CTAS`` CTAs, each at least
    ``_SPLIT_MIN_STAGES`` stages of 128 bytes of K. A function of the call only (not of the
    GPU), so that the workspace shape is known without a device (torch's fake tensors); int8
    (exact s32 sums), batches and swapped tiles (``swapped``: the call takes one, ``_swaps``; the
    table splits their K inside a thread-block cluster instead) do not split. Splits start on
    128-element K blocks (the fp8 scale blocks)."""
    int8 = split_dtype(dtype)[0] == "int8"
    if swapped or m > _SPLIT_MAX_M or math.prod(batch) > 1 or int8 or not n:
        return _Split(1, 0)
    stages = _k_stages(k, ITEMSIZE[split_dtype(dtype)[0]])
    tiles = math.ceil(n / 128)
    splits = min(_SPLIT_CTAS // (2 * tiles), stages // _SPLIT_MIN_STAGES, _SPLIT_MAX)
    if m == 0 or splits < 2:
        return _Split(1, 0)
    block = int(_loader.constants(FAMILY)["scale_block_k"])
    blocks = math.ceil(k / block)
    per = math.ceil(blocks / splits)
    return _Split(math.ceil(blocks / per), per * block)


class _Scales(NamedTuple):
    mode_a: int
    mode_b: int
    a: Meta | None
    b: Meta | None
    sa: tuple[int, int]
    sb: tuple[int, int]


def _scale_candidates(
    info: Meta, vec: tuple[tuple[int, ...], ...], block: tuple[int, int]
) -> set[int]:
    shape = tuple(info.shape)
    mode = _loader.constants(FAMILY)["scale_mode"]
    modes = set()
    if math.prod(shape) == 1:
        modes.add(mode["scale_tensor"])
    if shape in vec:
        modes.add(mode["scale_vector"])
    if shape == block:
        modes.add(mode["scale_block"])
    return modes


def _vector_stride(info: Meta) -> int:
    """Element stride along the non-unit dim of a (L,), (L, 1) or (1, L) scale vector."""
    if len(info.shape) == 1:
        return info.strides[0]
    return info.strides[0] if info.shape[0] != 1 else info.strides[1]


def _scales(a: Args, dtype: str, m: int, n: int, k: int) -> _Scales:
    """Scale modes from the scale shapes: per tensor (1 element), per row of a ((M,) or
    (M, 1)) / column of b ((N,) or (1, N)), or fp8 block scales: a (M, ceil(K/128)) and
    b (ceil(N/128), ceil(K/128)), which must come together."""
    op = a.op
    sa, sb = (a["scale_a"], a["scale_b"]) if "scale_a" in a.names else (None, None)
    if (sa is None) != (sb is None):
        raise ValueError(f"{op}: scale_a and scale_b must be given together (or both None)")
    c = _loader.constants(FAMILY)
    mode = c["scale_mode"]
    if sa is None or sb is None:
        return _Scales(mode["scale_none"], mode["scale_none"], None, None, (0, 0), (0, 0))
    check_dtype(op, "scale_a", sa, ("f32",))
    check_dtype(op, "scale_b", sb, ("f32",))
    kb, nb = math.ceil(k / c["scale_block_k"]), math.ceil(n / c["scale_block_n"])
    ca = _scale_candidates(sa, ((m,), (m, 1)), (m, kb))
    cb = _scale_candidates(sb, ((n,), (1, n)), (nb, kb))
    if not ca:
        raise ValueError(
            f"{op}: scale_a.shape must be (1,), ({m},), ({m}, 1) or ({m}, {kb}) (1x128 blocks), "
            f"got {tuple(sa.shape)}"
        )
    if not cb:
        raise ValueError(
            f"{op}: scale_b.shape must be (1,), ({n},), (1, {n}) or ({nb}, {kb}) (128x128 "
            f"blocks), got {tuple(sb.shape)}"
        )
    plain_a, plain_b = ca - {mode["scale_block"]}, cb - {mode["scale_block"]}
    if mode["scale_block"] in ca and mode["scale_block"] in cb and not (plain_a and plain_b):
        if ITEMSIZE[dtype] != 1 or dtype == "int8":
            raise TypeError(f"{op}: block scales take fp8 operands, got {dtype_name(dtype)}")
        (sa0, sa1), (sb0, sb1) = sa.strides, sb.strides
        return _Scales(mode["scale_block"], mode["scale_block"], sa, sb, (sa0, sa1), (sb0, sb1))
    if not plain_a or not plain_b:
        raise ValueError(
            f"{op}: block scales need both scale_a ({m}, {kb}) and scale_b ({nb}, {kb}), got "
            f"{tuple(sa.shape)} and {tuple(sb.shape)}"
        )
    mode_a = mode["scale_tensor"] if mode["scale_tensor"] in plain_a else mode["scale_vector"]
    mode_b = mode["scale_tensor"] if mode["scale_tensor"] in plain_b else mode["scale_vector"]
    sa_s0 = _vector_stride(sa) if mode_a == mode["scale_vector"] else 0
    sb_s0 = _vector_stride(sb) if mode_b == mode["scale_vector"] else 0
    return _Scales(mode_a, mode_b, sa, sb, (sa_s0, 0), (sb_s0, 0))


def _multicast(v: dict[str, Any]) -> int:
    """The CTAs of a variant's cluster that share one B tile by multicast, each on its own tile
    row (1 without a cluster, and for a K-split cluster, whose CTAs all run one tile)."""
    return int(v.get("cluster", 1)) // int(v.get("ksplit", 1))


def _tensor_maps(
    pick: _Pick, fam: Any, a: Meta, la: _Operand, b: Meta, lb: _Operand, m: int, n: int, k: int,
    folds: tuple[int, int] = (0, 0),
) -> tuple[TensorMap, ...]:  # fmt: skip
    """TMA descriptors of a and b, as the kernels expect them (arch_matrix.toml, gemm).

    ``folds``: rows (of the map's outer dimension) that the other matrices of a batch add to
    a's and b's maps (the kernels offset their outer coordinate by ``z * batch stride / ld``).
    """
    if pick.path == "mma_sync":
        return ()
    v = fam.variants[pick.variant]
    item = ITEMSIZE[a.dtype]
    bk = int(v["k_bytes"]) // item
    # A multicast cluster's CTAs each load one slice of their shared K-major B tile (a narrower
    # box); a K-split cluster's CTAs load whole tiles.
    b_rows = int(v["bn"]) // _multicast(v)
    box_inner = 128 // item
    maps = []
    for name, info, ld, outer_extent, tile, k_major, fold in (
        ("a", a, la.ld, m, int(v["bm"]), la.major == "k", folds[0]),
        ("b", b, lb.ld, n, b_rows, lb.major == "k", folds[1]),
    ):
        inner, outer = (k, outer_extent) if k_major else (outer_extent, k)
        outer += fold
        maps.append(
            tensor_map_2d(
                f"tmap_{name}",
                name,
                DTYPES[info.dtype].tma,
                inner,
                outer,
                ld * item,
                box_inner,
                tile if k_major else bk,
            )
        )
    return tuple(maps)


class _Problem(NamedTuple):
    """A validated call: operand layouts, sizes, output dtype and scales."""

    la: _Operand
    lb: _Operand
    m: int
    n: int
    k: int
    out_dtype: str
    scales: _Scales
    bias: Meta | None
    batch: tuple[int, ...]  # the broadcast batch shape (matmul), () for one matrix
    entry_dtype: str  # names the entries: a's dtype, or "<a>x<b>" for mixed fp8


def _broadcast(op: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, ...]:
    """torch.matmul's batch shape: a's and b's leading dims broadcast together."""
    rank = max(len(sa), len(sb))
    pa, pb = (1,) * (rank - len(sa)) + sa, (1,) * (rank - len(sb)) + sb
    shape = []
    for x, y in zip(pa, pb, strict=True):
        if x != y and 1 not in (x, y):
            raise ValueError(
                f"{op}: the batch dims of a {sa} and b {sb} must broadcast (equal or 1), got "
                f"{x} against {y}"
            )
        shape.append(y if x == 1 else x)
    return tuple(shape)


def _matrix(info: Meta) -> Meta:
    """The last two dims of a batched operand: one matrix."""
    return info._replace(shape=tuple(info.shape[-2:]), strides=tuple(info.strides[-2:]))


def _problem(a: Args) -> _Problem:
    """Every check that needs no output and no device, in the order users meet them."""
    op = a.op
    am, bm = a.need("a"), a.need("b")
    # The op's dtypes in the matrix, less its mixed-operand pairs ("<a>x<b>", checked below).
    check_dtype(op, "a", am, [d for d in _loader.dtypes(FAMILY, op) if len(split_dtype(d)) == 1])
    mixed = op == "scaled_mm" and am.dtype != bm.dtype and {am.dtype, bm.dtype} == set(FP8)
    if bm.dtype != am.dtype and not mixed:
        other = " or the other fp8 type" if am.dtype in FP8 else ""
        raise TypeError(
            f"{op}: b.dtype must equal a.dtype ({dtype_name(am.dtype)}){other}, got "
            f"{dtype_name(bm.dtype)}"
        )
    batch: tuple[int, ...] = ()
    if op == "matmul":
        # Batched: leading dims broadcast as torch.matmul's do; each matrix is [M, K] / [K, N].
        for arg, arr, want in (("a", am, "[..., M, K]"), ("b", bm, "[..., K, N]")):
            if len(arr.shape) < 2:
                raise ValueError(
                    f"{op}: {arg} must be at least 2-D {want}, got shape {tuple(arr.shape)}"
                )
        batch = _broadcast(op, tuple(am.shape[:-2]), tuple(bm.shape[:-2]))
        am, bm = _matrix(am), _matrix(bm)
    la = _matrix_layout(op, "a", am, "m")
    lb = _matrix_layout(op, "b", bm, "n")
    (m, k), (k2, n) = am.shape, bm.shape
    if k2 != k:
        b_shape = tuple(a.need("b").shape)
        if len(a.need("a").shape) > 2 or len(b_shape) > 2:
            where = "b.shape[-2] must equal a.shape[-1]"
        else:
            where = "b.shape[0] must equal a.shape[1]"
        raise ValueError(f"{op}: {where} ({k}), got b.shape {b_shape}")
    out_dtype = a.attr("out_dtype")
    if op == "matmul":
        odt = am.dtype if out_dtype is None else out_dtype
        outs: tuple[str, ...] = ("f16", "bf16", "f32")
        sc = _scales(a, am.dtype, m, n, k)  # matmul takes none: scale_none
    else:
        if out_dtype is None:
            raise TypeError(f"{op}: out_dtype is required (e.g. 'bfloat16', or 'int32' for int8)")
        odt = out_dtype
        sc = _scales(a, am.dtype, m, n, k)
        if am.dtype == "int8":
            outs = ("int32",) if sc.a is None else ("f16", "bf16", "f32")
        else:
            outs = ("f16", "bf16", "f32")
    if odt not in outs:
        what = " without scales" if am.dtype == "int8" and sc.a is None else ""
        hint = ""
        if odt == "int32" and op == "scaled_mm" and am.dtype == "int8":
            hint = " (int8 with scales gives f16/bf16/f32)"
        raise TypeError(
            f"{op}: out_dtype for {dtype_name(am.dtype)} operands{what} must be one of "
            f"{', '.join(dtype_name(o) for o in outs)}, got {dtype_name(odt)}{hint}"
        )
    bias = a["bias"] if "bias" in a.names else None
    if bias is not None:
        if odt == "int32":
            raise TypeError(f"{op}: bias is not supported with an int32 output")
        check_dtype(op, "bias", bias, (odt,))
        check_vector(op, "bias", bias, n)
    entry = f"{am.dtype}x{bm.dtype}" if mixed else am.dtype
    return _Problem(la, lb, m, n, k, odt, sc, bias, batch, entry)


def _problem_split(p: _Problem) -> _Split:
    """The split-K of a validated call (``_split_k``; the tile table's swapped tiles take none)."""
    block = p.scales.mode_a == _loader.constants(FAMILY)["scale_mode"]["scale_block"]
    swapped = _swaps(p.m, math.prod(p.batch), block, p.la.major == "k")
    return _split_k(p.entry_dtype, p.m, p.n, p.k, p.batch, swapped)


def _shapes(a: Args) -> tuple[OutSpec, ...]:
    p = _problem(a)
    split = _problem_split(p)
    return (OutSpec((*p.batch, p.m, p.n), p.out_dtype), OutSpec(split.ws_shape(p.m, p.n), "f32"))


class _Batch(NamedTuple):
    """``n`` matrices, the k-th of a / b / out ``k`` times a / b / d elements on (0: the same
    matrix for all, a broadcast)."""

    n: int
    a: int
    b: int
    d: int


def _lead_strides(info: Meta, rank: int) -> list[int]:
    """Strides of ``info``'s batch dims right-aligned to ``rank`` dims (0 where broadcast)."""
    lead = len(info.shape) - 2
    out = [0] * (rank - lead)
    out += [st if n != 1 else 0 for n, st in zip(info.shape[:-2], info.strides[:-2], strict=True)]
    return out


def _batch(op: str, am: Meta, bm: Meta, om: Meta, shape: tuple[int, ...]) -> _Batch:
    """The batch dims as one (count, stride of a, b, out): dims merge where all three step
    through them uniformly; ``NotImplementedError`` when they do not collapse."""
    rank = len(shape)
    cols = zip(shape, _lead_strides(am, rank), _lead_strides(bm, rank), om.strides[:-2],
               strict=True)  # fmt: skip
    dims: list[tuple[int, int, int, int]] = []
    for size, sa, sb, sd in cols:
        if size == 1:
            continue
        if dims and dims[-1][1:] == (sa * size, sb * size, sd * size):
            dims[-1] = (dims[-1][0] * size, sa, sb, sd)
            continue
        dims.append((size, sa, sb, sd))
    if not dims:
        return _Batch(1, 0, 0, 0)
    if len(dims) > 1:
        raise NotImplementedError(
            f"{op}: the batch dims of a {tuple(am.shape)}, b {tuple(bm.shape)} and out "
            f"{tuple(om.shape)} must collapse into one stride each (a, b and out stepping "
            "uniformly, or broadcast), got batch dims that do not; pass contiguous operands or "
            "reshape the batch"
        )
    return _Batch(*dims[0])


def _tma_fold(lay: _Operand, bs: int, batch: int, extent: int, k: int, bk: int) -> int | None:
    """Rows a batched operand adds to its TMA map's outer dimension, or None when its batch
    cannot fold into one 2-D map: the batch stride must be whole rows, and an M/N-major
    operand (whose outer dimension is K) must have no partial last K stage, which would read
    the next matrix's rows instead of zeros."""
    if bs == 0 or batch == 1:
        return 0
    if bs < 0 or bs % lay.ld:
        return None
    rows = bs // lay.ld
    if lay.major != "k" and k % bk:
        return None
    if (batch - 1) * rows + extent >= 2**31:  # TMA coordinates are 32-bit
        return None
    return (batch - 1) * rows


def _launch(a: Args) -> list[Launch]:
    op = a.op
    p = _problem(a)
    m, n, k = p.m, p.n, p.k
    oi = a.out("out")
    if m and n and not (oi.strides[-1] == 1 or n == 1):
        raise ValueError(
            f"{op}: out must be row-major (unit stride along N), got strides {tuple(oi.strides)}"
        )
    ldd = oi.strides[-2] if m > 1 else n
    if m == 0 or n == 0 or math.prod(p.batch) == 0:
        return []
    am, bm = a.need("a"), a.need("b")
    bt = _batch(op, am, bm, oi, p.batch) if p.batch else _Batch(1, 0, 0, 0)
    am, bm = _matrix(am), _matrix(bm)
    la, lb, sc = p.la, p.lb, p.scales
    fold_m = bt.n > 1 and bt.b == 0 and la.major == "k" and bt.a == m * la.ld
    if fold_m and bt.d == m * ldd:
        # [batch, M, K] rows back to back times one b: a single GEMM of batch * M rows.
        m, bt = m * bt.n, _Batch(1, 0, 0, 0)
    fam = a.family()
    layout = ("k" if la.major == "k" else "m") + ("k" if lb.major == "k" else "n")
    # TMA box coordinates are signed 32-bit: extents of 2**31 or more run the mma.sync path,
    # whose indexing is 64-bit.
    tma_ok = (
        max(m, n, k) < 2**31
        and _tma_legal(am, la, k if la.major == "k" else m)
        and _tma_legal(bm, lb, k if lb.major == "k" else n)
    )
    folds: tuple[int | None, int | None] = (0, 0)
    if tma_ok and bt.n > 1:
        bk = min(int(v["k_bytes"]) for v in fam.variants.values() if v["path"] != "mma_sync")
        bk //= ITEMSIZE[am.dtype]
        folds = (
            _tma_fold(la, bt.a, bt.n, m if la.major == "k" else k, k, bk),
            _tma_fold(lb, bt.b, bt.n, n if lb.major == "k" else k, k, bk),
        )
        tma_ok = folds[0] is not None and folds[1] is not None
    c = _loader.constants(FAMILY)
    block = sc.mode_a == c["scale_mode"]["scale_block"]
    fast = op == "scaled_mm" and bool(a.attr("use_fast_accum"))
    fp8 = am.dtype in FP8 and not block
    pick = _pick(
        op, p.entry_dtype, m, n, k, layout, tma_ok, fam, bt.n, block, fp8 and not fast, fp8 and fast
    )
    v = fam.variants[pick.variant]
    bit = c["flags"]
    flags = (bit["a_m_major"] if la.major == "m" else 0) | (
        bit["b_k_major"] if lb.major == "k" else 0
    )
    flags |= bit["bias"] if p.bias is not None else 0
    bm_tile, bn_tile = int(v["bm"]), int(v["bn"])
    if pick.path == "mma_sync":
        # One block per tile along grid.x (any number of tile rows), one matrix per grid.z.
        grid = (math.ceil(m / bm_tile) * math.ceil(n / bn_tile), 1, bt.n)
        if bt.n > _MAX_GRID_YZ:
            raise NotImplementedError(
                f"{op}: a batch of at most {_MAX_GRID_YZ} matrices runs on the {pick.path} path "
                f"(one per grid.z), got {bt.n}; split the batch"
            )
    split = _problem_split(p)
    swapped = bool(v.get("swap_ab", 0))
    if pick.path != "wgmma" or swapped or int(v.get("ksplit", 1)) > 1:
        # The workspace goes unused: other paths do not split, and a tile the table (or a test)
        # takes swapped or K-split inside its cluster ignores the workspace split.
        split = _Split(1, 0)
    cluster = int(v.get("cluster", 1))
    if pick.path != "mma_sync":
        # Persistent: a whole number of clusters. A multicast cluster stacks its tiles along M
        # (tile rows rounded up to whole cluster tiles); a K-split one runs all its CTAs on a tile.
        tiles = _tiles(bt.n, m, n, bm_tile * _multicast(v), bn_tile) * cluster
        grid = (min(tiles * split.splits, fam.device.sm_count // cluster * cluster), 1, 1)
    # The wgmma epilogue stores 16-bit outputs through TMA where d is one TMA-legal matrix (not
    # with split-K: the splits' partials are f32).
    tma_store = (
        pick.path == "wgmma"
        and not swapped  # its epilogue writes d transposed from shared memory
        and p.out_dtype in ("f16", "bf16")
        and bt.n == 1
        and split.splits == 1
        and oi.align == 16
        and (ldd * 2) % 16 == 0
        and n <= ldd
    )
    flags |= bit["tma_store"] if tma_store else 0
    if fast:
        flags |= bit["fast_accum"]
    args = {
        "d": "out", "a": "a", "b": "b", "ws": "ws" if split.splits > 1 else None,
        "scale_a": "scale_a" if sc.a is not None else None,
        "scale_b": "scale_b" if sc.b is not None else None,
        "bias": "bias" if p.bias is not None else None,
        "m": m, "n": n, "k": k, "lda": la.ld, "ldb": lb.ld, "ldd": ldd,
        "sa_s0": sc.sa[0], "sa_s1": sc.sa[1], "sb_s0": sc.sb[0], "sb_s1": sc.sb[1],
        "batch": bt.n, "a_bs": bt.a, "b_bs": bt.b, "d_bs": bt.d,
        "splits": split.splits, "k_split": split.k_split,
        "flags": flags, "out_dtype": c["out_dtype"][_OUT_CODES[p.out_dtype]],
        "scale_mode_a": sc.mode_a, "scale_mode_b": sc.mode_b,
    }  # fmt: skip
    maps = _tensor_maps(pick, fam, am, la, bm, lb, m, n, k, (folds[0] or 0, folds[1] or 0))
    if tma_store:
        tma_type = DTYPES[p.out_dtype].tma
        d_map = tensor_map_2d("tmap_d", "d", tma_type, n, m, ldd * 2, _OUT_BOX, _OUT_BOX)
        maps = (*maps, d_map)
    threads = int(v["threads"])
    launches = [Launch(pick.symbol, grid, (threads,), args, int(v["smem"]), maps)]
    if split.splits > 1:
        # The same entry sums the partials in split order and runs the epilogue.
        groups = m * math.ceil(n / 4)  # a thread sums 4 columns at a time
        blocks = min(math.ceil(groups / threads), fam.device.sm_count)
        blocks = -(-blocks // cluster) * cluster  # the entry's compiled-in cluster size
        reduce = {**args, "flags": flags | bit["split_reduce"]}
        # The main launch's shared memory: a launch asking less would make the SMs re-split their
        # L1 / shared memory between the two kernels (on every call).
        launches.append(Launch(pick.symbol, (blocks, 1, 1), (threads,), reduce, int(v["smem"])))
    return launches


def _env_key() -> tuple[str | None, str | None]:
    # The path switches change which kernel a call picks: part of the fast path's key.
    return os.environ.get("AOTKERNELS_GEMM_PATH"), os.environ.get("AOTKERNELS_GEMM_TCGEN05")


def _matmul_backward(ctx: BackwardCtx, grads: tuple[Any, ...]) -> dict[str, Any]:
    """dA = dC @ B^T and dB = A^T @ dC, through matmul itself: any layout is free, so the
    transposes are views. dC is taken in a's dtype (the operands' tensor-core type)."""
    a, b = ctx.saved["a"], ctx.saved["b"]
    (g,) = grads
    res = {}
    if ctx.needs.get("bias"):
        # The bias gradient: dC summed over every row of every matrix, in the bias dtype.
        res["bias"] = g.reshape(-1, g.shape[-1]).float().sum(0).to(g.dtype)
    if g.dtype != a.dtype:
        g = g.to(a.dtype)
    # Batched: a broadcast operand's gradient sums over the dims it was broadcast along.
    if ctx.needs["a"]:
        res["a"] = matmul(g, b.mT).sum_to_size(a.shape)
    if ctx.needs["b"]:
        res["b"] = matmul(a.mT, g).sum_to_size(b.shape)
    return res


MATMUL = Op(
    name="matmul",
    family=FAMILY,
    inputs=(Tensor("a"), Tensor("b"), Tensor("bias", optional=True)),
    attrs=(Attr("out_dtype", "dtype?", None),),
    outputs=(Output("out"), Output("ws", hidden=True)),
    shapes=_shapes,
    launch=_launch,
    backward=Backward(("a", "b"), _matmul_backward),
    cache_key=_env_key,
)

SCALED_MM = Op(
    name="scaled_mm",
    family=FAMILY,
    inputs=(
        Tensor("a"),
        Tensor("b"),
        Tensor("scale_a", optional=True),
        Tensor("scale_b", optional=True),
        Tensor("bias", optional=True),
    ),
    attrs=(Attr("out_dtype", "dtype?", None), Attr("use_fast_accum", "bool", False)),
    outputs=(Output("out"), Output("ws", hidden=True)),
    shapes=_shapes,
    launch=_launch,
    cache_key=_env_key,
)


def matmul(
    a: Any,
    b: Any,
    out_dtype: Any = None,
    *,
    bias: Any = None,
    out: Any = None,
    stream: Any = None,
) -> Any:
    """``a @ b (+ bias)`` on tensor cores: f16 / bf16 operands, f32 accumulation.

    Parameters
    ----------
    a : CUDA array [..., M, K], float16 or bfloat16; each matrix row- or column-major
        (strides tell)
    b : CUDA array [..., K, N], the same dtype, each matrix row- or column-major
        The leading (batch) dims broadcast against a's as in ``torch.matmul`` (stride 0 for
        broadcast dims included); the result is [*batch, M, N]. The batch dims of a, b and
        out must collapse into one stride each (contiguous, broadcast and expanded batches do;
        others raise ``NotImplementedError``).
    out_dtype : dtype, optional
        float16, bfloat16 or float32 (string, NumPy/ml_dtypes, torch or JAX dtype); default
        a's dtype. Results are rounded once, from the f32 accumulator.
    bias : CUDA array (N,) of the output dtype, contiguous, optional
        Added to every row (of every matrix) in f32 before the rounding, as ``F.linear``.
    out : CUDA array [*batch, M, N], optional
        Each matrix row-major (unit stride along N; any row and batch strides); must not
        overlap a, b or bias.
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Any M, N, K (K = 0 gives zeros, plus bias). Operands that are not 16-byte aligned or whose
    row stride is not a multiple of 16 bytes run the slower mma.sync path on Hopper, as do
    batched M/N-major operands whose K is not a multiple of 64.
    """
    return MATMUL(a, b, bias, out_dtype=out_dtype, out=out, stream=stream)


def scaled_mm(
    a: Any,
    b: Any,
    scale_a: Any = None,
    scale_b: Any = None,
    out_dtype: Any = None,
    bias: Any = None,
    use_fast_accum: bool = False,
    *,
    out: Any = None,
    stream: Any = None,
) -> Any:
    """``(a @ b) * scales (+ bias)`` for fp8 (e4m3, e5m2) and int8 operands.

    Parameters
    ----------
    a : CUDA array [M, K]; b : CUDA array [K, N] — the same dtype, float8_e4m3fn,
        float8_e5m2 or int8, or one e4m3 and one e5m2 (fp8 training's gradient x weight
        products; sm_89+). Hopper's fast path wants a row-major and b column-major (both
        K-major, as ``torch._scaled_mm``); other layouts run the mma.sync path.
    scale_a, scale_b : float32 CUDA arrays, or both None (no scaling)
        Per tensor: one element each. Per row / column: scale_a (M,) or (M, 1), scale_b (N,)
        or (1, N). fp8 block scales (DeepSeek-V3): scale_a (M, ceil(K/128)) for 1x128 blocks
        and scale_b (ceil(N/128), ceil(K/128)) for 128x128 blocks, any strides.
    out_dtype : dtype, required
        float16, bfloat16 or float32; int8 without scales gives int32 (exact).
    bias : CUDA array (N,) of out_dtype, optional; added after scaling.
    use_fast_accum : bool, default False
        As ``torch._scaled_mm``'s. Hopper's fp8 wgmma adds its products into the accumulator with
        reduced precision. False (two-level accumulation): each 128-wide block of K is summed in
        fresh registers and added into f32 accumulators, so a long K keeps its error at
        f32-accumulation level. True: the wgmmas accumulate directly (faster; over a long K the
        error grows). Block scales always add per block (each block has its own scales): the
        option has no effect there, nor on int8 (exact int32 sums), nor on the mma.sync path
        (pre-Hopper GPUs, sm_120a, layouts TMA cannot take), whose mma instructions add into
        the f32 accumulators each step (on an H100 at f32 precision; not measured on sm_89 /
        sm_120), nor on tcgen05 (f32 accumulation in tensor memory; never run on Blackwell).
    out, stream : as for :func:`matmul`.
    """
    return SCALED_MM(
        a, b, scale_a, scale_b, bias, out_dtype=out_dtype, use_fast_accum=use_fast_accum,
        out=out, stream=stream,
    )  # fmt: skip
