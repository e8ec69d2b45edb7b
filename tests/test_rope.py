"""rope family: rotary position embedding in place on q and k.

CPU: every validation error before any launch (fake CUDA arrays) and the launch heuristic.
GPU: f32 / f16 / bf16 x NeoX / GPT-J against the transformers / vLLM formulas in fp32 (full and
partial rotary, q and k as strided slices of a fused QKV buffer, misaligned views that take the
scalar path, int32 / int64 positions, f32 or storage-dtype caches), untouched memory around the
rotated spans, out-of-range positions, the torch fast path's overlap check and a token stride
past 2**31 elements.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import pytest

import aotkernels as ak
from aotkernels.ops.rope import _launch_config
from helpers import reference
from helpers.fake_dlpack import FakeCudaArray

# (rtol, atol) against the fp32 formula on the same (rounded) inputs.
tol = partial(reference.tol, table=reference.FAMILY_TOLERANCES["rope"])


# --- CPU: validation ------------------------------------------------------------------------


def _arr(shape: tuple[int, ...], dtype: str = "float16", ptr: int = 0x10000, **kw: Any) -> Any:
    return FakeCudaArray(shape, dtype, ptr=ptr, **kw)


def _args(**over: Any) -> dict[str, Any]:
    args = {
        "q": _arr((5, 4, 64)),
        "k": _arr((5, 2, 64), ptr=0x100000),
        "positions": _arr((5,), "int64", ptr=0x200000),
        "cos_sin_cache": _arr((100, 64), "float32", ptr=0x300000),
    }
    args.update(over)
    return args


def _call(**over: Any) -> Any:
    a = _args(**over)
    return ak.rope(a["q"], a["k"], a["positions"], a["cos_sin_cache"], a.get("is_neox", True))


@pytest.mark.parametrize(
    ("over", "exc", "msg"),
    [
        (
            {"q": _arr((5, 4, 64), "float64")},
            TypeError,
            "q.dtype must be one of float32, float16, bfloat16, got float64",
        ),
        (
            {"q": _arr((5, 256))},
            ValueError,
            "q must be 3-D [tokens, heads, head_dim], got shape (5, 256)",
        ),
        (
            {"q": _arr((5, 4, 64), strides=(512, 64, 2))},
            ValueError,
            "q must have a contiguous last dimension (stride 1)",
        ),
        (
            {"q": _arr((5, 4, 64), strides=(256, 32, 1))},
            ValueError,
            "q must not overlap itself, got strides (256, 32, 1)",
        ),
        ({"q": _arr((5, 4, 64), strides=(64, 64, 1))}, ValueError, "q must not overlap itself"),
        (
            {"k": _arr((5, 2, 64), "bfloat16", ptr=0x100000)},
            TypeError,
            "k.dtype must be float16 (the dtype of q), got bfloat16",
        ),
        (
            {"k": _arr((6, 2, 64), ptr=0x100000)},
            ValueError,
            "k.shape must be (5, heads_k, 64) (tokens and head_dim of q), got (6, 2, 64)",
        ),
        ({"k": _arr((5, 2, 32), ptr=0x100000)}, ValueError, "k.shape must be (5, heads_k, 64)"),
        ({"k": _arr((5, 2, 64), ptr=0x10000 + 2 * 640)}, ValueError, "q must not overlap k"),
        (
            {"k": _arr((5, 2, 64), ptr=0x100000, device=1)},
            ValueError,
            "k must be on the same device as q (cuda:0), got cuda:1",
        ),
        (
            {"positions": _arr((5,), "float32", ptr=0x200000)},
            TypeError,
            "positions.dtype must be one of int64, int32, got float32",
        ),
        (
            {"positions": _arr((4,), "int64", ptr=0x200000)},
            ValueError,
            "positions.shape must be (5,) (one per token of q), got (4,)",
        ),
        (
            {"positions": _arr((5,), "int32", ptr=0x200000, strides=(2,))},
            ValueError,
            "positions must be contiguous, got stride 2",
        ),
        (
            {"cos_sin_cache": _arr((100, 64), "bfloat16", ptr=0x300000)},
            TypeError,
            "cos_sin_cache.dtype must be one of float32, float16, got bfloat16",
        ),
        (
            {"cos_sin_cache": _arr((100, 63), "float32", ptr=0x300000)},
            ValueError,
            "cos_sin_cache.shape[1] (rot_dim) must be even and in [2, 64] (head_dim), got 63",
        ),
        (
            {"cos_sin_cache": _arr((100, 66), "float32", ptr=0x300000)},
            ValueError,
            "cos_sin_cache.shape[1] (rot_dim) must be even and in [2, 64] (head_dim), got 66",
        ),
        (
            {"cos_sin_cache": _arr((6400,), "float32", ptr=0x300000)},
            ValueError,
            "cos_sin_cache must be 2-D [max_pos, rot_dim], got shape (6400,)",
        ),
        (
            {"cos_sin_cache": _arr((100, 64), "float32", ptr=0x300000, strides=(1, 100))},
            ValueError,
            "cos_sin_cache must have a contiguous last dimension",
        ),
        (
            {"cos_sin_cache": _arr((100, 64), "float16", ptr=0x10000 + 200)},
            ValueError,
            "q must not overlap cos_sin_cache",
        ),
        (
            {"positions": _arr((5,), "int64", ptr=0x100000 + 8)},
            ValueError,
            "k must not overlap positions",
        ),
        ({"is_neox": 1}, TypeError, "is_neox must be a bool, got int"),
    ],
)
def test_rejects_bad_input(over: dict[str, Any], exc: type[Exception], msg: str) -> None:
    with pytest.raises(exc, match="^rope: " + re.escape(msg)):
        _call(**over)


def test_launch_config() -> None:
    # Few items per token: 32-thread rows, 8 tokens per block; many: one 256-thread token.
    assert _launch_config(1000, 20, 132) == ((125, 1), (32, 8))
    assert _launch_config(1000, 640, 132) == ((1000, 1), (256, 1))
    assert _launch_config(10**7, 96, 132) == ((132 * 16, 1), (128, 2))


def _launches(
    monkeypatch: pytest.MonkeyPatch, q: Any, k: Any, pos: Any, cache: Any, neox: bool = True
) -> Any:
    """The declaration's launches for metadata (shape, strides, dtype, alignment) of each
    array, after its checks, on a fake 132-SM device."""
    from types import SimpleNamespace

    from aotkernels import device
    from aotkernels.ops._op import Args, Meta
    from aotkernels.ops.rope import ROPE

    monkeypatch.setattr(device, "device_info", lambda dev: SimpleNamespace(sm_count=132))
    names = ("q", "k", "positions", "cos_sin_cache")
    metas = {n: Meta(*m) for n, m in zip(names, (q, k, pos, cache), strict=True)}
    a = Args(ROPE, metas, {"is_neox": neox}, 0)
    assert ROPE.shapes(a) == ()
    return ROPE.launch(a)


def _launch(monkeypatch: pytest.MonkeyPatch, *arrays: Any, neox: bool = True) -> Any:
    (launch,) = _launches(monkeypatch, *arrays, neox=neox)
    return launch


def test_launch_packets_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 Llama heads from a fused QKV row of 8 heads x 128: 16-byte packets (8 pairs per
    NeoX item, 4 per GPT-J item) when q and k are 16-byte aligned with packet strides."""
    q = ((5, 4, 128), (1024, 128, 1), "bf16", 16)
    k = ((5, 2, 128), (1024, 128, 1), "bf16", 16)
    pos = ((5,), (1,), "int64", 16)
    cache = ((100, 128), (128, 1), "f32", 16)
    launch = _launch(monkeypatch, q, k, pos, cache)
    assert launch.symbol == "ak_rope_bf16"
    assert launch.args["flags"] == 1 | 4 | 8  # NeoX, f32 cache, packets
    assert (launch.grid, launch.block) == ((2, 1), (64, 4))  # 6 heads x 64 / 8 pairs = 48 items
    assert {f: launch.args[f] for f in ("q", "k", "positions", "cos_sin")} == {
        "q": "q", "k": "k", "positions": "positions", "cos_sin": "cos_sin_cache"
    }  # fmt: skip
    assert (launch.args["q_token_stride"], launch.args["q_head_stride"]) == (1024, 128)
    assert (launch.args["cache_stride"], launch.args["max_pos"], launch.args["rot_dim"]) == (
        128, 100, 128
    )  # fmt: skip
    gptj = _launch(monkeypatch, q, k, pos, cache, neox=False)
    assert gptj.args["flags"] == 4 | 8 and gptj.block == (128, 2)  # 6 x 64 / 4 = 96 items
    misaligned = _launch(monkeypatch, (*q[:3], 2), k, pos, cache)
    assert misaligned.args["flags"] == 1 | 4 and misaligned.block == (256, 1)  # 6 x 64 pairs
    odd_stride = _launch(monkeypatch, ((5, 4, 128), (1300, 130, 1), "bf16", 16), k, pos, cache)
    assert odd_stride.args["flags"] == 1 | 4
    int32_bf16 = _launch(
        monkeypatch, q, k, ((5,), (1,), "int32", 16), ((100, 64), (64, 1), "bf16", 16)
    )
    assert int32_bf16.args["flags"] == 1 | 2 | 8  # int32 positions, bf16 cache, rot 64
    empty = ((0, 4, 128), (1024, 128, 1), "bf16", 16)
    empty_k = ((0, 2, 128), (1024, 128, 1), "bf16", 16)
    assert _launches(monkeypatch, empty, empty_k, ((0,), (1,), "int64", 16), cache) == []


