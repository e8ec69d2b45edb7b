"""attention family: attention, attention_varlen, attention_decode.

CPU: validation before any launch (dtypes, shapes, strides, alignment, devices, windows, scales,
grad), and the pure launch configuration (variant pick, GQA packing, split-KV, parameters).
GPU: every head dim and both dtypes against an fp32 torch reference (softmax(q k^T * scale +
mask) v with the mask built explicitly) over Sq, Sk in {1, 17, 128, 1000, 4097}, causal and not,
GQA 1/4/8, windows, softcap, padded head dims, strided inputs, out= and LSE; varlen with empty
and length-1 sequences; decode over contiguous and paged caches (scattered pages, lengths not a
multiple of the page size, split-KV); fully masked rows; NaN propagation; large logits; bitwise
repeatability; the sm_90a image; compute-sanitizer. Every GPU test runs on each path the GPU
has (``attn_path``: ``auto`` takes fa3 on sm_90a where the call qualifies, ``fa2`` forces FA2);
the CPU tests check fa3's eligibility rules and its rank-4 TMA maps as the launch packs them.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import aotkernels as ak
from aotkernels import arrays, loader
from aotkernels.ops import _op
from aotkernels.ops._op import Meta, TensorMap, pack_tensor_map, tensor_map_problem
from aotkernels.ops.attention import (
    Tile,
    configure,
    decode_splits,
    fa3_maps,
    fa3_refusal,
    fa3_units,
    validate_decode,
    validate_dense,
    validate_varlen,
)
from helpers.fake_dlpack import FakeCudaArray
from helpers.fake_family import fake_family
from helpers.gemm import unflatten
from helpers.no_launch import Reached as _Reached
from helpers.no_launch import stop_after_validation
from helpers.reference import FAMILY_TOLERANCES
from helpers.reference import attention as reference
from helpers.reference import tol as reference_tol
from helpers.sanitizer import assert_clean, sanitizer_or_skip

ENV = "AOTKERNELS_ATTENTION_PATH"
SCRIPTS = Path(__file__).parent / "scripts"
HEAD_DIMS = [64, 128, 256]
DTYPES = ["float16", "bfloat16"]

PATHS = ["auto", "fa2"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """GPU tests run once per path (CPU tests take the default)."""
    if metafunc.definition.get_closest_marker("gpu") is not None:
        metafunc.parametrize("attn_path", PATHS, indirect=True)


@pytest.fixture(autouse=True)
def attn_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``auto``: the op's own choice (fa3 first on sm_90a); ``fa2``: forced."""
    path = str(getattr(request, "param", "auto"))
    if path == "fa2":
        monkeypatch.setenv(ENV, "fa2")
    return path


# (rtol, atol) of outputs against the fp32 reference: reference.FAMILY_TOLERANCES["attention"]
# says why. The LSE is f32 from unrounded probabilities: scores are exact products of the inputs
# summed in f32, exp2 is MUFU (2 ulp): atol/rtol 1e-4.
LSE_TOL = {"rtol": 1e-4, "atol": 1e-4}
tol = partial(reference_tol, table=FAMILY_TOLERANCES["attention"])


# --- CPU: validation ------------------------------------------------------------------------


@pytest.fixture
def no_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    stop_after_validation(monkeypatch, ENV)


def F(shape: tuple[int, ...], dtype: str = "float16", **kw: Any) -> FakeCudaArray:
    return FakeCudaArray(shape, dtype, **kw)


def qkv(
    b: int = 2,
    sq: int = 33,
    sk: int = 40,
    h: int = 8,
    hkv: int = 2,
    d: int = 64,
    dtype: str = "float16",
) -> tuple[FakeCudaArray, ...]:
    n = b * max(sq, sk) * h * d * 2
    return (
        F((b, sq, h, d), dtype, ptr=0x100000),
        F((b, sk, hkv, d), dtype, ptr=0x100000 + 4 * n),
        F((b, sk, hkv, d), dtype, ptr=0x100000 + 8 * n),
    )


def test_valid_call_reaches_launch(no_launch: None) -> None:
    with pytest.raises(_Reached):
        ak.attention(*qkv())


@pytest.mark.parametrize("dtype", ["float32", "int8", "float64"])
def test_rejects_dtype(no_launch: None, dtype: str) -> None:
    q, k, v = qkv()
    with pytest.raises(
        TypeError, match=rf"attention: q.dtype must be one of float16, bfloat16, got {dtype}"
    ):
        ak.attention(F(q.shape, dtype), k, v)


def test_rejects_mixed_dtypes(no_launch: None) -> None:
    q, k, v = qkv()
    with pytest.raises(
        TypeError, match=r"attention: v.dtype must equal q.dtype \(float16\), got bfloat16"
    ):
        ak.attention(q, k, F(v.shape, "bfloat16", ptr=v.ptr))


@pytest.mark.parametrize(
    ("qs", "ks", "match"),
    [
        ((2, 33, 8), (2, 40, 2, 64), r"q must be 4-D \[B, S, H, D\]"),
        ((2, 33, 8, 64), (3, 40, 2, 64), r"k.shape\[0\] must equal q's batch 2"),
        (
            (2, 33, 8, 64),
            (2, 40, 3, 64),
            r"the query heads \(8\) must be a multiple of the KV heads \(3\)",
        ),
        ((2, 33, 8, 64), (2, 40, 2, 128), r"k.shape\[-1\] must equal q's head dim 64"),
        ((2, 33, 8, 0), (2, 40, 2, 0), r"the head dim \(q.shape\[-1\]\) must be positive"),
    ],
)
def test_rejects_shapes(no_launch: None, qs: Any, ks: Any, match: str) -> None:
    with pytest.raises(ValueError, match="attention: " + match):
        ak.attention(F(qs), F(ks, ptr=0x900000), F(ks, ptr=0x1900000))


def test_v_shape_must_match_k(no_launch: None) -> None:
    q, k, _ = qkv()
    with pytest.raises(ValueError, match=r"attention: v.shape must equal k.shape"):
        ak.attention(q, k, F((2, 41, 2, 64), ptr=0x9000000))


@pytest.mark.parametrize("d", [12, 100, 264, 512])
def test_unbuilt_head_dims(no_launch: None, d: int) -> None:
    q, k, v = qkv(d=d)
    with pytest.raises(
        NotImplementedError,
        match=rf"attention: head dims must be a multiple of 8 up to 256 .*got {d}",
    ):
        ak.attention(q, k, v)


@pytest.mark.parametrize("d", [8, 32, 80, 96, 200])
def test_padded_head_dims_accepted(no_launch: None, d: int) -> None:
    with pytest.raises(_Reached):
        ak.attention(*qkv(d=d))


@pytest.mark.parametrize(
    ("i", "strides", "offset", "message"),
    [
        (2, (40 * 2 * 128, 2 * 128, 128, 2), 0, r"v must have a contiguous last dimension"),
        (0, None, 2, r"q must be 16-byte aligned"),
        (0, (33 * 8 * 68, 8 * 68, 68, 1), 0, r"q must be 16-byte aligned with strides"),
    ],
    ids=["noncontiguous_last_dim", "misaligned_pointer", "misaligned_stride"],
)
def test_rejects_bad_layout(
    no_launch: None, i: int, strides: tuple[int, ...] | None, offset: int, message: str
) -> None:
    """Input ``i`` of q, k, v replaced by a view of its memory with ``strides`` (None:
    contiguous), ``offset`` bytes further on."""
    arrays = list(qkv())
    arrays[i] = F(arrays[i].shape, strides=strides, ptr=arrays[i].ptr + offset)
    with pytest.raises(ValueError, match=rf"attention: {message}"):
        ak.attention(*arrays)


def test_strided_and_broadcast_inputs_accepted(no_launch: None) -> None:
    q, k, v = qkv()
    q2 = F(q.shape, strides=(33 * 3 * 8 * 64, 3 * 8 * 64, 64, 1), ptr=q.ptr)  # from packed qkv
    k2 = F(k.shape, strides=(0, 2 * 64, 64, 1), ptr=k.ptr)  # batch-broadcast keys
    with pytest.raises(_Reached):
        ak.attention(q2, k2, v)


def test_rejects_other_device(no_launch: None) -> None:
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"attention: k must be on the same device as q"):
        ak.attention(q, F(k.shape, device=1, ptr=k.ptr), v)


def test_rejects_cpu_array(no_launch: None) -> None:
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"attention: q must be on a CUDA device"):
        ak.attention(F(q.shape, device_type=1), k, v)


@pytest.mark.parametrize(
    ("window", "exc", "match"),
    [
        ((1,), ValueError, r"window must be a \(left, right\) pair, got \(1,\)"),
        ((1.0, 2), TypeError, r"window must be a tuple of ints"),
        ((-2, 0), ValueError, r"window sides must be >= 0, or -1 for unbounded"),
    ],
)
def test_rejects_windows(no_launch: None, window: Any, exc: type, match: str) -> None:
    with pytest.raises(exc, match="attention: " + match):
        ak.attention(*qkv(), window=window)


@pytest.mark.parametrize(
    ("kw", "exc", "match"),
    [
        ({"scale": float("nan")}, ValueError, r"scale must be finite"),
        ({"scale": "x"}, TypeError, r"scale must be a real number"),
        ({"softcap": -1.0}, ValueError, r"softcap must be positive"),
        ({"softcap": float("inf")}, ValueError, r"softcap must be finite"),
        ({"causal": 1}, TypeError, r"causal must be a bool, got int"),
    ],
)
def test_rejects_scalars(no_launch: None, kw: dict[str, Any], exc: type, match: str) -> None:
    with pytest.raises(exc, match="attention: " + match):
        ak.attention(*qkv(), **kw)


