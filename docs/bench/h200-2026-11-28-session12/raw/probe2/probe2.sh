#!/usr/bin/env bash
# Device side, call 2: GPU tests of the K-split change on its build; the new table against the old
# picks (forced), hot and cool; int8 8192^3 clock trace.
set -u
export PYTHONUNBUFFERED=1
R=$PWD
W=/tmp/p2; mkdir -p $W
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee $W/gpu.txt
cp -r .xchg/probe/xsite /tmp/psite
pack() { tar -czf $OUT/p2.tgz -C /tmp p2; }
s=$SECONDS
PYTHONPATH=/tmp/psite timeout 170 python3 -m pytest -q -p no:cacheprovider -rfEs -m gpu tests/test_gemm_splitk.py tests/test_gemm_swapped.py tests/test_gemm_numerics.py -k "cluster_split or ksplit or split_ or every_wgmma_tile or two_level or sanitizer or table" > $W/tests.txt 2>&1
echo "tests: $((SECONDS - s)) s" >> $W/tests.txt; tail -6 $W/tests.txt; pack
cd /tmp
export PYTHONPATH=/tmp/psite
H=$R/.xchg/probe/hot.py
ROWS="bf16:16x4096x14336=wg_16x64t,bf16:16x4096x14336:kn=wg_16x64t,fp8:16x4096x14336=wg_16x64t,fp8fast:16x4096x14336=wg_16x64t,int8:32x4096x14336=wg_32x64t,bf16:16x4096x8192=wg_16x64t,bf16:16x4096x4096=wg_16x64tk2"
ROWS="$ROWS,bf16:128x4096x4096=wg_64x64,bf16:128x4096x4096:kn=wg_64x64,bf16:128x4096x14336=wg_64x64,bf16:128x4096x14336:kn=wg_64x64,fp8:128x4096x14336=wg_64x64,int8:128x4096x14336=wg_64x64,fp8:128x4096x8192=wg_64x64,fp8:128x4096x4096=wg_128x64k2"
ROWS="$ROWS,bf16:128x2048x4096=wg_64x64,bf16:128x1024x4096=wg_64x64,bf16:96x4096x4096=wg_64x64,bf16:128x2048x14336=wg_64x64,bf16:80x4096x14336=wg_64x64"
timeout 110 python3 $H --rows "$ROWS" --heat 0.4 --json $W/hot.json > $W/hot.txt 2>&1; cat $W/hot.txt; pack
timeout 90 python3 $H --rows "$ROWS" --heat 0 --idle 1.0 --rounds 3 --json $W/cool.json > $W/cool.txt 2>&1; cat $W/cool.txt; pack
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 100 > $W/int8_clock.csv &
SMI=$!
timeout 30 python3 - <<'PY' > $W/int8_trace.txt 2>&1
import time, torch, aotkernels as ak
a = torch.randint(-128, 128, (8192, 8192), device="cuda", dtype=torch.int8)
b = torch.randint(-128, 128, (8192, 8192), device="cuda", dtype=torch.int8).t()
for name, f in (("ours", lambda: ak.scaled_mm(a, b, out_dtype=torch.int32)), ("int_mm", lambda: torch._int_mm(a, b))):
    time.sleep(3)
    f(); torch.cuda.synchronize()
    for sec in range(3):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); n = 0; t = time.time()
        while time.time() - t < 1.0:
            for _ in range(10): f()
            n += 10
            torch.cuda.synchronize()
        e1.record(); torch.cuda.synchronize()
        ms = e0.elapsed_time(e1) / n
        print(f"{time.strftime('%H:%M:%S')} {name} second {sec}: {2*8192**3/ms/1e9:.0f} TOP/s ({ms:.3f} ms/call)", flush=True)
PY
kill $SMI; cat $W/int8_trace.txt; pack
