"""One call of each (row, candidate) and of the anchor, for ncu (run under ncu with a kernel
filter). Rows "<dtype>:MxNxK[:kn]=cand+cand"."""

from __future__ import annotations

import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import drive

for spec in sys.argv[1].split(","):
    row, _, cl = spec.partition("=")
    dt, _, rest = row.partition(":")
    shape, _, layout = rest.partition(":")
    m, n, k = (int(x) for x in shape.split("x"))
    case = drive.cases(dt, m, n, k, layout or "kk")
    for c in ["table", *cl.split("+")] if cl else ["table"]:
        drive.force(c)
        case.ours(0)
    case.anchor(0)
    torch.cuda.synchronize()
    print("probed", spec, flush=True)