def test_out_checks(no_launch: None) -> None:
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"attention: out must not overlap q"):
        ak.attention(q, k, v, out=F(q.shape, ptr=q.ptr))
    with pytest.raises(ValueError, match=r"attention: out.shape must be \(2, 33, 8, 64\)"):
        ak.attention(q, k, v, out=F((2, 33, 8, 32), ptr=0x7000000))
    with pytest.raises(TypeError, match=r"attention: out.dtype must be float16, got bfloat16"):
        ak.attention(q, k, v, out=F(q.shape, "bfloat16", ptr=0x7000000))
    overlapping = F(q.shape, strides=(33 * 64, 64, 8, 1), ptr=0x7000000)
    with pytest.raises(ValueError, match=r"attention: out must not overlap itself"):
        ak.attention(q, k, v, out=overlapping)


def test_out_with_lse_refused(no_launch: None) -> None:
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"attention: out= cannot be combined with return_lse"):
        ak.attention(q, k, v, return_lse=True, out=F(q.shape, ptr=0x7000000))
    with pytest.raises(TypeError, match=r"attention: return_lse must be a bool, got int"):
        ak.attention(q, k, v, return_lse=1)


@pytest.mark.gpu
def test_requires_grad_refused() -> None:
    torch = _torch()
    q = rand(1, 4, 2, 64, dtype=torch.float16).requires_grad_()
    with pytest.raises(NotImplementedError, match=r"attention: q requires grad"):
        ak.attention(q, q.detach(), q.detach())
    lens = torch.tensor([4], dtype=torch.int32, device="cuda")
    with pytest.raises(NotImplementedError, match=r"attention_decode: v_cache requires grad"):
        ak.attention_decode(q.detach(), q.detach(), q, lens)


@pytest.mark.gpu
def test_requires_grad_under_no_grad() -> None:
    torch = _torch()
    q = rand(1, 40, 2, 64, dtype=torch.float16).requires_grad_()
    with torch.no_grad():
        out = ak.attention(q, q, q)
    ref, _ = reference(q.detach(), q.detach(), q.detach())
    torch.testing.assert_close(out.float(), ref, **tol(torch.float16))


def varlen_args(b: int = 3, total_q: int = 50, total_k: int = 60) -> tuple[Any, ...]:
    q = F((total_q, 8, 64), ptr=0x100000)
    k = F((total_k, 2, 64), ptr=0x900000)
    v = F((total_k, 2, 64), ptr=0x1900000)
    return q, k, v, F((b + 1,), "int32", ptr=0x3000000), F((b + 1,), "int32", ptr=0x3100000)


def test_varlen_valid_and_checks(no_launch: None) -> None:
    q, k, v, cq, ck = varlen_args()
    with pytest.raises(_Reached):
        ak.attention_varlen(q, k, v, cq, ck, 20, 30, causal=True)
    with pytest.raises(TypeError, match=r"attention_varlen: cu_seqlens_q.dtype must be int32"):
        ak.attention_varlen(q, k, v, F((4,), "float32", ptr=cq.ptr), ck, 20, 30)
    with pytest.raises(ValueError, match=r"attention_varlen: cu_seqlens_k.shape must be \(4,\)"):
        ak.attention_varlen(q, k, v, cq, F((5,), "int32", ptr=ck.ptr), 20, 30)
    with pytest.raises(ValueError, match=r"attention_varlen: cu_seqlens_q must be contiguous"):
        ak.attention_varlen(q, k, v, F((4,), "int32", strides=(2,), ptr=cq.ptr), ck, 20, 30)
    with pytest.raises(TypeError, match=r"attention_varlen: max_seqlen_q must be an int"):
        ak.attention_varlen(q, k, v, cq, ck, 2.5, 30)
    with pytest.raises(ValueError, match=r"attention_varlen: max_seqlen_k must be in \[0, "):
        ak.attention_varlen(q, k, v, cq, ck, 20, -1)
    with pytest.raises(ValueError, match=r"attention_varlen: q must be 3-D \[total, H, D\]"):
        ak.attention_varlen(F((1, 50, 8, 64)), k, v, cq, ck, 20, 30)


def decode_args(paged: bool) -> tuple[Any, ...]:
    q = F((2, 1, 8, 128), ptr=0x100000)
    if paged:
        k = F((10, 16, 2, 128), ptr=0x900000)
        v = F((10, 16, 2, 128), ptr=0x1900000)
        return q, k, v, F((2,), "int32", ptr=0x3000000), F((2, 5), "int32", ptr=0x3100000)
    k = F((2, 300, 2, 128), ptr=0x900000)
    v = F((2, 300, 2, 128), ptr=0x1900000)
    return q, k, v, F((2,), "int32", ptr=0x3000000), None


@pytest.mark.parametrize("paged", [False, True])
def test_decode_valid_and_checks(no_launch: None, paged: bool) -> None:
    q, k, v, lens, bt = decode_args(paged)
    with pytest.raises(_Reached):
        ak.attention_decode(q, k, v, lens, bt)
    with pytest.raises(ValueError, match=r"attention_decode: q.shape\[1\] .* at most 16, got 17"):
        ak.attention_decode(F((2, 17, 8, 128), ptr=q.ptr), k, v, lens, bt)
    with pytest.raises(ValueError, match=r"attention_decode: cache_seqlens.shape must be \(2,\)"):
        ak.attention_decode(q, k, v, F((3,), "int32", ptr=lens.ptr), bt)
    if paged:
        with pytest.raises(TypeError, match=r"attention_decode: block_table.dtype must be int32"):
            ak.attention_decode(q, k, v, lens, F((2, 5), "float32", ptr=bt.ptr))
        with pytest.raises(ValueError, match=r"attention_decode: block_table.shape must be \(2, "):
            ak.attention_decode(q, k, v, lens, F((3, 5), "int32", ptr=bt.ptr))
        small = (F((10, 8, 2, 128), ptr=k.ptr), F((10, 8, 2, 128), ptr=v.ptr))
        with pytest.raises(ValueError, match=r"attention_decode: the page size .* >= 16, got 8"):
            ak.attention_decode(q, *small, lens, bt)
    else:
        with pytest.raises(ValueError, match=r"attention_decode: k_cache.shape\[0\] must equal"):
            ak.attention_decode(
                q, F((3, 300, 2, 128), ptr=k.ptr), F((3, 300, 2, 128), ptr=v.ptr), lens
            )


# --- CPU: launch configuration (pure) -------------------------------------------------------

TILES = [
    Tile("fa2_d64", "fa2", 0, 64, 128, 64, 128, 32768),
    Tile("fa2_d128", "fa2", 0, 128, 128, 64, 128, 65536),
    Tile("fa2_d256", "fa2", 0, 256, 64, 32, 128, 65536),
    Tile("dec_d64", "dec", 1, 64, 16, 16, 64, 51200),
    Tile("dec_d128", "dec", 1, 128, 16, 16, 64, 53248),
    Tile("dec_d256", "dec", 1, 256, 16, 16, 32, 57344),
]
FA3_TILES = [
    Tile("fa3_d64", "fa3", 0, 64, 128, 128, 384, 165376),
    Tile("fa3_d64_defer", "fa3", 0, 64, 128, 128, 384, 165376, 1, masked_only=1),
    Tile("fa3_d64_m192", "fa3", 0, 64, 192, 128, 512, 206336, 1024, 2048, 192, 1),
    Tile(
        "fa3_d64_m192_short", "fa3", 0, 64, 192, 128, 512, 206336, 1, None, 192, 1, unmasked_only=1
    ),
    Tile("fa3_d128_defer", "fa3", 0, 128, 128, 128, 384, 230912, o_tma=1),
    Tile("fa3_d128", "fa3", 0, 128, 128, 128, 384, 230912, 1, 1024, o_tma=1),
    Tile("fa3_d128_qahead", "fa3", 0, 128, 128, 128, 384, 230912, 512, o_tma=1, masked_only=1),
    Tile("fa3_d128_n176", "fa3", 0, 128, 128, 176, 384, 214528, 8192),
    Tile("fa3_d256", "fa3", 0, 256, 128, 64, 384, 230912, o_tma=1),
    Tile("fa3_d256_n80", "fa3", 0, 256, 128, 80, 384, 230912, 8192),
    *TILES,
]


def meta(shape: tuple[int, ...], dtype: str = "f16") -> Meta:
    from aotkernels.arrays import contiguous_strides

    return Meta(shape, contiguous_strides(shape), dtype, 16)


@pytest.mark.parametrize(
    ("d", "variant"),
    [
        (8, "fa2_d64"),
        (64, "fa2_d64"),
        (72, "fa2_d128"),
        (128, "fa2_d128"),
        (136, "fa2_d256"),
        (256, "fa2_d256"),
    ],
)
def test_variant_by_head_dim(d: int, variant: str) -> None:
    q, kv = meta((2, 100, 8, d)), meta((2, 100, 8, d))
    p = validate_dense(q, kv, kv, False, None, None, None, False)
    cfg = configure(p, (100 * 8 * d, 8 * d, d, 1), TILES)
    assert cfg.tile.name == variant
    assert cfg.fields["scale_log2"] == pytest.approx(math.log2(math.e) / math.sqrt(d))


def test_dense_config_fields() -> None:
    q, kv = meta((2, 1000, 16, 128)), meta((2, 900, 4, 128))
    p = validate_dense(q, kv, kv, True, 0.5, (100, -1), 30.0, True)
    cfg = configure(p, (1000 * 16 * 128, 16 * 128, 128, 1), TILES)
    f = cfg.fields
    assert cfg.grid == (8, 16, 2) and cfg.block == 128 and cfg.smem == 65536 and cfg.splits == 1
    assert (f["window_left"], f["window_right"]) == (100, 0)  # causal caps right at 0
    assert f["flags"] == 64 | 32  # softcap, lse; not packed (1000 rows fill tiles)
    assert f["scale_log2"] == pytest.approx(30.0 * math.log2(math.e))
    assert f["softcap_pre"] == pytest.approx(0.5 / 30.0)
    assert (f["q_sb"], f["q_ss"], f["q_sh"]) == (1000 * 16 * 128, 16 * 128, 128)
    assert (f["lse_sb"], f["lse_sh"]) == (16 * 1000, 1000)
    assert p.lse_shape == (2, 16, 1000)


