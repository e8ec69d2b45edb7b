set -u
# .xchg/t/drive.py: ../../../h200-2026-11-28-smallm10/drive.py, unchanged.
python3 -m pip install --no-deps --no-index -q --find-links .deps/wheels zstandard 2>&1 | grep -v "Running pip as"
X=$PWD/.xchg; cd /tmp; export PYTHONPATH=$X/full
timeout 100 python3 $X/probe2.py $X/t 2>&1 | tee $OUT/probe2.txt
