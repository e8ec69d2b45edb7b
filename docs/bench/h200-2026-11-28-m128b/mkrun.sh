#!/bin/bash
# Writes the exchange script run.sh, run in a folder holding drive.py, probe.py and absum.py (those
# of docs/bench/h200-2026-11-28-smallm10, unchanged) and body.sh (a round's gpu_phase.sh here).
{
cat <<'HEAD'
#!/bin/bash
# m128 exchange script: phase build | gpu
phase="$1"
if [ "$phase" = build ]; then
  cp -r xsite "$SITE"
  exit 0
fi
T=/tmp/m128_tools
mkdir -p "$T"
HEAD
echo "cat > \$T/drive.py <<'PYEOF'"; cat drive.py; echo "PYEOF"
echo "cat > \$T/probe.py <<'PYEOF'"; cat probe.py; echo "PYEOF"
echo "cat > \$T/absum.py <<'PYEOF'"; cat absum.py; echo "PYEOF"
cat body.sh
} > run.sh
chmod +x run.sh