def test_short_queries_pack_gqa() -> None:
    q, kv = meta((2, 4, 32, 128)), meta((2, 900, 4, 128))
    cfg = configure(validate_dense(q, kv, kv, False, None, None, None, False), q.strides, TILES)
    assert cfg.fields["flags"] & 16 and cfg.grid == (1, 4, 2)  # 4 x 8 rows per KV head


def test_decode_splits_long_context() -> None:
    q, kv = meta((1, 1, 32, 128)), meta((1, 131072, 8, 128))
    lens = Meta((1,), (1,), "int32", 16)
    p = validate_decode(q, kv, kv, lens, None, False, None, None)
    assert p.splits == decode_splits(1, 8, 4, 131072) == 64  # 8 CTAs -> 512
    assert decode_splits(1, 1, 8, 40_000) == loader.constants("attention")["max_splits"] == 128
    cfg = configure(p, q.strides, TILES)
    assert cfg.tile.name == "dec_d128" and cfg.splits == 64 and cfg.grid == (1, 8, 64)
    assert cfg.block == 64 and cfg.smem == 53248
    assert cfg.fields["flags"] == 2 | 8 | 16  # seqused, split, packed
    assert cfg.combine_grid == 32 and cfg.combine_block == 128 and cfg.fields["acc_split"] == 32


def test_decode_large_batch_does_not_split() -> None:
    q, kv = meta((64, 1, 32, 128)), meta((64, 4096, 8, 128))
    lens = Meta((64,), (1,), "int32", 16)
    cfg = configure(validate_decode(q, kv, kv, lens, None, False, None, None), q.strides, TILES)
    assert cfg.splits == 1 and cfg.fields["flags"] & 8 == 0


def test_no_kernel_for_dtype() -> None:
    from aotkernels.errors import NoKernelImageError

    q = meta((1, 4, 8, 64), "bf16")
    p = validate_dense(q, q, q, False, None, None, None, False)
    with pytest.raises(NoKernelImageError, match=r"no bfloat16 attention kernel for head dim 64"):
        configure(p, q.strides, [], "sm_75")


# --- CPU: the runner's launches on a fake sm_90a family --------------------------------------


class FakeGpu:
    """family_on, the allocator and _core.PreparedLaunch replaced: calls run to their launches,
    which are recorded with the parameter block the kernel would receive."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from aotkernels import _core

        self.family = fake_family("attention", "sm_90a")
        self.struct = self.family.params
        self.names = [name for name, _ in self.family.param_fields]
        self.ptr_names = [name for name, ptype in self.family.param_fields if ptype == "ptr"]
        self.ptr_offsets = self.family.ptr_offsets
        self.launches: list[dict[str, Any]] = []
        self.allocs: list[FakeCudaArray] = []
        monkeypatch.setattr(loader, "family_on", lambda name, dev: self.family)
        monkeypatch.setattr(arrays.Framework, "empty", self._empty)
        monkeypatch.setattr(_core, "PreparedLaunch", self._plan)
        monkeypatch.setattr(_op, "_PLANS", {})
        monkeypatch.delenv(ENV, raising=False)

    def _empty(self, like: Any, shape: Any, dtype: str) -> Any:
        arr = FakeCudaArray(
            shape, arrays.dtype_name(dtype), ptr=0x70000000 + len(self.allocs) * 2**24
        )
        self.allocs.append(arr)
        return arr

    def _plan(
        self,
        symbol: str,
        func: int,
        ctx: int,
        grid: list[int],
        block: list[int],
        smem: int,
        params: bytes,
        ptr_offsets: list[int],
        tmaps: Any = (),
    ) -> Any:
        assert func == self.family.kernels[symbol] and ptr_offsets == self.ptr_offsets
        packed = dict(zip(self.names, self.struct.unpack(params), strict=True))
        rec, ptr_names = self.launches, self.ptr_names

        class Plan:
            def __call__(self, stream: int, *ptrs: int) -> None:
                fields = {**packed, **dict(zip(ptr_names, ptrs, strict=True))}
                rec.append(
                    {
                        "symbol": symbol,
                        "grid": tuple(grid),
                        "block": tuple(block),
                        "smem": smem,
                        "tmaps": unflatten(tmaps),
                        **fields,
                    }
                )

        return Plan()


def test_runner_dense_lse(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(monkeypatch)
    monkeypatch.setenv(ENV, "fa2")
    q, k, v = qkv(b=2, sq=300, sk=500, h=8, hkv=2, d=128)
    out, lse = ak.attention(q, k, v, causal=True, return_lse=True)
    (ln,) = gpu.launches
    assert ln["symbol"] == "ak_attn_fwd_f16_fa2_d128" and ln["grid"] == (3, 8, 2)
    assert (ln["q"], ln["k"], ln["v"]) == (q.ptr, k.ptr, v.ptr)
    assert (ln["out"], ln["lse"]) == (out.ptr, lse.ptr) and out.shape == q.shape
    assert lse.shape == (2, 8, 300) and lse.dtype == "float32"
    assert ln["o_accum"] == ln["cu_seqlens_q"] == ln["block_table"] == 0
    assert ln["flags"] == 32 and ln["window_right"] == 0 and ln["smem"] == 65536


def test_runner_varlen_out(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(monkeypatch)
    q, k, v, cq, ck = varlen_args()
    out = F(q.shape, ptr=0x60000000)
    assert ak.attention_varlen(q, k, v, cq, ck, 20, 30, window=(4, 4), out=out) is out
    (ln,) = gpu.launches
    assert (ln["cu_seqlens_q"], ln["cu_seqlens_k"], ln["out"]) == (cq.ptr, ck.ptr, out.ptr)
    # 20 queries x 4 heads per KV head fill one 128-row tile: packed, one CTA per KV head.
    assert ln["lse"] == 0 and ln["flags"] == 1 | 16 and ln["grid"] == (1, 2, 3)
    assert (ln["window_left"], ln["window_right"], ln["seqlen_q"]) == (4, 4, 20)


@pytest.mark.parametrize("paged", [False, True])
def test_runner_decode_split(monkeypatch: pytest.MonkeyPatch, paged: bool) -> None:
    gpu = FakeGpu(monkeypatch)
    q = F((1, 1, 32, 128), ptr=0x100000)
    if paged:
        kc, vc = F((2048, 64, 8, 128), ptr=0x900000), F((2048, 64, 8, 128), ptr=0x40000000)
        bt = F((1, 2048), "int32", ptr=0x3100000)
    else:
        kc, vc = F((1, 131072, 8, 128), ptr=0x900000), F((1, 131072, 8, 128), ptr=0x40000000)
        bt = None
    lens = F((1,), "int32", ptr=0x3000000)
    out = ak.attention_decode(q, kc, vc, lens, bt, softcap=30.0)
    fwd, comb = gpu.launches
    o_acc, l_acc = gpu.allocs[1:]  # after out: the hidden workspaces
    assert o_acc.shape == (64, 32, 128) and l_acc.shape == (64, 32)
    assert fwd["symbol"] == "ak_attn_fwd_f16_dec_d128" and fwd["grid"] == (1, 8, 64)
    assert comb["symbol"] == "ak_attn_combine_f16_dec_d128" and comb["grid"] == (32, 1, 1)
    assert comb["block"] == (128, 1, 1)
    for ln in (fwd, comb):
        assert (ln["out"], ln["q"], ln["k"], ln["v"]) == (out.ptr, q.ptr, kc.ptr, vc.ptr)
        assert (ln["o_accum"], ln["lse_accum"], ln["seqused_k"]) == (o_acc.ptr, l_acc.ptr, lens.ptr)
        assert ln["block_table"] == (bt.ptr if bt is not None else 0)
        assert ln["flags"] == 2 | 8 | 16 | 64 | (4 if paged else 0)
        assert ln["num_splits"] == 64 and ln["page_size"] == (64 if paged else 0)


def test_runner_decode_no_split(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(monkeypatch)
    q = F((64, 1, 32, 128), ptr=0x100000)
    kc, vc = F((64, 4096, 8, 128), ptr=0x900000), F((64, 4096, 8, 128), ptr=0x50000000)
    ak.attention_decode(q, kc, vc, F((64,), "int32", ptr=0x3000000))
    (ln,) = gpu.launches
    assert ln["o_accum"] == ln["lse_accum"] == 0 and ln["flags"] & 8 == 0
    assert gpu.allocs[1].shape == (0, 64 * 32, 128)
    assert ln["symbol"] == "ak_attn_fwd_f16_dec_d128" and ln["grid"] == (1, 8, 64)
    monkeypatch.setenv(ENV, "fa2")  # forcing a prefill path leaves decode on its own kernel
    ak.attention_decode(q, kc, vc, F((64,), "int32", ptr=0x3000000))
    assert gpu.launches[-1]["symbol"] == "ak_attn_fwd_f16_dec_d128"


# --- CPU: the fa3 path (eligibility, TMA maps) ----------------------------------------------


def test_rank_n_tensor_map_packing() -> None:
    """The flattened form both launch paths decode (src/tensor_map.h): offset, pointer index,
    data type, rank, dims[5], byte strides[4], box[5], unused entries 1 / 0 / 1."""
    m = TensorMap("tmap_q", "q", 10, (128, 8, 300, 2), (256, 2048, 614400), (64, 1, 128, 1))
    assert pack_tensor_map(m, 384, 1) == (
        384, 1, 10, 4, 128, 8, 300, 2, 1, 256, 2048, 614400, 0, 64, 1, 128, 1, 1,
    )  # fmt: skip
    ok = TensorMap("t", "x", 9, (4, 5, 6, 7, 8), (16, 32, 64, 128), (4, 1, 1, 1, 1))
    assert tensor_map_problem(ok) is None and len(pack_tensor_map(ok, 0, 0)) == 18
    for bad, why in (
        (m._replace(strides=(256, 2040, 614400)), "multiples of 16"),
        (m._replace(strides=(256, 0, 614400)), "multiples of 16"),
        (m._replace(strides=(256, 2**40, 16)), "below 2\\*\\*40"),
        (m._replace(dims=(128, 0, 300, 2)), "extents"),
        (m._replace(box=(64, 1, 300, 1)), "box"),
        (m._replace(dims=(1,) * 6, strides=(16,) * 5, box=(1,) * 6), "rank 6"),
    ):
        assert tensor_map_problem(bad) is not None
        with pytest.raises(ValueError, match=why):
            pack_tensor_map(bad, 0, 0)


def test_fa3_maps_dense_and_varlen() -> None:
    q, kv = meta((2, 300, 8, 128), "bf16"), meta((2, 500, 2, 128), "bf16")
    p = validate_dense(q, kv, kv, True, None, None, None, False)
    assert fa3_refusal(p) is None
    mq, mk, mv = fa3_maps(p, 128, 128)
    assert mq == TensorMap("tmap_q", "q", 9, (128, 8, 300, 2), (256, 2048, 614400), (64, 1, 128, 1))
    assert mk.dims == (128, 2, 500, 2) and mk.strides == (256, 512, 256000)
    assert mv.field == "tmap_v" and mv.box == (64, 1, 128, 1)
    # A [B, H, S, D] tensor seen as [B, S, H, D]: strides in any order; extent-1 dims get the
    # span below them (their stride never steps, but the driver checks it).
    qt = Meta((1, 300, 8, 64), (8 * 300 * 64, 64, 300 * 64, 1), "f16", 16)
    p = validate_dense(qt, qt, qt, False, None, None, None, False)
    assert fa3_maps(p, 128, 128)[0].strides == (300 * 128, 128, 300 * 128)
    vq, vk = Meta((50, 8, 64), (512, 64, 1), "f16", 16), Meta((60, 8, 64), (512, 64, 1), "f16", 16)
    cu = Meta((4,), (1,), "int32", 16)
    p = validate_varlen(vq, vk, vk, cu, cu, 20, 30, False, None, None, None, False)
    mq = fa3_maps(p, 128, 128)[0]
    assert mq.dims == (64, 8, 50, 1) and mq.strides == (128, 1024, 51200)


def test_fa3_refusals() -> None:
    def dense(q: Meta, kv: Meta) -> str | None:
        return fa3_refusal(validate_dense(q, kv, kv, False, None, None, None, False))

    assert dense(meta((2, 300, 8, 64)), meta((2, 300, 8, 64))) is None
    assert "head dim 32" in str(dense(meta((2, 300, 8, 32)), meta((2, 300, 8, 32))))
    assert dense(meta((2, 300, 8, 256)), meta((2, 300, 8, 256))) is None
    assert "GQA" in str(dense(meta((2, 16, 8, 128)), meta((2, 300, 2, 128))))
    assert dense(meta((2, 33, 8, 128)), meta((2, 300, 2, 128))) is None  # 132 rows per KV head
    bcast = Meta((2, 300, 8, 64), (0, 512, 64, 1), "f16", 16)
    assert "broadcasts" in str(dense(meta((2, 300, 8, 64)), bcast))
    assert "empty" in str(dense(meta((2, 300, 8, 64)), meta((2, 0, 8, 64))))
    q, kv = meta((1, 1, 8, 128)), meta((1, 4096, 8, 128))
    lens = Meta((1,), (1,), "int32", 16)
    assert "decode" in str(fa3_refusal(validate_decode(q, kv, kv, lens, None, False, None, None)))


@pytest.mark.parametrize(
    ("d", "variant", "units", "block"),
    [
        (64, "fa3_d64_m192_short", 48, 512),  # 6 tiles of 192 rows: 3 pairs
        (72, "fa3_d128", 64, 384),  # 8 tiles of 128 rows: 4 pairs
        (128, "fa3_d128", 64, 384),
        (136, "fa3_d256", 64, 384),
        (32, "fa2_d64", 0, 0),
    ],
)
def test_fa3_variant_by_head_dim(d: int, variant: str, units: int, block: int) -> None:
    q = meta((2, 1000, 8, d))
    p = validate_dense(q, q, q, False, None, None, None, False)
    cfg = configure(p, q.strides, FA3_TILES)
    assert cfg.tile.name == variant
    if variant.startswith("fa3"):
        # one CTA per pair of query tiles (for 8 heads, 2 sequences) without an SM count
        assert cfg.grid == (units, 1, 1) and cfg.block == block and cfg.fields["flags"] & 16 == 0
        sms = configure(p, q.strides, FA3_TILES, sms=48)
        assert sms.grid == (48, 1, 1)  # persistent: at most one CTA per SM


def test_fa3_varlen_grid_one_cta_per_unit() -> None:
    """Varlen units differ in size with the batch's lengths: one CTA per unit (the hardware
    hands the next one to whichever SM frees first), not the dense calls' persistent grid."""
    vq, cu = Meta((5000, 8, 128), (1024, 128, 1), "f16", 16), Meta((5,), (1,), "int32", 16)
    p = validate_varlen(vq, vq, vq, cu, cu, 1000, 1000, False, None, None, None, False)
    cfg = configure(p, vq.strides, FA3_TILES, sms=48)
    # 8 query tiles of 128 rows: 4 pairs, for each of 8 heads and 4 sequences
    assert cfg.tile.name == "fa3_d128" and cfg.grid == (4 * 8 * 4, 1, 1)


