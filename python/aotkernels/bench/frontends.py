"""``bench compiled`` and ``bench backward``: the front ends under torch.compile and autograd.

compiled: one Llama decoder layer (transformers, random weights, bf16) under torch.compile: the
stock layer (Inductor's kernels and cuBLAS) beside the same layer with every RMSNorm, linear
layer and the SwiGLU MLP replaced by aotkernels ops (attention stays SDPA), at batch x seq 1x1,
8x1 and 1x2048. Milliseconds per layer and the ratio.

backward: autograd backward of rms_norm (dx, dweight), silu_and_mul and softmax at 16384 x
{4096, 8192} bf16: TB/s against torch eager's and torch.compile's backward of the same forward,
and the device copy bandwidth. Bytes: each backward input read once (x or y, dy, the weight)
and each output written once.
"""

from __future__ import annotations

import argparse
import copy
import types
from collections.abc import Callable
from typing import Any, NamedTuple

from . import reference
from .common import Row, bandwidth, compiled, copy_tbps
from .reference import rel_err
from .timing import cuda_torch, time_gpu

TITLES = {"compiled": "Llama decoder layer under torch.compile (ms per layer)",
          "backward": "backward bandwidth (TB/s) and ratios"}  # fmt: skip

LAYER_SIZES = ((1, 1), (8, 1), (1, 2048))  # (batch, seq)
EPS = 1e-6


def _llama_layer(torch: Any) -> tuple[Any, Any]:
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = LlamaConfig(
        hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
        num_key_value_heads=8, num_hidden_layers=1, rms_norm_eps=1e-5, vocab_size=128,
        max_position_embeddings=4096,
    )  # fmt: skip
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    layer = LlamaDecoderLayer(cfg, layer_idx=0).to("cuda", torch.bfloat16).eval()
    for p in layer.parameters():  # the init's small std would make activations vanish
        p.data.normal_(0, 0.02)
    return layer, LlamaRotaryEmbedding(cfg).to("cuda")


def _with_our_ops(layer: Any, torch: Any) -> Any:
    """A copy of ``layer`` whose norms, linear layers and MLP run aotkernels ops."""
    import aotkernels as ak

    ours = copy.deepcopy(layer)

    def norm_forward(self: Any, h: Any) -> Any:
        return ak.rms_norm(h, self.weight, self.variance_epsilon)

    def linear_forward(self: Any, h: Any) -> Any:
        flat = h.reshape(-1, h.shape[-1])
        return ak.matmul(flat, self.weight.t()).reshape(*h.shape[:-1], -1)

    mlp = ours.mlp
    mlp.gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).t().contiguous().t()

    def mlp_forward(self: Any, h: Any) -> Any:
        flat = h.reshape(-1, h.shape[-1])
        act = ak.silu_and_mul(ak.matmul(flat, self.gate_up.t()))
        return ak.matmul(act, self.down_proj.weight.t()).reshape(*h.shape[:-1], -1)

    ours.input_layernorm.forward = types.MethodType(norm_forward, ours.input_layernorm)
    ours.post_attention_layernorm.forward = types.MethodType(
        norm_forward, ours.post_attention_layernorm
    )
    attn = ours.self_attn
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj):
        proj.forward = types.MethodType(linear_forward, proj)
    mlp.forward = types.MethodType(mlp_forward, mlp)
    return ours


def _time_call(fn: Callable[[], Any]) -> float:
    return time_gpu(lambda i: fn())


def run_compiled(args: argparse.Namespace) -> list[Row]:
    torch = cuda_torch()
    layer, rope = _llama_layer(torch)
    ours = _with_our_ops(layer, torch)
    rows: list[Row] = []
    for batch, seq in LAYER_SIZES:
        h = torch.randn(batch, seq, 4096, device="cuda", dtype=torch.bfloat16)
        pos = torch.arange(seq, device="cuda")[None].expand(batch, -1)
        pe = rope(h, pos)

        def run(mod: Any, h: Any = h, pe: Any = pe, pos: Any = pos) -> Any:
            out = mod(h, position_embeddings=pe, position_ids=pos)
            return out[0] if isinstance(out, tuple) else out

        torch._dynamo.reset()
        with torch.no_grad():
            stock_c = torch.compile(lambda: run(layer), dynamic=False)
            ours_c = torch.compile(lambda: run(ours), dynamic=False)
            ref, got = stock_c(), ours_c()
            t_stock = _time_call(stock_c)
            t_ours = _time_call(ours_c)
        err = rel_err(got, ref)
        rows.append({
            "batch_x_seq": f"{batch}x{seq}", "stock_compiled_ms": t_stock,
            "ours_compiled_ms": t_ours, "speedup": t_stock / t_ours, "rel_err": err,
        })  # fmt: skip
    return rows