# --- GPU ------------------------------------------------------------------------------------


def _dt(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _views(flat: Any, tokens: int, hq: int, hk: int, hd: int, shift: int) -> tuple[Any, Any, Any]:
    """q, k, v of a fused QKV buffer [tokens, (hq + 2 hk) * hd] starting ``shift`` elements
    into ``flat``, as [tokens, heads, head_dim] views."""
    qkv = flat[shift:].view(tokens, (hq + 2 * hk) * hd)
    q = qkv[:, : hq * hd].view(tokens, hq, hd)
    k = qkv[:, hq * hd : (hq + hk) * hd].view(tokens, hk, hd)
    v = qkv[:, (hq + hk) * hd :]
    return q, k, v


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize(
    ("tokens", "hq", "hk", "hd", "rot", "shift"),
    [
        (1, 1, 1, 64, 64, 0),  # decode, one head
        (7, 4, 2, 128, 128, 0),  # GQA, packets
        (333, 32, 8, 128, 64, 0),  # partial rotary (half), many tokens
        (19, 3, 1, 80, 80, 0),  # head_dim 80 (rot / 2 = 40: packets only for f32 NeoX)
        (19, 3, 1, 80, 32, 1),  # misaligned view: scalar path, partial
        (5, 2, 2, 34, 6, 0),  # odd everything: scalar path
        (4097, 2, 1, 64, 64, 0),  # tokens past one grid stride
    ],
)
def test_matches_formula_on_fused_qkv(
    dtype: str, neox: bool, tokens: int, hq: int, hk: int, hd: int, rot: int, shift: int
) -> None:
    import torch

    torch.manual_seed(tokens * 31 + hd)
    flat = torch.randn(tokens * (hq + 2 * hk) * hd + shift, device="cuda").to(_dt(dtype))
    q, k, v = _views(flat, tokens, hq, hk, hd, shift)
    cache = reference.rope_cache(4096, rot)
    pos = torch.randint(0, 4096, (tokens,), device="cuda")
    want_q, want_k = reference.rope(q, pos, cache, neox), reference.rope(k, pos, cache, neox)
    before = flat.clone()
    bq, bk, bv = _views(before, tokens, hq, hk, hd, shift)
    out_q, out_k = ak.rope(q, k, pos, cache, neox)
    assert out_q is q and out_k is k
    torch.testing.assert_close(q.float(), want_q, **tol(dtype))
    torch.testing.assert_close(k.float(), want_k, **tol(dtype))
    # Past rot_dim, v and the leading shift: bit for bit untouched.
    assert torch.equal(q[..., rot:], bq[..., rot:]) and torch.equal(k[..., rot:], bk[..., rot:])
    assert torch.equal(v, bv) and torch.equal(flat[:shift], before[:shift])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("pos_dtype", ["int32", "int64"])
def test_storage_dtype_cache_and_int32_positions(dtype: str, pos_dtype: str) -> None:
    import torch

    torch.manual_seed(3)
    q = torch.randn(50, 8, 128, device="cuda").to(_dt(dtype))
    k = torch.randn(50, 2, 128, device="cuda").to(_dt(dtype))
    cache = reference.rope_cache(1000, 128).to(_dt(dtype))
    pos = torch.randint(0, 1000, (50,), device="cuda", dtype=_dt(pos_dtype))
    want_q, want_k = reference.rope(q, pos, cache, True), reference.rope(k, pos, cache, True)
    ak.rope(q, k, pos, cache)
    torch.testing.assert_close(q.float(), want_q, **tol(dtype))
    torch.testing.assert_close(k.float(), want_k, **tol(dtype))


@pytest.mark.gpu
def test_matches_transformers_apply_rotary_pos_emb() -> None:
    """Against transformers' own Llama rotary code when it is installed."""
    import torch

    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    torch.manual_seed(5)
    tokens, hq, hk, hd = 37, 4, 2, 64
    q = torch.randn(tokens, hq, hd, device="cuda")
    k = torch.randn(tokens, hk, hd, device="cuda")
    cache = reference.rope_cache(512, hd)
    pos = torch.arange(100, 100 + tokens, device="cuda")
    cos, sin = cache[pos].chunk(2, -1)
    cos, sin = torch.cat([cos, cos], -1)[None], torch.cat([sin, sin], -1)[None]
    # transformers: [batch, heads, seq, head_dim], cos/sin [batch, seq, head_dim].
    wq, wk = llama.apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    ak.rope(q, k, pos, cache)
    torch.testing.assert_close(q, wq[0].transpose(0, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k, wk[0].transpose(0, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_out_of_range_positions_leave_tokens_unrotated() -> None:
    import torch

    q = torch.randn(4, 2, 64, device="cuda")
    k = torch.randn(4, 1, 64, device="cuda")
    cache = reference.rope_cache(10, 64)
    pos = torch.tensor([3, 10, -1, 9], device="cuda")
    q0, k0 = q.clone(), k.clone()
    ak.rope(q, k, pos, cache)
    for t in (1, 2):
        assert torch.equal(q[t], q0[t]) and torch.equal(k[t], k0[t])
    ok = torch.tensor([0, 3], device="cuda")
    torch.testing.assert_close(
        q[ok], reference.rope(q0[ok], pos[ok], cache, True), rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(
        k[ok], reference.rope(k0[ok], pos[ok], cache, True), rtol=1e-5, atol=1e-5
    )


@pytest.mark.gpu
def test_fast_path_rechecks_overlap_and_empty_inputs() -> None:
    import torch

    buf = torch.randn(2, 8, 4, 64, device="cuda")
    cache = reference.rope_cache(16, 64)
    pos = torch.zeros(8, dtype=torch.int64, device="cuda")
    ak.rope(buf[0], buf[1], pos, cache)  # caches the plan for this layout
    with pytest.raises(ValueError, match="rope: q must not overlap k"):
        ak.rope(buf[0], buf[0], pos, cache)  # same layout, now aliasing
    q = torch.empty(0, 4, 64, device="cuda")
    assert ak.rope(q, q[:, :1], pos[:0], cache)[0] is q  # empty: no launch, no overlap


@pytest.mark.gpu
def test_token_stride_past_2_pow_31() -> None:
    import torch

    need = (2**31 + 4096) * 2
    free, _ = torch.cuda.mem_get_info()
    if free < need + 2**30:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of free GPU memory, {free / 2**30:.1f} free")
    buf = torch.zeros(2**31 + 4096, dtype=torch.bfloat16, device="cuda")
    q = torch.as_strided(buf, (2, 4, 64), (2**31, 64, 1))
    q.copy_(torch.randn(2, 4, 64, device="cuda").to(torch.bfloat16))
    k = torch.randn(2, 1, 64, device="cuda").to(torch.bfloat16)
    cache = reference.rope_cache(8, 64)
    pos = torch.tensor([1, 7], device="cuda")
    want_q, want_k = reference.rope(q, pos, cache, False), reference.rope(k, pos, cache, False)
    ak.rope(q, k, pos, cache, False)
    torch.testing.assert_close(q.float(), want_q, **tol("bfloat16"))
    torch.testing.assert_close(k.float(), want_k, **tol("bfloat16"))
    assert int(torch.count_nonzero(buf[256 : 2**31])) == 0