def test_fa3_units_of_192_row_tiles() -> None:
    """With 192-row tiles (three consumer warpgroups) an odd tile count pairs the middle tiles
    of two (head, sequence) rows; 128-row tiles keep a unit per middle tile (wgmma.cuh's
    for_each_tile)."""
    q, kv = meta((3, 512, 5, 64)), meta((3, 4096, 5, 64))
    p = validate_dense(q, kv, kv, True, None, None, None, False)
    assert fa3_units(p, 192) == 15 + 8  # 3 tiles: a pair per row, 15 rows' middles in 8 units
    assert fa3_units(p, 128) == 2 * 15  # 4 tiles: two pairs per row
    cfg = configure(p, q.strides, FA3_TILES)
    assert cfg.tile.name == "fa3_d64_m192" and cfg.grid == (23, 1, 1) and cfg.block == 512
    assert configure(p, q.strides, FA3_TILES, sms=16).grid == (16, 1, 1)
    q = meta((2, 768, 4, 64))  # 4 tiles of 192: two pairs per row
    assert fa3_units(validate_dense(q, q, q, False, None, None, None, False), 192) == 2 * 8
    q = meta((2, 300, 4, 64))  # 3 tiles of 128: a pair and a middle tile per row
    assert fa3_units(validate_dense(q, q, q, False, None, None, None, False), 128) == 2 * 8


@pytest.mark.parametrize(
    ("d", "sk", "variant"),
    [
        (64, 2047, "fa3_d64_defer"),
        (64, 2048, "fa3_d64_m192"),
        (128, 511, "fa3_d128_defer"),
        (128, 512, "fa3_d128_qahead"),
        (128, 1023, "fa3_d128_qahead"),
        (128, 1024, "fa3_d128"),
        (128, 8191, "fa3_d128"),
        (128, 8192, "fa3_d128_n176"),
        (256, 4096, "fa3_d256"),
        (256, 9000, "fa3_d256_n80"),
    ],
)
def test_fa3_key_tile_by_key_length(d: int, sk: int, variant: str) -> None:
    """The variant with the largest min_keys the key length reaches: the deferred schedule for
    short masked keys, wider key tiles for long ones (300 causal queries: past every
    min_queries, and min_keys_masked where given)."""
    q, kv = meta((1, 300, 8, d)), meta((1, sk, 8, d))
    p = validate_dense(q, kv, kv, True, None, None, None, False)
    assert configure(p, q.strides, FA3_TILES).tile.name == variant


@pytest.mark.parametrize(
    ("sk", "causal", "window", "variant"),
    [
        (1, False, None, "fa3_d128"),
        (511, False, None, "fa3_d128"),
        (511, True, None, "fa3_d128_defer"),
        (512, True, None, "fa3_d128_qahead"),
        (1023, False, None, "fa3_d128"),
        (1023, True, None, "fa3_d128_qahead"),
        (1024, True, None, "fa3_d128"),
        (511, False, (-1, 5), "fa3_d128_defer"),
        (512, False, (-1, 5), "fa3_d128_qahead"),
        (1024, False, (-1, 5), "fa3_d128"),
        (8192, False, None, "fa3_d128_n176"),
    ],
)
def test_fa3_d128_schedule_by_mask_and_lengths(
    sk: int, causal: bool, window: tuple[int, int] | None, variant: str
) -> None:
    """d 128: the plain schedule for every call without a mask (min_keys 1 beats the deferred
    one's 0), the deferred one for masked calls below 512 keys (min_keys_masked), the plain one
    with Q loaded a tile ahead (masked_only) for masked calls of 512-1023 keys."""
    q, kv = meta((1, 300, 8, 128)), meta((1, sk, 8, 128))
    p = validate_dense(q, kv, kv, causal, None, window, None, False)
    assert configure(p, q.strides, FA3_TILES).tile.name == variant


