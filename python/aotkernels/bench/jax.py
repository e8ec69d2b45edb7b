"""``bench jax``: the host cost of one call under jax.jit, ak.silu / ak.rms_norm (one XLA FFI
custom call each) beside the jnp formula under jit; eager JAX calls through the FFI path beside
jnp eager and the DLPack path (launch, then a host synchronisation) that builds without the XLA
extension take."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from .common import Row
from .timing import host_us

TITLE = "host cost per call under JAX (µs)"


def run(args: argparse.Namespace) -> list[Row]:
    # JAX would take 75% of the GPU's memory on first use, starving the suites after this one.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
        import jax.numpy as jnp

        gpu = jax.devices("cuda")[0]
    except (ImportError, RuntimeError) as e:
        return [{"path": "jax", "us_per_call": None, "note": f"unavailable: {e}"}]
    import aotkernels as ak

    from .. import _jax

    n, hidden = 1024, 4096
    key = jax.random.key(0)
    x = jax.device_put(jax.random.normal(key, (n,), jnp.bfloat16), gpu)
    h = jax.device_put(jax.random.normal(key, (1, hidden), jnp.bfloat16), gpu)
    w = jax.device_put(jnp.ones((hidden,), jnp.bfloat16), gpu)

    def rms_jnp(h: Any, w: Any) -> Any:
        hf = h.astype(jnp.float32)
        r = jax.lax.rsqrt(jnp.mean(hf * hf, axis=-1, keepdims=True) + 1e-6)
        return (hf * r * w.astype(jnp.float32)).astype(h.dtype)

    wait: Any = jax.block_until_ready  # untyped in jax
    rows: list[Row] = []

    def add(name: str, fn: Callable[[], Any], anchor: str | None, note: str = "") -> None:
        us = host_us(fn, calls=args.calls, wait=wait)
        rows.append({"path": name, "us_per_call": us, "anchor": anchor, "note": note})

    silu_ours, silu_jnp = jax.jit(ak.silu), jax.jit(jax.nn.silu)
    rms_ours, rms_ref = jax.jit(ak.rms_norm), jax.jit(rms_jnp)
    add("jit(jax.nn.silu)(x)", lambda: silu_jnp(x), None, "1024 bf16")
    add("jit(ak.silu)(x)", lambda: silu_ours(x), "jit(jax.nn.silu)(x)", "one custom call")
    add("jit(rms_norm jnp formula)(h, w)", lambda: rms_ref(h, w), None, "1 x 4096 bf16")
    add("jit(ak.rms_norm)(h, w)", lambda: rms_ours(h, w), "jit(rms_norm jnp formula)(h, w)")
    add("jax.nn.silu(x) eager", lambda: jax.nn.silu(x), None)
    add("ak.silu(x) eager", lambda: ak.silu(x), "jax.nn.silu(x) eager", "FFI custom call")
    available = _jax.available
    _jax.available = lambda: False
    try:
        add("ak.silu(x) eager, DLPack path", lambda: ak.silu(x), "jax.nn.silu(x) eager",
            "launch, then synchronise the stream")  # fmt: skip
    finally:
        _jax.available = available
    by_path = {r["path"]: r["us_per_call"] for r in rows}
    for r in rows:
        base = by_path.get(r.pop("anchor") or "")
        r["ratio_to_anchor"] = r["us_per_call"] / base if base else None
    return rows
