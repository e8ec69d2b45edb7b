#!/usr/bin/env python3
"""What the front ends record, printed for a reader (GPU machine with torch and jax).

1. ``torch._dynamo.explain`` of a Llama-style block written with aotkernels ops
   (rms_norm -> matmul -> silu_and_mul -> matmul -> fused_add_rms_norm, then softmax), static and
   dynamic shapes: graph count, graph breaks and the ops in the graph.
2. The StableHLO of ``jax.jit`` over aotkernels ops: the lines holding our custom call.

A measuring tool, not a test (tests/test_torch_frontend.py and tests/test_jax.py assert).
"""

from __future__ import annotations

import os

import torch

import aotkernels as ak


def block(x: torch.Tensor, r: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
    h = ak.rms_norm(x, w["n1"], 1e-6)
    a = ak.silu_and_mul(ak.matmul(h, w["up"].t()))
    y = ak.matmul(a, w["down"].t())
    y, r = ak.fused_add_rms_norm(y, r, w["n2"], 1e-6)
    return ak.softmax(y, dim=-1)


def torch_part() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)

    def p(*shape: int) -> torch.Tensor:
        t = torch.randn(*shape, device="cuda", generator=g) / shape[-1] ** 0.5
        return t.to(torch.bfloat16)

    w = {"n1": p(256), "n2": p(256), "up": p(1024, 256), "down": p(256, 512)}
    torch._dynamo.reset()
    ex = torch._dynamo.explain(block)(p(16, 256), p(16, 256), w)
    print(f"dynamic=False explain: {ex.graph_count} graph, {ex.graph_break_count} graph breaks")
    for gm in ex.graphs:
        ops = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        print("  graph ops:", ", ".join(ops))
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(block, fullgraph=True, dynamic=True)
    for tokens in (8, 24, 40):
        compiled(p(tokens, 256), p(tokens, 256), w)
    print(f"dynamic=True fullgraph compile: graph breaks {dict(counters['graph_break'])}")


def jax_part() -> None:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp

    def f(h: jax.Array, w: jax.Array) -> jax.Array:
        return ak.silu(ak.rms_norm(h, w))

    h = jnp.ones((8, 256), jnp.bfloat16)
    w = jnp.ones((256,), jnp.bfloat16)
    text = jax.jit(f).lower(h, w).as_text()
    lines = [ln.strip() for ln in text.splitlines() if "custom_call" in ln]
    print(f"jax.jit HLO: {len(lines)} custom calls")
    for ln in lines:
        print("  " + ln[:220])


if __name__ == "__main__":
    torch_part()
    jax_part()
