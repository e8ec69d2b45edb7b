"""Warp-stall samples of one ncu source-page export (ncu --page source --print-source sass --csv).

Usage: python3 stall_summary.py <kernel>_sass.csv.gz [N]: the stall reasons' shares, the warp
instructions executed, and the N instructions with the most samples.
"""

from __future__ import annotations

import csv
import gzip
import sys


def main() -> None:
    with gzip.open(sys.argv[1], "rt") as f:
        rows = list(csv.reader(f))
    hdr, data = rows[1], rows[2:]
    i_samples = hdr.index("Warp Stall Sampling (All Samples)")
    i_exec = hdr.index("Instructions Executed")
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(int(r[i_samples] or 0) for r in data)
    executed = sum(int(r[i_exec] or 0) for r in data)
    print(f"samples {total}, warp instructions executed {executed}")
    share = {h: sum(int(r[hdr.index(h)] or 0) for r in data) / total for h in reasons}
    print(" ".join(f"{h[6:]}={v:.1%}" for h, v in sorted(share.items(), key=lambda x: -x[1])[:9]))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    for i in sorted(sorted(range(len(data)), key=lambda i: -int(data[i][i_samples] or 0))[:top]):
        r = data[i]
        print(f"{i:6d} {int(r[i_samples]) / total:6.1%} x{r[i_exec]:>7s}  {r[1].strip()[:70]}")


if __name__ == "__main__":
    main()