@pytest.mark.parametrize(
    ("sq", "sk", "causal", "window", "variant"),
    [
        (300, 1, False, None, "fa3_d64_m192_short"),
        (300, 1023, False, None, "fa3_d64_m192_short"),
        (300, 1024, False, None, "fa3_d64_m192"),
        (300, 1023, True, None, "fa3_d64_defer"),
        (300, 2047, True, None, "fa3_d64_defer"),
        (300, 2048, True, None, "fa3_d64_m192"),
        (300, 2047, False, (300, 200), "fa3_d64_defer"),
        (300, 2047, False, (-1, 5), "fa3_d64_defer"),
        (300, 2048, False, (-1, 5), "fa3_d64_m192"),
        (191, 4096, False, None, "fa3_d64"),
        (192, 4096, False, None, "fa3_d64_m192"),
        (191, 4096, True, None, "fa3_d64_defer"),
        (1, 1, False, None, "fa3_d64"),
        (1, 1, True, None, "fa3_d64_defer"),
    ],
)
def test_fa3_d64_query_tile_by_mask_and_lengths(
    sq: int, sk: int, causal: bool, window: tuple[int, int] | None, variant: str
) -> None:
    """d 64's 192-row query tile: min_keys_masked replaces its min_keys for calls with a causal
    mask or a window on either side; min_queries keeps it from queries shorter than one tile.
    Calls without a mask take it without q_ahead below 1024 keys (fa3_d64_m192_short, never
    a masked call: unmasked_only). Below those bounds the deferred 128-row tile runs masked
    calls (min_keys 1 beats fa3_d64's 0) and never one without a mask (masked_only), which
    fa3_d64 keeps."""
    q, kv = meta((1, sq, 8, 64)), meta((1, sk, 8, 64))
    p = validate_dense(q, kv, kv, causal, None, window, None, False)
    assert configure(p, q.strides, FA3_TILES).tile.name == variant


