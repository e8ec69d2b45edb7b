"""End to end: a transformers Llama (and Qwen3, QK-norm) forward pass on our ops.

A tiny model is built from a config with random weights (no download). Every RMSNorm, the
rotary embedding and every MLP are replaced by our ops by patching the module forwards:

* ``*RMSNorm.forward``         -> ``ak.rms_norm`` (Qwen3's q_norm / k_norm over head_dim of the
                                  [batch, seq, heads, head_dim] projections included);
* ``*RotaryEmbedding.forward`` -> our cos/sin cache [max_pos, head_dim] (f32) and the position
                                  ids, and the module's ``apply_rotary_pos_emb`` -> ``ak.rope``
                                  in place on q / k;
* ``*MLP.forward``             -> ``ak.matmul`` (x [batch, seq, hidden] @ [gate; up].T, batched
                                  with a broadcast weight) -> ``ak.silu_and_mul`` ->
                                  ``ak.matmul`` (down_proj, with its bias when the config has one).

Tolerance, documented: logits are compared with the same model in float32 (stock code). Our
bfloat16 forward must be as close to it as the stock bfloat16 forward is, within a factor
(``ERR_FACTOR``) on the largest absolute logit error, and its top-1 tokens must agree with the
float32 model's at least as often as the stock bfloat16 model's do, less ``TOP1_SLACK``, and on
at least ``TOP1_MIN`` of the positions. Both bfloat16 forwards round activations at every
step; ours rounds less often (fused ops), so it is usually the closer one.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import aotkernels as ak

ERR_FACTOR = 2.0
TOP1_SLACK = 0.02
TOP1_MIN = 0.9
BATCH, SEQ = 2, 96


class Patched:
    """The patches, with a count of the calls our ops received (the comparison below would
    pass vacuously if a patch were never reached)."""

    def __init__(self, module: Any, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
        import torch

        self.calls = {"rms_norm": 0, "rope": 0, "mlp": 0}
        self.caches: dict[int, Any] = {}
        self.weights: dict[int, tuple[Any, Any]] = {}
        calls, caches, weights = self.calls, self.caches, self.weights

        def rms_forward(norm: Any, x: Any) -> Any:
            calls["rms_norm"] += 1
            return ak.rms_norm(x, norm.weight, norm.variance_epsilon)

        def rotary_forward(rot: Any, x: Any, position_ids: Any = None, *args: Any,
                           **kwargs: Any) -> tuple[Any, Any]:  # fmt: skip
            cache = caches.get(id(rot))
            if cache is None:
                # vLLM's cache: cos then sin of position * inv_freq, f32, for every position.
                inv = rot.inv_freq.float()
                scale = float(getattr(rot, "attention_scaling", 1.0))
                t = torch.arange(4 * SEQ, device=inv.device, dtype=torch.float32)
                freqs = torch.outer(t, inv)
                cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1) * scale
                caches[id(rot)] = cache
            return cache, position_ids  # travels to apply_rotary_pos_emb as (cos, sin)

        def apply_rope(q: Any, k: Any, cache: Any, position_ids: Any, *args: Any,
                       **kwargs: Any) -> tuple[Any, Any]:  # fmt: skip
            calls["rope"] += 1
            b, hq, s, d = q.shape
            # [batch, heads, seq, head_dim] views of [batch, seq, heads, head_dim] projections:
            # as [tokens, heads, head_dim] (strided), rotated in place.
            qv = q.transpose(1, 2).view(b * s, hq, d)
            kv = k.transpose(1, 2).view(b * s, k.shape[1], d)
            ak.rope(qv, kv, position_ids.expand(b, s).reshape(-1), cache, True)
            return q, k

        def mlp_forward(mlp: Any, x: Any) -> Any:
            calls["mlp"] += 1
            fused = weights.get(id(mlp))
            if fused is None:
                g, u = mlp.gate_proj, mlp.up_proj
                w = torch.cat((g.weight, u.weight), dim=0)  # [2 * intermediate, hidden]
                bias = None if g.bias is None else torch.cat((g.bias, u.bias))
                fused = weights[id(mlp)] = (w, bias)
            gate_up = ak.matmul(x, fused[0].t(), bias=fused[1])  # batched, b broadcast
            h = ak.silu_and_mul(gate_up)
            return ak.matmul(h, mlp.down_proj.weight.t(), bias=mlp.down_proj.bias)

        monkeypatch.setattr(getattr(module, f"{prefix}RMSNorm"), "forward", rms_forward)
        monkeypatch.setattr(getattr(module, f"{prefix}RotaryEmbedding"), "forward", rotary_forward)
        monkeypatch.setattr(module, "apply_rotary_pos_emb", apply_rope)
        monkeypatch.setattr(getattr(module, f"{prefix}MLP"), "forward", mlp_forward)


def _config(cls: Any, **extra: Any) -> Any:
    return cls(
        vocab_size=512,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4 * SEQ,
        initializer_range=0.05,
        rms_norm_eps=1e-6,
        attn_implementation="eager",
        **extra,
    )


def _logits(model: Any, ids: Any) -> Any:
    import torch

    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits.float()


def _compare(module: Any, prefix: str, config: Any, monkeypatch: pytest.MonkeyPatch,
             qk_norms: int) -> None:  # fmt: skip
    import torch

    torch.manual_seed(0)
    model = getattr(module, f"{prefix}ForCausalLM")(config).cuda().eval()
    with torch.no_grad():
        for p in model.parameters():  # biases start at 0: give them values worth adding
            if p.dim() == 1 and not torch.all(p == 1):
                p.normal_(0.0, 0.05)
        for name, p in model.named_parameters():  # norm weights start at 1: vary them too
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device="cuda")
    ref = _logits(model.float(), ids)
    # The rotary inv_freq buffers stay f32, as in a checkpoint loaded in bfloat16 (rounding
    # them would move every angle for both bfloat16 forwards alike).
    inv = {n: b.clone() for n, b in model.named_buffers() if n.endswith("inv_freq")}
    model.to(torch.bfloat16)
    for name, buf in inv.items():
        owner, attr = name.rsplit(".", 1)
        setattr(model.get_submodule(owner), attr, buf)
    stock = _logits(model, ids)
    patched = Patched(module, prefix, monkeypatch)
    ours = _logits(model, ids)
    layers = config.num_hidden_layers
    assert patched.calls == {
        "rms_norm": 2 * layers + 1 + qk_norms * layers,
        "rope": layers,
        "mlp": layers,
    }
    scale = ref.abs().max().item()
    err_stock = (stock - ref).abs().max().item()
    err_ours = (ours - ref).abs().max().item()
    top_ref = ref.argmax(-1)
    agree_stock = (stock.argmax(-1) == top_ref).float().mean().item()
    agree_ours = (ours.argmax(-1) == top_ref).float().mean().item()
    agree_pair = (ours.argmax(-1) == stock.argmax(-1)).float().mean().item()
    print(
        f"\n{prefix}: |logits| max {scale:.3f}; max |bf16 - fp32|: stock {err_stock:.4f}, ours "
        f"{err_ours:.4f}; top-1 agreement with fp32: stock {agree_stock:.4f}, ours "
        f"{agree_ours:.4f}; ours vs stock bf16 {agree_pair:.4f} ({BATCH * SEQ} positions)"
    )
    assert math.isfinite(err_ours)
    assert err_ours <= ERR_FACTOR * err_stock
    assert agree_ours >= min(agree_stock - TOP1_SLACK, 1.0) and agree_ours >= TOP1_MIN


@pytest.mark.gpu
def test_llama_logits_match_stock(monkeypatch: pytest.MonkeyPatch) -> None:
    transformers = pytest.importorskip("transformers", reason="the end-to-end check needs it")
    from transformers.models.llama import modeling_llama

    # mlp_bias: the bias epilogue of ak.matmul runs too.
    config = _config(transformers.LlamaConfig, mlp_bias=True)
    _compare(modeling_llama, "Llama", config, monkeypatch, qk_norms=0)


@pytest.mark.gpu
def test_qwen3_qk_norm_logits_match_stock(monkeypatch: pytest.MonkeyPatch) -> None:
    transformers = pytest.importorskip("transformers", reason="the end-to-end check needs it")
    if not hasattr(transformers, "Qwen3Config"):
        pytest.skip(f"transformers {transformers.__version__} has no Qwen3")
    from transformers.models.qwen3 import modeling_qwen3

    config = _config(transformers.Qwen3Config)
    # q_norm and k_norm: rms_norm over head_dim of the [batch, seq, heads, head_dim] views of
    # the projections (contiguous there, so they need no copy).
    _compare(modeling_qwen3, "Qwen3", config, monkeypatch, qk_norms=2)
