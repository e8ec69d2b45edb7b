#!/usr/bin/env bash
# Device side: hot/cool tile probe (hot.py) on the probe build; int8 8192^3 clock trace; forced-JIT test.
set -u
export PYTHONUNBUFFERED=1
R=$PWD
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,memory.total --format=csv | tee $OUT/gpu.txt
cp -r .xchg/probe/xsite /tmp/psite
cd /tmp
export PYTHONPATH=/tmp/psite
H=$R/.xchg/probe/hot.py
NK="4096x4096 4096x14336 14336x4096 8192x8192"
A=""
for nk in $NK; do A="$A,bf16:16x$nk,bf16:16x$nk:kn,fp8:16x$nk"; done
A="$A,fp8fast:16x4096x4096,fp8fast:16x4096x14336"
for nk in $NK; do A="$A,int8:32x$nk=wg_32x64t+wg_32x64tk2+wg_32x128t"; done
M128C="wg_64x64+wg_64x128+wg_64x128c2+wg_128x64+wg_128x64k2+wg_128x128"
for nk in $NK; do A="$A,bf16:128x$nk=$M128C,bf16:128x$nk:kn=$M128C,fp8:128x$nk=$M128C,int8:128x$nk=$M128C"; done
for s in 1024 2048; do A="$A,bf16:${s}x${s}x${s}=$M128C,bf16:${s}x${s}x${s}:kn=$M128C,fp8:${s}x${s}x${s}=$M128C,int8:${s}x${s}x${s}=$M128C"; done
A=${A#,}
timeout 200 python3 $H --rows "$A" --cands wg_16x64t+wg_16x64tk2+wg_16x128t --heat 0.4 --json $OUT/hotA.json 2>&1 | tee $OUT/hotA.txt
C=""
for nk in 4096x4096 4096x14336; do C="$C,bf16:16x$nk,bf16:16x$nk:kn,fp8:16x$nk,bf16:128x$nk=$M128C,fp8:128x$nk=$M128C"; done
C=${C#,}
timeout 60 python3 $H --rows "$C" --cands wg_16x64t+wg_16x64tk2+wg_16x128t --heat 0 --idle 1.0 --rounds 3 --json $OUT/coolC.json 2>&1 | tee $OUT/coolC.txt
L="wg_128x64+wg_128x128+wg_128x256+wg_128x256c2"
B=""
for nk in $NK; do B="$B,bf16:1024x$nk=$L,bf16:1024x$nk:kn=$L,fp8:1024x$nk=$L,int8:1024x$nk=$L"; done
W="wg_128x128+wg_128x256+wg_128x256c2"
for s in 4096 8192; do for d in bf16 bf16@kn fp8 fp8rowcol fp8block int8; do B="$B,${d%@kn}:${s}x${s}x${s}$([ $d = bf16@kn ] && echo :kn)=$W"; done; done
for nk in $NK; do B="$B,bf16:8192x$nk=$W,fp8:8192x$nk=$W,int8:8192x$nk=$W"; done
B=${B#,}
timeout 190 python3 $H --rows "$B" --heat 0.4 --rounds 3 --budget 170 --json $OUT/hotB.json 2>&1 | tee $OUT/hotB.txt
# int8 8192^3: the SM clock and power while it runs back to back (is 80 % of the dense peak reachable?)
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 100 > $OUT/int8_clock.csv &
SMI=$!
timeout 30 python3 - <<'PY' 2>&1 | tee $OUT/int8_trace.txt
import time, torch, aotkernels as ak
a = torch.randint(-128, 128, (8192, 8192), device="cuda", dtype=torch.int8)
b = torch.randint(-128, 128, (8192, 8192), device="cuda", dtype=torch.int8).t()
for name, f in (("ours", lambda: ak.scaled_mm(a, b, out_dtype=torch.int32)), ("int_mm", lambda: torch._int_mm(a, b))):
    f(); torch.cuda.synchronize()
    for sec in range(3):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); n = 0; t = time.time()
        while time.time() - t < 1.0:
            for _ in range(20): f()
            n += 20
            torch.cuda.synchronize()
        e1.record(); torch.cuda.synchronize()
        ms = e0.elapsed_time(e1) / n
        print(f"{time.strftime('%H:%M:%S')} {name} second {sec}: {2*8192**3/ms/1e9:.0f} TOP/s ({ms:.3f} ms/call)", flush=True)
    time.sleep(2)
PY
kill $SMI
cd $R && PYTHONPATH=$R/.xchg/base/site timeout 60 python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu tests/test_runtime.py -k force_ptx 2>&1 | tail -5 | tee $OUT/force_ptx.txt
