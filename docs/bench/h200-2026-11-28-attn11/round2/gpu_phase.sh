# The gpu phase of this round's run.sh: round1/run.sh with this body in place of its own (the same
# embedded sweep.py / prof.py / top.py).
  TREE=$PWD
  timeout 24 python3 -m pytest -q -m gpu tests/test_attention.py -p no:cacheprovider \
    -k "not sanitizer" > "$RES/pytest.txt" 2>&1; echo "pytest rc $? t=$(el)"
  tail -2 "$RES/pytest.txt"
  cd /tmp
  PYTHONPATH="$SITE" timeout 22 python3 $W/sweep.py "$RES/sweep.json" 3 \
    64:fc:512,1024,2048,4096:fa3_d64_defer_r,fa3_d64_defer,fa3_d64_m192 \
    64:c:8192,16384:fa3_d64_defer,fa3_d64_m192 \
    128:fc:512,1024,2048,4096:fa3_d128_defer_r,fa3_d128_defer,fa3_d128 \
    256:fc:512,1024,2048:fa3_d256,fa3_d256_defer \
    > "$RES/sweep.txt" 2>&1; echo "sweep rc $? t=$(el)"
  tail -1 "$RES/sweep.txt"
  cd "$TREE"
  lim=$(( 52 - $(el) )); [ $lim -gt 40 ] && lim=40
  timeout $lim python3 -m pytest -v -m gpu tests/test_attention.py -p no:cacheprovider \
    -k "sanitizer and auto and racecheck" > "$RES/racecheck.txt" 2>&1; echo "racecheck rc $? t=$(el)"
  grep -E "PASS|FAIL|passed|failed" "$RES/racecheck.txt" | tail -2
  lim=$(( 88 - $(el) ))
  timeout $lim python3 -m pytest -v -m gpu tests/test_attention.py -p no:cacheprovider \
    -k "sanitizer and auto and memcheck" > "$RES/memcheck.txt" 2>&1; echo "memcheck rc $? t=$(el)"
  grep -E "PASS|FAIL|passed|failed" "$RES/memcheck.txt" | tail -2