class BackwardCase(NamedTuple):
    ours: Callable[[Any, Any], Any]  # (x, weight) -> y, through our autograd
    theirs: Callable[[Any, Any], Any]  # torch's forward, differentiated by torch
    want: Callable[[Any, Any], Any]  # the fp64 reference formula, differentiated by torch
    tensors: float  # x-sized tensors the backward reads and writes


def backward_cases(torch: Any) -> dict[str, BackwardCase]:
    import torch.nn.functional as F

    import aotkernels as ak

    return {
        "rms_norm": BackwardCase(lambda x, w: ak.rms_norm(x, w, EPS),
                                 lambda x, w: F.rms_norm(x, (x.shape[-1],), w, EPS),
                                 lambda x, w: reference.rms_norm(x, w, EPS), 3),
        # x [.., 2d] and dx [.., 2d] read and written, dy [.., d] read: 2.5 x-sized tensors.
        "silu_and_mul": BackwardCase(lambda x, w: ak.silu_and_mul(x),
                                     lambda x, w: reference.gated("silu_and_mul", x, dtype=None),
                                     lambda x, w: reference.gated("silu_and_mul", x, "float64"),
                                     2.5),
        "softmax": BackwardCase(lambda x, w: ak.softmax(x), lambda x, w: torch.softmax(x, -1),
                                lambda x, w: reference.softmax(x), 3),
    }  # fmt: skip


def grad_error(case: BackwardCase, x: Any, w: Any, dy: Any, wrt: int) -> float:
    """The largest ``rel_err`` of our gradients (of x, and of the weight where ``wrt`` is 2)
    against torch's autograd of the fp64 reference on the same inputs."""
    import torch

    leaves = [t.detach().requires_grad_() for t in (x, w)]
    got = torch.autograd.grad(case.ours(*leaves), leaves[:wrt], dy)
    exact = [t.detach().double().requires_grad_() for t in (x, w)]
    want = torch.autograd.grad(case.want(*exact), exact[:wrt], dy.double())
    return max(rel_err(g, e) for g, e in zip(got, want, strict=True))


def run_backward(args: argparse.Namespace) -> list[Row]:
    """Each op's backward timed through autograd (ours, torch eager, torch.compile), after one
    call of ours compared with the fp64 reference's gradients (``rel_err``)."""
    torch = cuda_torch()
    rows: list[Row] = []
    for op, case in backward_cases(torch).items():
        for cols in (4096, 8192):
            shape = (16384, cols)
            x = torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            w = torch.randn(cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            copy = copy_tbps(torch, [x.detach()])
            inputs = (x, w) if op == "rms_norm" else (x,)
            dy = torch.randn_like(case.ours(x, w))
            err = grad_error(case, x, w, dy, len(inputs))

            def grad_time(fwd: Callable[..., Any] | None, x: Any = x, w: Any = w,
                          inputs: Any = inputs, dy: Any = dy) -> float | None:  # fmt: skip
                if fwd is None:
                    return None
                y = fwd(x, w)
                return time_gpu(lambda i: torch.autograd.grad(y, inputs, dy, retain_graph=True))

            ms = {"ours": grad_time(case.ours), "eager": grad_time(case.theirs),
                  "compile": grad_time(compiled(args, torch, case.theirs))}  # fmt: skip
            moved = case.tensors * x.numel() * 2
            rows.append({"op": op, "shape": list(shape), "rel_err": err,
                         **bandwidth(moved, copy, ms)})  # fmt: skip
    return rows
