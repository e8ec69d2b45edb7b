"""Attention forward of the imported install beside SDPA cuDNN, one process (bench shapes:
16384 tokens, H = 2048 / D, bf16); rows "D:N:c|f". Prints TFLOP/s and ours / cuDNN."""

import json
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import aotkernels as ak
from aotkernels.bench.timing import median_ms

F = torch.nn.functional


def run_row(spec: str) -> dict[str, object]:
    """One row: ours and cuDNN alternating over 4 rounds, the median TFLOP/s of each."""
    ds, ns, c = spec.split(":")
    d, n, causal = int(ds), int(ns), c == "c"
    b, h = max(1, 16384 // n), 2048 // d
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flops = 4 * b * h * n * n * d / (2 if causal else 1)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def ours(i: int) -> torch.Tensor:
        return ak.attention(q, k, v, causal=causal)

    def cudnn(i: int) -> torch.Tensor:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

    ours(0)
    cudnn(0)
    t: dict[str, list[float]] = {"ours": [], "cudnn": []}
    for r in range(4):
        for name, fn in (("ours", ours), ("cudnn", cudnn))[:: 1 if r % 2 == 0 else -1]:
            t[name].append(flops / median_ms(fn, 20, rounds=1) / 1e9)
    med = {key: sorted(val)[len(val) // 2] for key, val in t.items()}
    ratio = med["ours"] / med["cudnn"]
    line = f"{spec:10s} ours {med['ours']:6.1f} cuDNN {med['cudnn']:6.1f} ratio {ratio:.3f}"
    print(line, flush=True)
    return {"row": spec, "ours": med["ours"], "cudnn": med["cudnn"], "ratio": ratio}


def main() -> None:
    out = []
    for spec in sys.argv[2].split(","):
        out.append(run_row(spec))
        torch.cuda.empty_cache()
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