def test_runner_fa3(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu(monkeypatch)
    if not any(v["path"] == "fa3" for v in gpu.family.variants.values()):
        pytest.skip("this build's sm_90a image has no fa3 variants")
    q, k, v = qkv(b=2, sq=300, sk=500, h=8, hkv=2, d=128)
    ak.attention(q, k, v, causal=True, return_lse=True)
    (ln,) = gpu.launches
    assert ln["symbol"] == "ak_attn_fwd_f16_fa3_d128_defer" and ln["grid"] == (32, 1, 1)
    assert ln["block"] == (384, 1, 1) and ln["flags"] == 32 | 128  # write_lse, tma_out
    assert ln["smem"] == gpu.family.variants["fa3_d128_defer"]["smem"]
    off = gpu.family.field_offsets
    ptr_index = {n: i for i, n in enumerate(gpu.ptr_names)}
    tq, tk, tv, to = ln["tmaps"]
    assert tq[:4] == (off["tmap_q"], ptr_index["q"], 6, 4)  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16
    assert tq[4:] == (128, 8, 300, 2, 1, 256, 2048, 614400, 0, 64, 1, 128, 1, 1)
    assert tk[:2] == (off["tmap_k"], ptr_index["k"]) and tk[4:8] == (128, 2, 500, 2)
    assert tv[:2] == (off["tmap_v"], ptr_index["v"])
    # The output's map: one consumer warp's 16 rows per box, the output's own strides.
    assert to[:4] == (off["tmap_o"], ptr_index["out"], 6, 4)
    assert to[4:] == (128, 8, 300, 2, 1, 256, 2048, 614400, 0, 64, 1, 16, 1, 1)
    gpu.launches.clear()
    monkeypatch.setenv(ENV, "fa2")
    ak.attention(q, k, v, causal=True)
    assert (
        gpu.launches[-1]["symbol"] == "ak_attn_fwd_f16_fa2_d128" and not gpu.launches[-1]["tmaps"]
    )
    monkeypatch.setenv(ENV, "fa3")
    with pytest.raises(
        NotImplementedError, match=r"AOTKERNELS_ATTENTION_PATH=fa3, but head dim 32"
    ):
        ak.attention(*qkv(d=32, sq=300))
    with pytest.raises(NotImplementedError, match=r"fa3, but decode"):
        ak.attention_decode(
            F((1, 1, 8, 64), ptr=0x100000), F((1, 64, 8, 64), ptr=0x900000),
            F((1, 64, 8, 64), ptr=0x1900000), F((1,), "int32", ptr=0x3000000),
        )  # fmt: skip


# --- CPU: the torch front end (schemas, fake implementations) --------------------------------


def test_torch_schemas() -> None:
    pytest.importorskip("torch")
    from aotkernels import _torch
    from aotkernels.ops._op import REGISTRY

    common = "bool causal=False, float? scale=None, int[]? window=None, float? softcap=None"
    assert _torch.schema(REGISTRY["attention"]) == (
        f"attention(Tensor q, Tensor k, Tensor v, {common}) -> Tensor"
    )
    assert _torch.schema(REGISTRY["attention_lse"]).endswith("-> (Tensor, Tensor)")
    assert _torch.schema(REGISTRY["attention_varlen"]) == (
        "attention_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor "
        f"cu_seqlens_k, int max_seqlen_q=0, int max_seqlen_k=0, {common}) -> Tensor"
    )
    assert _torch.schema(REGISTRY["attention_decode"]) == (
        "attention_decode(Tensor q, Tensor k_cache, Tensor v_cache, Tensor cache_seqlens, "
        "Tensor? block_table=None, bool causal=False, float? scale=None, float? softcap=None) "
        "-> Tensor"
    )


def test_torch_fake_impls() -> None:
    """What torch.compile sees: shapes and dtypes from the declarations, checks included."""
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from aotkernels import _torch

    _torch.register()
    ops = torch.ops.aotkernels
    bf, i32 = torch.bfloat16, torch.int32
    with FakeTensorMode():
        q = torch.empty(2, 300, 8, 128, device="cuda", dtype=bf)
        k = torch.empty(2, 500, 2, 128, device="cuda", dtype=bf)
        out = ops.attention(q, k, k, True, None, [64, 0], 30.0)
        assert out.shape == q.shape and out.dtype == bf and out.device.type == "cuda"
        out, lse = ops.attention_lse(q, k, k)
        assert lse.shape == (2, 8, 300) and lse.dtype == torch.float32
        qp = torch.empty(600, 8, 128, device="cuda", dtype=bf)
        kp = torch.empty(1000, 2, 128, device="cuda", dtype=bf)
        cu = torch.empty(3, device="cuda", dtype=i32)
        out, lse = ops.attention_varlen_lse(qp, kp, kp, cu, cu, 300, 500)
        assert out.shape == (600, 8, 128) and lse.shape == (8, 600)
        pages = torch.empty(100, 64, 2, 128, device="cuda", dtype=bf)
        bt = torch.empty(2, 50, device="cuda", dtype=i32)
        lens = torch.empty(2, device="cuda", dtype=i32)
        q1 = torch.empty(2, 1, 8, 128, device="cuda", dtype=bf)
        out = ops.attention_decode(q1, pages, pages, lens, bt)
        assert out.shape == (2, 1, 8, 128)
        with pytest.raises(ValueError, match=r"attention: window sides must be >= 0"):
            ops.attention(q, k, k, False, None, [-3, 0])
        with pytest.raises(ValueError, match=r"attention_decode: q.shape\[1\] .* at most 16"):
            ops.attention_decode(q, pages, pages, lens, bt)


# --- GPU ------------------------------------------------------------------------------------


def _torch() -> Any:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    return torch


def rand(*shape: int, dtype: Any, scale: float = 1.0) -> Any:
    torch = _torch()
    return (torch.randn(*shape, device="cuda") * scale).to(dtype)


def check(q: Any, k: Any, v: Any, **kw: Any) -> None:
    torch = _torch()
    out, lse = ak.attention(q, k, v, return_lse=True, **kw)
    ref, ref_lse = reference(q, k, v, **kw)
    torch.testing.assert_close(out.float(), ref, **tol(q.dtype))
    torch.testing.assert_close(lse, ref_lse, **LSE_TOL)


SEQS = [
    (1, 1),
    (17, 17),
    (128, 128),
    (1000, 1000),
    (4097, 4097),
    (1, 4097),
    (17, 1000),
    (1000, 17),
    (128, 4097),
    (4097, 128),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize(("sq", "sk"), SEQS)
@pytest.mark.parametrize("causal", [False, True])
def test_dense(dtype: str, d: int, sq: int, sk: int, causal: bool) -> None:
    torch = _torch()
    torch.manual_seed(sq * 7 + sk + d)
    dt = getattr(torch, dtype)
    b, h = (1, 2) if sq * sk > 10**6 else (2, 3)
    check(
        rand(b, sq, h, d, dtype=dt),
        rand(b, sk, h, d, dtype=dt),
        rand(b, sk, h, d, dtype=dt),
        causal=causal,
    )


@pytest.mark.gpu
@pytest.mark.parametrize(("d", "sk"), [(64, 2100), (128, 16400), (256, 8200)])
@pytest.mark.parametrize("causal", [False, True])
def test_wide_key_tiles(d: int, sk: int, causal: bool) -> None:
    """Key lengths past the min_keys of fa3's wider key tiles (arch_matrix.toml), each ending in
    a partial tile (on the fa2 path, the same calls on FA2)."""
    torch = _torch()
    torch.manual_seed(sk + d)
    q, k, v = (rand(1, n, 2, d, dtype=torch.bfloat16) for n in (300, sk, sk))
    check(q, k, v, causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize(
    ("causal", "window"), [(False, None), (True, None), (False, (200, 100)), (True, (300, 0))]
)
def test_persistent_grid_many_units(d: int, causal: bool, window: tuple[int, int] | None) -> None:
    """More work units than SMs, so that each CTA of fa3's persistent grid walks several (and
    reads the next one's inputs ahead); 5 query tiles of 128 per head, the middle one unpaired;
    GQA; bitwise equal when repeated."""
    torch = _torch()
    torch.manual_seed(d + 7 * causal)
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    h, hkv, n = 4, 2, 600
    b = -(-2 * sms // (3 * h))  # 3 units per (sequence, head): twice the SMs
    q = rand(b, n, h, d, dtype=torch.bfloat16)
    k, v = (rand(b, n, hkv, d, dtype=torch.bfloat16) for _ in range(2))
    check(q, k, v, causal=causal, window=window)
    first = ak.attention(q, k, v, causal=causal, window=window)
    assert torch.equal(first, ak.attention(q, k, v, causal=causal, window=window))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("d", "sk"), [(64, 2047), (64, 2048), (128, 1023), (128, 1024)])
def test_key_length_bounds_of_variants(dtype: str, d: int, sk: int) -> None:
    """Key lengths on both sides of a bound between the fa3 variants of a head dim (arch_matrix.toml
    min_keys_masked: d 64's deferred 128-row and its 192-row query tiles, d 128's deferred and
    plain schedules; on the fa2 path, the same calls on FA2): causal, window, softcap, GQA, the
    LSE, bitwise repeats; a varlen batch whose longest sequence has sk keys."""
    torch = _torch()
    torch.manual_seed(d + sk)
    dt = getattr(torch, dtype)
    q = rand(3, 700, 8, d, dtype=dt)
    k, v = (rand(3, sk, 2, d, dtype=dt) for _ in range(2))
    for kw in ({}, {"causal": True}, {"window": (300, 200)}, {"causal": True, "softcap": 30.0}):
        check(q, k, v, **kw)
        assert torch.equal(ak.attention(q, k, v, **kw), ak.attention(q, k, v, **kw))
    lens = [300, 0, sk, 1, sk - 129]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    vq, vk, vv = (rand(sum(lens), h, d, dtype=dt) for h in (8, 2, 2))
    out, lse = ak.attention_varlen(vq, vk, vv, cu, cu, sk, sk, causal=True, return_lse=True)
    for i, n in enumerate(lens):
        at = slice(cu[i].item(), cu[i + 1].item())
        if n:
            ref, ref_lse = reference(vq[None, at], vk[None, at], vv[None, at], causal=True)
            torch.testing.assert_close(out[at].float(), ref[0], **tol(dt))
            torch.testing.assert_close(lse[:, at], ref_lse[0], **LSE_TOL)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("sq", "sk"), [(191, 191), (193, 150), (400, 450), (577, 577), (700, 2100)]
)
@pytest.mark.parametrize("causal", [False, True])
def test_query_tiles_of_three_consumers(dtype: str, sq: int, sk: int, causal: bool) -> None:
    """d 64 query lengths off a multiple of 192, on both sides of the 192-row query tile's
    bounds (three consumer warpgroups of 64, arch_matrix.toml: 192 queries, and 2048 keys for a
    causal call), so that the last tile of a sequence has one or two warpgroups without a row;
    Sq != Sk (the causal mask aligned bottom-right); GQA, the LSE, bitwise repeats (on the fa2
    path, the same calls on FA2)."""
    torch = _torch()
    torch.manual_seed(sq + 3 * sk + causal)
    dt = getattr(torch, dtype)
    q = rand(2, sq, 6, 64, dtype=dt)
    k, v = (rand(2, sk, 2, 64, dtype=dt) for _ in range(2))
    check(q, k, v, causal=causal)
    assert torch.equal(ak.attention(q, k, v, causal=causal), ak.attention(q, k, v, causal=causal))


@pytest.mark.gpu
@pytest.mark.parametrize("window", [None, (500, 0)])
def test_three_consumers_causal_many_units(window: tuple[int, int] | None) -> None:
    """Causal d 64 calls on the 192-row query tile (2100 keys, past its min_keys_masked) with
    twice as many work units as SMs: a consumer passes the key tiles above the diagonal that
    none of its rows sees (skip_dark) and the last tile's third consumer every one, while the
    producer loads each tile's Q during the previous one (q_ahead), across the persistent grid;
    GQA, the LSE, bitwise repeats."""
    torch = _torch()
    torch.manual_seed(2100 + (window is None))
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    h, n = 2, 2100
    b = -(-4 * sms // (11 * h))  # 11 query tiles of 192: 5.5 units per (sequence, head)
    q = rand(b, n, h, 64, dtype=torch.bfloat16)
    k, v = (rand(b, n, 1, 64, dtype=torch.bfloat16) for _ in range(2))
    check(q, k, v, causal=True, window=window)
    first = ak.attention(q, k, v, causal=True, window=window)
    assert torch.equal(first, ak.attention(q, k, v, causal=True, window=window))


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_varlen_many_sequences_d64(causal: bool) -> None:
    """A varlen batch of 24 sequences whose lengths straddle multiples of 64 and 192 (the fa3
    d 64 query tile and its consumers' rows), keys longer or shorter than queries, one CTA per
    work unit; each sequence against the fp32 reference, the LSE too."""
    torch = _torch()
    torch.manual_seed(11 + causal)
    dt = torch.bfloat16
    lq = [1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 383, 384, 385, 400, 577]
    lq += [0, 1000, 2, 190, 194, 31]
    lk = [n + (37 * i) % 101 - 40 if n > 50 else n for i, n in enumerate(lq)]
    h, hkv, d = 4, 2, 64
    cq = torch.tensor([0, *torch.tensor(lq).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    ck = torch.tensor([0, *torch.tensor(lk).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q = rand(sum(lq), h, d, dtype=dt)
    k, v = (rand(sum(lk), hkv, d, dtype=dt) for _ in range(2))
    args = (q, k, v, cq, ck, max(lq), max(lk))
    out, lse = ak.attention_varlen(*args, causal=causal, return_lse=True)
    assert torch.equal(out, ak.attention_varlen(*args, causal=causal))
    for i in range(len(lq)):
        qs, ks = slice(cq[i].item(), cq[i + 1].item()), slice(ck[i].item(), ck[i + 1].item())
        if lq[i] == 0:
            continue
        ref, ref_lse = reference(q[None, qs], k[None, ks], v[None, ks], causal=causal)
        torch.testing.assert_close(out[qs].float(), ref[0], **tol(dt))
        torch.testing.assert_close(lse[:, qs], ref_lse[0], **LSE_TOL)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize(("sq", "sk"), [(1, 1000), (17, 128), (1000, 1000), (128, 4097)])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa(dtype: str, group: int, sq: int, sk: int, causal: bool) -> None:
    torch = _torch()
    torch.manual_seed(group + sq)
    dt = getattr(torch, dtype)
    hkv = 2
    check(
        rand(2, sq, hkv * group, 128, dtype=dt),
        rand(2, sk, hkv, 128, dtype=dt),
        rand(2, sk, hkv, 128, dtype=dt),
        causal=causal,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("window", [(0, 0), (16, 16), (100, -1), (-1, 40), (300, 0), (5, 2000)])
@pytest.mark.parametrize(("sq", "sk"), [(1000, 1000), (17, 1000), (1000, 17), (4097, 4097)])
@pytest.mark.parametrize("causal", [False, True])
def test_windows(dtype: str, window: tuple[int, int], sq: int, sk: int, causal: bool) -> None:
    torch = _torch()
    torch.manual_seed(sq + window[0])
    dt = getattr(torch, dtype)
    check(
        rand(1, sq, 4, 64, dtype=dt),
        rand(1, sk, 2, 64, dtype=dt),
        rand(1, sk, 2, 64, dtype=dt),
        causal=causal,
        window=window,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("softcap", [1.0, 30.0, 50.0])
def test_softcap(dtype: str, d: int, softcap: float) -> None:
    torch = _torch()
    torch.manual_seed(d)
    dt = getattr(torch, dtype)
    # Logits of a few tens, so that the cap bends them.
    q, k, v = (
        rand(2, 300, 4, d, dtype=dt, scale=3.0),
        rand(2, 500, 2, d, dtype=dt, scale=3.0),
        rand(2, 500, 2, d, dtype=dt),
    )
    check(q, k, v, softcap=softcap, causal=True)
    check(q, k, v, softcap=softcap, scale=0.3)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [8, 32, 80, 96, 136, 200])
def test_padded_head_dims(dtype: str, d: int) -> None:
    torch = _torch()
    dt = getattr(torch, dtype)
    check(
        rand(2, 129, 4, d, dtype=dt),
        rand(2, 77, 4, d, dtype=dt),
        rand(2, 77, 4, d, dtype=dt),
        causal=True,
    )


@pytest.mark.gpu
def test_strided_inputs_and_out() -> None:
    """q, k, v as views of one packed qkv projection, a batch-broadcast v, a strided out=."""
    torch = _torch()
    qkv_ = rand(2, 300, 3, 8, 128, dtype=torch.bfloat16)
    q, k = qkv_[:, :, 0], qkv_[:, :, 1, :2]
    v = rand(1, 300, 2, 128, dtype=torch.bfloat16).expand(2, -1, -1, -1)
    big = torch.full((2, 8, 300, 256), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = big[..., :128].transpose(1, 2)  # [B, S, H, D] with strides (8*300*256, 256, 300*256, 1)
    res = ak.attention(q, k, v, causal=True, out=out)
    assert res is out
    ref, _ = reference(q, k, v, causal=True)
    torch.testing.assert_close(out.float(), ref, **tol(torch.bfloat16))
    assert big[..., 128:].isnan().all()  # nothing written outside out


@pytest.mark.gpu
@pytest.mark.parametrize("mapped", [True, False])
@pytest.mark.parametrize("d", [64, 96, 128])
def test_output_staging(monkeypatch: pytest.MonkeyPatch, d: int, mapped: bool) -> None:
    """fa3's epilogue through shared memory: the TMA store of each warp's 16 rows (the dense map
    clipping a last warp that crosses the sequence's end; a padded head dim clipped at d), and
    the 16-byte copies that replace it where a varlen warp crosses its sequence's end (and, with
    no output map, everywhere). A strided out= keeps NaN in every element it does not own, the
    LSE matches, a repeat is bitwise equal."""
    torch = _torch()
    if not mapped:  # as for an output the driver could not map
        # The module, not the op of the same name that aotkernels.ops exports.
        module = sys.modules["aotkernels.ops.attention"]
        monkeypatch.setattr(module, "_fa3_out_map", lambda p, out: None)
    dt = torch.bfloat16
    extra = 0 if mapped else 8  # a unique shape per case: each one configures its own launch
    sq, sk = 211 + d + extra, 300
    q = rand(2, sq, 4, d, dtype=dt)
    k, v = rand(2, sk, 2, d, dtype=dt), rand(2, sk, 2, d, dtype=dt)
    big = torch.full((2, 4, sq, d + 40), float("nan"), device="cuda", dtype=dt)
    out = big[..., :d].transpose(1, 2)
    for causal in (False, True):
        big.fill_(float("nan"))
        assert ak.attention(q, k, v, causal=causal, out=out) is out
        ref, ref_lse = reference(q, k, v, causal=causal)
        torch.testing.assert_close(out.float(), ref, **tol(dt))
        assert big[..., d:].isnan().all()
        again, lse = ak.attention(q, k, v, causal=causal, return_lse=True)
        assert torch.equal(again, out)
        torch.testing.assert_close(lse, ref_lse, **LSE_TOL)
    lq, lk = [17, 1, 200, 0, 33, 130], [40, 9, 200, 5, 33, 700]
    cq = torch.tensor([0, *torch.tensor(lq).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    ck = torch.tensor([0, *torch.tensor(lk).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q = rand(sum(lq), 4, d, dtype=dt)
    k, v = rand(sum(lk), 2, d, dtype=dt), rand(sum(lk), 2, d, dtype=dt)
    out = torch.full_like(q, float("nan"))
    ak.attention_varlen(q, k, v, cq, ck, max(lq) + d + extra, max(lk), causal=True, out=out)
    for i in range(len(lq)):
        qs, ks = slice(cq[i].item(), cq[i + 1].item()), slice(ck[i].item(), ck[i + 1].item())
        if lq[i]:
            ref, _ = reference(q[None, qs], k[None, ks], v[None, ks], causal=True)
            torch.testing.assert_close(out[qs].float(), ref[0], **tol(dt))


@pytest.mark.gpu
def test_fully_masked_rows() -> None:
    """Causal with Sq > Sk (bottom-right): the first Sq - Sk rows see no key; a window that
    ends before the first key; Sk = 0."""
    torch = _torch()
    q, k, v = (
        rand(2, 150, 4, 64, dtype=torch.float16),
        rand(2, 20, 4, 64, dtype=torch.float16),
        rand(2, 20, 4, 64, dtype=torch.float16),
    )
    out, lse = ak.attention(q, k, v, causal=True, return_lse=True)
    assert (out[:, :130] == 0).all() and (lse[:, :, :130] == float("-inf")).all()
    assert not out.isnan().any() and lse[:, :, 130:].isfinite().all()
    check(q, k, v, causal=True)
    out, lse = ak.attention(q, k, v, window=(3, 0), return_lse=True)  # keys i - 133 .. i - 130
    assert (out[:, :130] == 0).all() and (lse[:, :, :130] == float("-inf")).all()
    check(q, k, v, window=(3, 0))
    empty_k = k[:, :0]
    out, lse = ak.attention(q, empty_k, empty_k, return_lse=True)
    assert (out == 0).all() and (lse == float("-inf")).all()


@pytest.mark.gpu
def test_nan_in_v_propagates() -> None:
    torch = _torch()
    q, k, v = (rand(1, 200, 2, 128, dtype=torch.bfloat16) for _ in range(3))
    v[0, 57, 1, 3] = float("nan")
    out = ak.attention(q, k, v)
    assert out[0, :, 1, 3].isnan().all()
    assert not out[0, :, 0].isnan().any() and not out[0, :, 1, 4:].isnan().any()
    causal = ak.attention(q, k, v, causal=True)
    assert causal[0, 57:, 1, 3].isnan().all()  # rows that see key 57
    # Earlier rows of the same key tile multiply it by a probability of 0: NaN as well, as in
    # the reference (0 * NaN); rows whose tiles never reach key 57 stay finite.
    assert not causal[0, :, 0].isnan().any() and not causal[0, :, 1, 4:].isnan().any()


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128, 256])
def test_nan_in_k_propagates(d: int) -> None:
    """A NaN in key 5 makes every score of it NaN: the rows that see it are NaN throughout, as
    in the reference, and no other row is. fa3 walks key tiles from the last, so key 5's tile
    comes late, where its first columns are exponentiated before the row max (early_exp)."""
    torch = _torch()
    q, k, v = (rand(1, 600, 2, d, dtype=torch.bfloat16) for _ in range(3))
    k[0, 5, 1, 0] = float("nan")
    out = ak.attention(q, k, v)
    assert out[0, :, 1].isnan().all() and not out[0, :, 0].isnan().any()
    causal = ak.attention(q, k, v, causal=True)
    assert causal[0, 5:, 1].isnan().all()
    assert not causal[0, :5, 1].isnan().any() and not causal[0, :, 0].isnan().any()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_large_logits(dtype: str, d: int, causal: bool) -> None:
    """Logits in the thousands: the running max keeps every exponential in range, and the
    exponentials fa3 computes by polynomial (arguments far below -126 included) match the
    reference's, LSE too."""
    torch = _torch()
    dt = getattr(torch, dtype)
    check(
        rand(1, 500, 2, d, dtype=dt, scale=20.0),
        rand(1, 700, 2, d, dtype=dt, scale=20.0),
        rand(1, 700, 2, d, dtype=dt),
        causal=causal,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("rise", [7.0, 9.0, 60.0])
def test_max_rising_in_late_key_tiles(dtype: str, d: int, rise: float) -> None:
    """The first 200 keys' logits lie `rise` (log2 units) above the others', and fa3 walks key
    tiles from the last to the first: each row's maximum rises after its first tiles, by less
    than fa3's slack for its reference maximum (probabilities up to 2^7 in P, f16 included) or
    by more (the reference moves and O and the sum are rescaled). Output and LSE match the
    reference, causal too (bottom-right: every row sees those keys)."""
    torch = _torch()
    dt = getattr(torch, dtype)
    q = rand(2, 300, 2, d, dtype=dt, scale=0.1)  # the other logits stay within about +-0.1
    k, v = rand(2, 1000, 2, d, dtype=dt), rand(2, 1000, 2, d, dtype=dt)
    q[..., 0] = 1.0
    k[..., 0] = 0.0
    k[:, :200, :, 0] = rise * math.sqrt(d) / math.log2(math.e)  # the default scale is d^-1/2
    for causal in (False, True):
        check(q, k, v, causal=causal)


@pytest.mark.gpu
def test_bitwise_repeatable() -> None:
    torch = _torch()
    q, k, v = (
        rand(2, 1000, 8, 128, dtype=torch.bfloat16),
        rand(2, 3000, 2, 128, dtype=torch.bfloat16),
        rand(2, 3000, 2, 128, dtype=torch.bfloat16),
    )
    a = ak.attention(q, k, v, causal=True, window=(500, 0), softcap=30.0)
    b = ak.attention(q, k, v, causal=True, window=(500, 0), softcap=30.0)
    assert torch.equal(a, b)
    lens = torch.tensor([3000, 1234], device="cuda", dtype=torch.int32)
    d1 = ak.attention_decode(q[:, :1], k, v, lens)
    d2 = ak.attention_decode(q[:, :1], k, v, lens)
    assert torch.equal(d1, d2)


@pytest.mark.gpu
def test_forced_path_and_image() -> None:
    torch = _torch()
    q = rand(1, 64, 2, 64, dtype=torch.float16)
    os.environ[ENV] = "fa2"
    try:
        check(q, q, q, causal=True)
    finally:
        del os.environ[ENV]
    fam = loader.family_on("attention", 0)
    major, minor = torch.cuda.get_device_capability(0)
    if (major, minor) == (9, 0):
        assert fam.choice.target == "sm_90a"
    os.environ[ENV] = "wgmma"
    try:
        with pytest.raises(ValueError, match="AOTKERNELS_ATTENTION_PATH must be one of fa3, fa2"):
            ak.attention(q, q, q)
    finally:
        del os.environ[ENV]


@pytest.mark.gpu
def test_fa3_is_the_default_on_sm90a(attn_path: str) -> None:
    """On an H200 the auto path really runs fa3 for the calls it takes (so that the GPU tests'
    ``auto`` runs cover it), and forcing fa3 there gives the same results."""
    torch = _torch()
    if torch.cuda.get_device_capability(0) != (9, 0):
        pytest.skip("fa3 exists in the sm_90a image only")
    from aotkernels.ops.attention import _tiles

    fam = loader.family_on("attention", 0)
    q = meta((2, 1000, 8, 128), "bf16")
    p = validate_dense(q, q, q, True, None, None, None, False)
    cfg = configure(p, q.strides, _tiles(fam, "bf16"))
    assert cfg.tile.path == ("fa2" if attn_path == "fa2" else "fa3")
    if attn_path == "fa2":
        return
    x = rand(2, 1000, 8, 128, dtype=torch.bfloat16)
    auto = ak.attention(x, x, x, causal=True)
    os.environ[ENV] = "fa3"
    try:
        forced = ak.attention(x, x, x, causal=True)
    finally:
        del os.environ[ENV]
    assert torch.equal(auto, forced)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["bhsd", "qkv_packed", "padded_rows"])
def test_strided_layouts(dtype: str, layout: str) -> None:
    """Layouts a TMA map takes with strides in any order: [B, H, S, D] storage seen as
    [B, S, H, D], q / k / v sliced from one packed projection, rows padded past D."""
    torch = _torch()
    dt = getattr(torch, dtype)
    if layout == "bhsd":
        q, k, v = (rand(2, 4, 333, 128, dtype=dt).transpose(1, 2) for _ in range(3))
    elif layout == "qkv_packed":
        qkv_ = rand(2, 333, 3, 4, 64, dtype=dt)
        q, k, v = qkv_[:, :, 0], qkv_[:, :, 1], qkv_[:, :, 2]
    else:
        q, k, v = (rand(2, 333, 4, 136, dtype=dt)[..., :128] for _ in range(3))
    check(q, k, v, causal=True)
    check(q, k, v)


@pytest.mark.gpu
def test_misaligned_falls_back() -> None:
    """A base off 16 bytes cannot be a TMA map (nor an FA2 16-byte load): a clear error."""
    torch = _torch()
    buf = rand(2 * 300 * 4 * 64 + 1, dtype=torch.float16)
    q = buf[1:].view(2, 300, 4, 64)
    with pytest.raises(ValueError, match=r"q must be 16-byte aligned"):
        ak.attention(q, q, q)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [None, (64, 0)])
def test_varlen(dtype: str, causal: bool, window: Any) -> None:
    torch = _torch()
    dt = getattr(torch, dtype)
    lq = [0, 1, 17, 300, 0, 1000, 5, 128]
    lk = [5, 1, 40, 300, 0, 1000, 0, 4097]
    h, hkv, d = 8, 2, 128
    cq = torch.tensor([0, *torch.tensor(lq).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    ck = torch.tensor([0, *torch.tensor(lk).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q, k, v = (
        rand(sum(lq), h, d, dtype=dt),
        rand(sum(lk), hkv, d, dtype=dt),
        rand(sum(lk), hkv, d, dtype=dt),
    )
    out = torch.full_like(q, float("nan"))
    args = (q, k, v, cq, ck, max(lq), max(lk))
    res = ak.attention_varlen(*args, causal=causal, window=window, out=out)
    with_lse, lse = ak.attention_varlen(*args, causal=causal, window=window, return_lse=True)
    assert res is out and lse.shape == (h, sum(lq)) and torch.equal(with_lse, out)
    for i in range(len(lq)):
        qs, ks = slice(cq[i].item(), cq[i + 1].item()), slice(ck[i].item(), ck[i + 1].item())
        if lq[i] == 0:
            continue
        ref, ref_lse = reference(
            q[None, qs], k[None, ks], v[None, ks], causal=causal, window=window
        )
        torch.testing.assert_close(out[qs].float(), ref[0], **tol(dt))
        torch.testing.assert_close(lse[:, qs], ref_lse[0], **LSE_TOL)


@pytest.mark.gpu
def test_varlen_neighbour_values_never_leak() -> None:
    """A sequence's last key tile reaches into the next sequence's rows: infinite V values
    there (probability 0) must not make NaN of this sequence's output."""
    torch = _torch()
    lens = [200, 300]
    cu = torch.tensor([0, 200, 500], dtype=torch.int32, device="cuda")
    q, k, v = (rand(500, 4, 128, dtype=torch.bfloat16) for _ in range(3))
    v[200:] = float("inf")
    out = ak.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=True)
    ref, _ = reference(q[None, :200], k[None, :200], v[None, :200], causal=True)
    torch.testing.assert_close(out[:200].float(), ref[0], **tol(torch.bfloat16))


def _paged(k: Any, v: Any, lens: list[int], page: int, gen: Any) -> tuple[Any, Any, Any]:
    """Scatter contiguous caches [B, S, Hkv, D] into shuffled pages; the block table."""
    torch = _torch()
    b, s, hkv, d = k.shape
    per = math.ceil(s / page)
    perm = torch.randperm(b * per + 3, generator=gen)[: b * per].reshape(b, per)
    kp = torch.full((b * per + 3, page, hkv, d), float("nan"), device="cuda", dtype=k.dtype)
    vp = kp.clone()
    for i in range(b):
        for j in range(math.ceil(lens[i] / page)):
            n = min(page, lens[i] - j * page)
            kp[perm[i, j], :n] = k[i, j * page : j * page + n]
            vp[perm[i, j], :n] = v[i, j * page : j * page + n]
    return kp, vp, perm.to(device="cuda", dtype=torch.int32)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("page", [None, 16, 64, 256])
@pytest.mark.parametrize(("sq", "group"), [(1, 8), (4, 4), (16, 1)])
def test_decode(dtype: str, d: int, page: int | None, sq: int, group: int) -> None:
    """Cache lengths 1, 700 and 5000 (not page multiples); positions past a sequence's length
    hold NaN in the paged cache, which must never be read."""
    torch = _torch()
    gen = torch.Generator().manual_seed(d + sq)
    dt = getattr(torch, dtype)
    lens = [1 + sq, 700, 5000]
    b, hkv, smax = 3, 2, 5000
    q = rand(b, sq, hkv * group, d, dtype=dt)
    k, v = rand(b, smax, hkv, d, dtype=dt), rand(b, smax, hkv, d, dtype=dt)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    for causal in (False, True):
        if page is None:
            out = ak.attention_decode(q, k, v, seqlens, causal=causal)
        else:
            kp, vp, bt = _paged(k, v, lens, page, gen)
            out = ak.attention_decode(q, kp, vp, seqlens, bt, causal=causal)
        for i in range(b):
            ref, _ = reference(
                q[i : i + 1], k[i : i + 1, : lens[i]], v[i : i + 1, : lens[i]], causal=causal
            )
            torch.testing.assert_close(out[i : i + 1].float(), ref, **tol(dt))


@pytest.mark.gpu
@pytest.mark.parametrize("page", [None, 24, 40])
def test_decode_tile_warp_and_split_edges(page: int | None) -> None:
    """Lengths on either side of a 16-key tile and of the tiles a CTA's warps share, over split
    and unsplit launches; pages that are no multiple of the tile (a tile then spans two pages);
    block-table entries past each sequence's pages that point far outside the cache, which the
    kernel must never read."""
    torch = _torch()
    gen = torch.Generator().manual_seed(page or 0)
    lens = [1, 15, 16, 17, 33, 48, 65, 2000, 9001]
    b, hkv, group, d = len(lens), 2, 4, 128
    q = rand(b, 1, hkv * group, d, dtype=torch.bfloat16)
    k = rand(b, max(lens), hkv, d, dtype=torch.bfloat16)
    v = rand(b, max(lens), hkv, d, dtype=torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    if page is None:
        out = ak.attention_decode(q, k, v, seqlens)
    else:
        kp, vp, bt = _paged(k, v, lens, page, gen)
        for i, n in enumerate(lens):
            bt[i, math.ceil(n / page) :] = 2**30
        out = ak.attention_decode(q, kp, vp, seqlens, bt)
    for i, n in enumerate(lens):
        ref, _ = reference(q[i : i + 1], k[i : i + 1, :n], v[i : i + 1, :n])
        torch.testing.assert_close(out[i : i + 1].float(), ref, **tol(torch.bfloat16))


@pytest.mark.gpu
def test_decode_most_splits() -> None:
    """One KV head of one sequence takes the most splits: max_splits partials per row, four per
    lane of the combine."""
    torch = _torch()
    n = 40_000
    q = rand(1, 1, 8, 64, dtype=torch.float16)
    k, v = rand(1, n, 1, 64, dtype=torch.float16), rand(1, n, 1, 64, dtype=torch.float16)
    out = ak.attention_decode(q, k, v, torch.tensor([n], dtype=torch.int32, device="cuda"))
    ref, _ = reference(q, k, v)
    torch.testing.assert_close(out.float(), ref, **tol(torch.float16))


@pytest.mark.gpu
def test_decode_masked_rows_and_nan() -> None:
    """Rows that see no key (an empty cache, the first rows of a causal append longer than its
    cache) give 0; a NaN in V reaches exactly the rows and column that see it, through the
    in-CTA merge and the split combine."""
    torch = _torch()
    sq, h, hkv, d = 4, 8, 2, 64
    lens = [0, 2, 3000]
    q = rand(3, sq, h, d, dtype=torch.float16)
    k, v = rand(3, 3000, hkv, d, dtype=torch.float16), rand(3, 3000, hkv, d, dtype=torch.float16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out = ak.attention_decode(q, k, v, seqlens, causal=True)
    assert (out[0] == 0).all() and (out[1, :2] == 0).all()  # row i sees keys j <= i + len - 4
    ref, _ = reference(q[1:2, 2:], k[1:2, :2], v[1:2, :2], causal=True)
    torch.testing.assert_close(out[1:2, 2:].float(), ref, **tol(torch.float16))
    ref, _ = reference(q[2:], k[2:], v[2:], causal=True)
    torch.testing.assert_close(out[2:].float(), ref, **tol(torch.float16))
    v[2, 1234, 1, 5] = float("nan")  # KV head 1: query heads 4 .. 7
    out = ak.attention_decode(q, k, v, seqlens, causal=True)
    assert out[2, :, 4:, 5].isnan().all()
    assert not out[2, :, :4].isnan().any() and not out[2, :, 4:, :5].isnan().any()
    assert not out[2, :, 4:, 6:].isnan().any() and not out[:2].isnan().any()


@pytest.mark.gpu
@pytest.mark.parametrize("paged", [False, True])
def test_decode_split_long_context(paged: bool) -> None:
    """One 100k-token sequence: split-KV spreads it over the GPU; softcap and a strided q."""
    torch = _torch()
    gen = torch.Generator().manual_seed(1)
    n = 100_003
    q = rand(1, 2, 32, 128, dtype=torch.bfloat16)[:, :1]
    k, v = rand(1, n, 8, 128, dtype=torch.bfloat16), rand(1, n, 8, 128, dtype=torch.bfloat16)
    seqlens = torch.tensor([n], dtype=torch.int32, device="cuda")
    if paged:
        kp, vp, bt = _paged(k, v, [n], 256, gen)
        out = ak.attention_decode(q, kp, vp, seqlens, bt, softcap=20.0)
    else:
        out = ak.attention_decode(q, k, v, seqlens, softcap=20.0)
    ref, _ = reference(q, k, v, softcap=20.0)
    torch.testing.assert_close(out.float(), ref, **tol(torch.bfloat16))


@pytest.mark.gpu
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_compute_sanitizer_clean(tool: str) -> None:
    """tests/scripts/sanitize_attention.py under the tool: dense, varlen, paged split decode on
    small odd shapes, each input in its own exact-size allocation (torch's caching off). Driver
    API errors are not reported: cuda-python probes optional entry points at import, and each
    probe the driver lacks would count as an error that is none of the kernels'."""
    sanitizer = sanitizer_or_skip()
    env = dict(os.environ)  # the forced path (attn_path) included
    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    proc = subprocess.run(
        [
            sanitizer,
            "--tool",
            tool,
            "--report-api-errors",
            "no",
            "--error-exitcode",
            "9",
            sys.executable,
            str(SCRIPTS / "sanitize_attention.py"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert_clean(proc, "SANITIZE_ATTENTION_OK")
