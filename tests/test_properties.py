"""Randomized property test of every op, seeded and replayable.

Each seed draws one case: an op (relu, gelu exact / tanh, silu, sigmoid, silu_and_mul,
gelu_and_mul exact / tanh, rms_norm, fused_add_rms_norm, layer_norm, softmax, matmul,
scaled_mm), a dtype (sometimes one the op refuses), shapes (0, 1, odd, around the 16-byte vector
widths), layouts (contiguous, row-strided, misaligned offsets, overlapping rows, stride-0
broadcast, transposed, leading dimensions that do not collapse, zero-size arrays whose data
pointer is 0), an ``out=`` (none, exactly in place, overlapping an input by k elements, disjoint
in the same buffer, wrong dtype, wrong shape, overlapping itself, empty) and a stream (the current
one, a side stream made current, a side stream passed as ``stream=``). At most one argument is
made wrong on purpose; the layouts drawn may make a second one wrong, and then either error
passes.

The property: the op returns a result that matches an fp64 reference within the documented
tolerances (exactly, for the GEMM cases, whose operands are small integers), or it raises
TypeError / ValueError / NotImplementedError whose message starts with the op's name, before any
launch. Where the contract fixes the error (a refused dtype is a TypeError, a wrong shape a
ValueError), that type is required; where an ``out=`` or an in-place argument shares memory with
another argument (other than exactly in place), a correct result or a ValueError passes. Every
array lives inside a buffer of 0xFF bytes (NaN in every float dtype) with guard space around it:
after a result, every byte outside the op's outputs (``out=`` and the documented in-place
arguments) must hold its bits, and after an error every byte of every buffer.

Each case runs twice on fresh buffers of the same layouts, so that the second call takes the
torch fast path (the cached prepared launch) where the first call built it.

``AK_PROPERTY_SEEDS`` sets how many seeds run (default 1000), ``AK_PROPERTY_FIRST_SEED`` the
first one. Replay one case (the failure message prints it) with
``AK_PROPERTY_FIRST_SEED=123 AK_PROPERTY_SEEDS=1 pytest tests/test_properties.py``, or by node id
(``'tests/test_properties.py::test_random_case[seed123]'``) when the seed is in the default range.
"""

from __future__ import annotations

import itertools
import math
import os
import random
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

import aotkernels as ak
from aotkernels.dtypes import DTYPES
from helpers import reference

DEVICE = "cuda"
N_SEEDS = int(os.environ.get("AK_PROPERTY_SEEDS", "1000"))
FIRST_SEED = int(os.environ.get("AK_PROPERTY_FIRST_SEED", "0"))
GUARD = 40  # elements of poison before the first and after the last array of a buffer

FLOATS = ("float32", "float16", "bfloat16")
ITEM = {d.long: d.itemsize for d in DTYPES.values()}  # "bfloat16" -> 2
# Sizes around the vector widths (4 / 8 / 16 elements per 16 bytes) and the row-wise paths.
SIZES = (0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256,
         257, 1000, 1023, 1024, 1025, 4095, 4096, 4097)  # fmt: skip
HIDDEN = (*SIZES, 8191, 8192, 8200, 16384, 40000, 65536, 70000, 100_003)

# (rtol, atol) against fp64, as the family tests document them.
ACT_TOL = reference.TOLERANCES
NORM_TOL = reference.FAMILY_TOLERANCES["norm"]
SOFTMAX_TOL = reference.FAMILY_TOLERANCES["softmax"]

UNARY = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid")
GATED = ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul")
ROWWISE = ("rms_norm", "layer_norm", "softmax", "fused_add_rms_norm")
GEMM = ("matmul", "scaled_mm")
OPS = UNARY + GATED + ROWWISE + GEMM


# --- case description --------------------------------------------------------------------------


@dataclass
class Arr:
    """One array argument: its view inside a buffer (``store``), or a zero-size array of its own
    whose data pointer is 0 (``ptr0``)."""

    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...]
    offset: int = GUARD
    store: str = ""  # arrays with the same store name share one buffer
    fill: str = "randn"  # randn | ints | pos (weights) | pow2 (scales) | none (outputs)
    ptr0: bool = False
    layout: str = "contig"

    def span(self) -> int:
        """Elements from the view's first to one past its last element (0 when empty)."""
        if math.prod(self.shape) == 0:
            return 0
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides, strict=True))


@dataclass
class Case:
    seed: int
    op: str  # the kernel-level name (gelu_tanh, gelu_tanh_and_mul, ...)
    arrays: dict[str, Arr]
    scalars: dict[str, Any] = field(default_factory=dict)
    written: tuple[str, ...] = ()
    stream: str = "current"
    errors: set[type] = field(default_factory=set)  # what the drawn defects make acceptable
    notes: list[str] = field(default_factory=list)

    @property
    def public(self) -> str:
        """The function called (and the name error messages start with)."""
        return {"gelu_tanh": "gelu", "gelu_tanh_and_mul": "gelu_and_mul"}.get(self.op, self.op)

    def describe(self) -> str:
        lines = [f"seed {self.seed}: op={self.op} stream={self.stream} scalars={self.scalars}"]
        for name, a in self.arrays.items():
            where = "ptr0" if a.ptr0 else f"store={a.store or name} offset={a.offset}"
            lines.append(
                f"  {name}: {a.dtype} shape={a.shape} strides={a.strides} {where} layout={a.layout}"
            )
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def rows_rule(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """The documented layout of the elementwise and row-wise ops: the last dimension contiguous
    (or of size <= 1) and the leading dimensions collapsing into one row stride. Zero-size
    arrays have no layout to check."""
    if not shape or math.prod(shape) == 0:
        return True
    if shape[-1] > 1 and strides[-1] != 1:
        return False
    lead = [(n, s) for n, s in zip(shape[:-1], strides[:-1], strict=True) if n > 1]
    return all(so == si * ni for (_, so), (ni, si) in itertools.pairwise(lead))


def matrix_rule(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """A GEMM operand: 2-D with a unit stride along one dimension (row- or column-major)."""
    if len(shape) != 2:
        return False
    if math.prod(shape) == 0:
        return True
    (r, c), (sr, sc) = shape, strides
    return c <= 1 or sc == 1 or r <= 1 or sr == 1


# --- drawing ---------------------------------------------------------------------------------


def _shape(rng: random.Random, ndim: int, last: tuple[int, ...] = SIZES, budget: int = 1 << 21):
    """A shape whose element count stays under ``budget`` (leading dims shrink first)."""
    dims = [rng.choice(SIZES[:20]) for _ in range(ndim - 1)] + [rng.choice(last)] if ndim else []
    while math.prod(dims) > budget:
        i = max(range(len(dims)), key=lambda j: dims[j])
        dims[i] = max(1, dims[i] // 4)
    return tuple(dims)


def _layout(rng: random.Random, shape: tuple[int, ...], kinds: tuple[str, ...]) -> Arr:
    """An Arr (dtype filled in later) of ``shape`` in one of ``kinds`` of layout."""
    kind = rng.choice(kinds)
    nd = len(shape)
    strides = contiguous(shape)
    offset = GUARD
    if math.prod(shape) == 0 and kind in ("ptr0", "ptr0_t"):
        if kind == "ptr0_t" and nd >= 2:  # torch.empty(reversed).t()-style strides
            rev = contiguous(tuple(reversed(shape)))
            strides = tuple(reversed(rev))
        return Arr(shape, "", strides, 0, ptr0=True, layout=kind)
    if kind == "rows" and nd >= 2:
        pad = rng.choice([1, 2, 3, 5, 8, 13, 16, 24, 64])
        row = max(shape[-1], 1) + pad
        st = [1] * nd
        st[-2] = row
        for i in range(nd - 3, -1, -1):
            st[i] = st[i + 1] * max(shape[i + 1], 1)
        strides = tuple(st)
    elif kind == "overlap_rows" and nd >= 2 and shape[-1] > 1:
        st = list(contiguous(shape))
        st[-2] = rng.randint(1, shape[-1] - 1)  # rows overlap (a sliding window)
        for i in range(nd - 3, -1, -1):
            st[i] = st[i + 1] * max(shape[i + 1], 1)
        strides = tuple(st)
    elif kind == "offset":
        offset = GUARD + rng.choice([1, 2, 3, 5, 7, 8, 9, 15])
    elif kind == "bcast" and nd >= 2:
        dims = [i for i in range(nd - 1) if shape[i] > 1] or [0]
        i = rng.choice(dims)
        st = list(contiguous((*shape[:i], 1, *shape[i + 1 :])))
        st[i] = 0
        strides = tuple(st)
    elif kind == "transposed" and nd >= 2:
        sw = (*shape[:-2], shape[-1], shape[-2])
        st = list(contiguous(sw))
        st[-1], st[-2] = st[-2], st[-1]
        strides = tuple(st)
    elif kind == "noncollapse" and nd == 3:
        c = max(shape[-1], 1)
        row = c + rng.choice([1, 3, 8])
        strides = (shape[1] * row + rng.choice([1, 5, 16]), row, 1)
    else:
        kind = "contig"
    return Arr(shape, "", strides, offset, layout=kind)


def _empty(rng: random.Random, shape: tuple[int, ...], dtype: str) -> Arr:
    """A zero-size out= of its own (data pointer 0) whose strides may differ from the input's:
    any strides are a legal layout for an array without elements."""
    kind = rng.choice(["ptr0", "ptr0_t", "ptr0_s"])
    if kind == "ptr0_s":
        strides = tuple(rng.randint(1, 7) for _ in shape)
        return Arr(shape, dtype, strides, 0, fill="none", ptr0=True, layout=kind)
    return replace(_layout(rng, shape, (kind,)), dtype=dtype, fill="none")


def _dtype(rng: random.Random, ok: tuple[str, ...], refused: tuple[str, ...], case: Case) -> str:
    if rng.random() < 0.08:
        dt = rng.choice(refused)
        case.errors.add(TypeError)
        case.notes.append(f"refused dtype {dt}")
        return dt
    return rng.choice(ok)


def _defect_slot(rng: random.Random) -> str:
    """Which one argument (if any) this case makes wrong on purpose."""
    return rng.choices(["none", "dtype", "layout", "out", "arg"], [55, 8, 12, 15, 10])[0]


def _stream(rng: random.Random) -> str:
    return rng.choices(["current", "side_ctx", "side_arg"], [70, 15, 15])[0]


def _out(
    rng: random.Random, case: Case, like: Arr, shape: tuple[int, ...], dtype: str, wrong: bool,
    inplace_ok: bool, alias_of: str | None,
) -> Arr | None:  # fmt: skip
    """An ``out=`` for a result of ``shape``/``dtype``; ``like`` is the input it may alias."""
    modes = ["none", "fresh", "fresh_rows", "same_store"]
    if alias_of is not None and not like.ptr0:
        modes += ["inplace", "shift", "shift"] if inplace_ok else ["shift", "shift", "prefix"]
    if math.prod(shape) == 0:
        modes += ["empty_ptr0", "empty_ptr0"]
    if wrong:
        modes = ["wrong_dtype", "wrong_shape", "self_overlap"]
    mode = rng.choice(modes)
    case.notes.append(f"out mode {mode}")
    if mode == "none":
        return None
    if mode == "wrong_dtype":
        dt = rng.choice([d for d in ("float32", "float16", "bfloat16", "float64") if d != dtype])
        case.errors.add(TypeError)
        if math.prod(shape) == 0 and rng.random() < 0.7:
            return _empty(rng, shape, dt)
        return Arr(shape, dt, contiguous(shape), store="out", fill="none")
    if mode == "wrong_shape":
        bad = (*shape[:-1], shape[-1] + 1) if shape else (2,)
        case.errors.add(ValueError)
        return Arr(bad, dtype, contiguous(bad), store="out", fill="none")
    if mode == "self_overlap":
        # An empty array reaches no element twice: only a non-empty one can overlap itself.
        if len(shape) >= 2 and shape[-2] > 1 and math.prod(shape) > 0:
            st = list(contiguous(shape))
            st[-2] = rng.randint(0, shape[-1] - 1)
            for i in range(len(shape) - 3, -1, -1):
                st[i] = st[i + 1] * max(shape[i + 1], 1)
            case.errors.add(ValueError)
            return Arr(shape, dtype, tuple(st), store="out", fill="none", layout="self_overlap")
        return Arr(shape, dtype, contiguous(shape), store="out", fill="none")
    if mode == "empty_ptr0":
        return _empty(rng, shape, dtype)
    if mode == "inplace":
        return replace(like, fill="none", layout="inplace")
    if mode in ("shift", "prefix"):
        k = 0 if mode == "prefix" else rng.choice([-16, -3, -1, 1, 2, 3, 7, 8, 16, 17, 64])
        st = like.strides if len(shape) == len(like.shape) else contiguous(shape)
        return Arr(shape, dtype, st, like.offset + k, store=alias_of or "", fill="none",
                   layout=f"{mode}{k:+d}")  # fmt: skip
    if mode == "same_store" and alias_of is not None and not like.ptr0:
        return Arr(shape, dtype, contiguous(shape), like.offset + like.span() + rng.randint(0, 9),
                   store=alias_of, fill="none", layout="after_x")  # fmt: skip
    kinds = ("rows", "offset", "contig") if mode == "fresh_rows" else ("contig",)
    return replace(_layout(rng, shape, kinds), dtype=dtype, store="out", fill="none")


def draw(seed: int) -> Case:
    rng = random.Random(seed)
    op = rng.choice(OPS)
    case = Case(seed, op, {}, stream=_stream(rng))
    slot = _defect_slot(rng)
    if op in UNARY or op in GATED or op in ROWWISE:
        _draw_rowlike(rng, case, slot)
    else:
        _draw_gemm(rng, case, slot)
    return case


def _draw_rowlike(rng: random.Random, case: Case, slot: str) -> None:
    op = case.op
    refused = ("float64", "int8", "int32", "float8_e4m3fn")
    dtype = _dtype(rng, FLOATS, refused, case) if slot == "dtype" else rng.choice(FLOATS)
    # The one wrong scalar or secondary argument of an "arg" case.
    bad = ""
    if slot == "arg":
        bad = rng.choice({
            "fused_add_rms_norm": ["eps", "weight", "residual_dtype", "residual_shape"],
            "rms_norm": ["eps", "weight"], "layer_norm": ["eps", "weight"],
            "softmax": ["dim"], "gelu": ["approximate"], "gelu_and_mul": ["approximate"],
        }.get(op, ["odd"] if op in GATED else [""]))  # fmt: skip
        if bad:
            case.notes.append(f"wrong {bad}")
    ndim = rng.choice([1, 2, 2, 2, 3] + ([0] if op in UNARY or op == "softmax" else []))
    shape = _shape(rng, ndim, HIDDEN if op in ROWWISE else SIZES)
    if op in GATED:
        shape = (*shape[:-1], 2 * (shape[-1] // 2) + (1 if bad == "odd" else 0))
    good = ("contig", "rows", "offset", "bcast", "overlap_rows", "ptr0", "ptr0_t")
    kinds = good + (("transposed", "noncollapse") if slot == "layout" else ())
    if op == "fused_add_rms_norm" and slot != "layout":  # x is written: rows must not overlap
        kinds = tuple(k for k in kinds if k not in ("bcast", "overlap_rows"))
    x = replace(_layout(rng, shape, kinds), dtype=dtype, store="x")
    case.arrays["x"] = x
    hidden = shape[-1] if shape else 1
    if bad in ("odd", "dim", "approximate"):
        case.errors.add(NotImplementedError if bad == "dim" and len(shape) > 1 else ValueError)
        if bad == "dim":
            case.scalars["dim"] = 0 if len(shape) > 1 else 5
        if bad == "approximate":
            case.scalars["approximate"] = "erf"
    if op in ("rms_norm", "layer_norm", "fused_add_rms_norm"):
        eps: Any = rng.choice([1e-6, 1e-5, 0.0, 1e-3])
        if bad == "eps":
            eps = rng.choice([-1.0, float("nan"), "1e-6"])
            case.errors.add(TypeError if isinstance(eps, str) else ValueError)
        case.scalars["eps"] = eps
    if op == "fused_add_rms_norm":
        rmode = "fresh" if x.ptr0 else rng.choice(["fresh", "fresh", "rows", "shift", "same"])
        if rmode in ("fresh", "rows") or bad.startswith("residual"):
            kinds = ("contig", "rows", "offset") if rmode == "rows" else ("contig",)
            r = replace(_layout(rng, shape, kinds), dtype=dtype, store="residual")
        else:
            k = 0 if rmode == "same" else rng.choice([-8, -1, 1, 3, 16])
            r = Arr(shape, dtype, x.strides, x.offset + k, store="x", layout=f"alias{k:+d}")
        if bad == "residual_dtype":
            r = replace(r, dtype=rng.choice([d for d in FLOATS if d != dtype]))
            case.errors.add(TypeError)
        elif bad == "residual_shape":
            wrong = (*shape[:-1], hidden + 1) if shape else (2,)
            r = Arr(wrong, dtype, contiguous(wrong), store="residual")
            case.errors.add(ValueError)
        case.arrays["residual"] = r
        case.written = ("x", "residual")
    if op in ("rms_norm", "layer_norm", "fused_add_rms_norm"):
        if op != "layer_norm" or rng.random() < 0.8 or bad == "weight":
            w = Arr((hidden,), dtype, (1,), store="weight", fill="pos")
            if bad == "weight":
                w = replace(w, shape=(hidden + 1,)) if hidden <= 1 or rng.random() < 0.5 else (
                    replace(w, strides=(2,)))  # fmt: skip
                case.errors.add(ValueError)
            case.arrays["weight"] = w
        if op == "layer_norm" and rng.random() < 0.7:
            case.arrays["bias"] = Arr((hidden,), dtype, (1,), store="bias")
    if op != "fused_add_rms_norm":
        out_shape = (*shape[:-1], shape[-1] // 2) if op in GATED else shape
        if bad == "odd":
            out_shape = (*shape[:-1], shape[-1] // 2)
        out = _out(rng, case, x, out_shape, dtype, slot == "out", op not in GATED, "x")
        if out is not None:
            case.arrays["out"] = out
            case.written = ("out",)


def _draw_gemm(rng: random.Random, case: Case, slot: str) -> None:
    op = case.op
    gsizes = (0, 1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 127, 128, 129, 200, 256, 257)
    m, n, k = (rng.choice(gsizes) for _ in range(3))
    if op == "matmul":
        ok = ("float16", "bfloat16")
        dtype = _dtype(rng, ok, ("float32", "float8_e4m3fn"), case) if slot == "dtype" else (
            rng.choice(ok))  # fmt: skip
    else:
        ok = ("float8_e4m3fn", "float8_e5m2", "int8")
        dtype = _dtype(rng, ok, ("bfloat16", "float32"), case) if slot == "dtype" else (
            rng.choice(ok))  # fmt: skip
    good = ("contig", "rows", "offset", "transposed", "bcast", "ptr0", "ptr0_t")
    if dtype in ("float8_e4m3fn", "float8_e5m2", "int8") and rng.random() < 0.5:
        good = ("contig", "rows", "offset", "ptr0")  # the K-major fast path more often
    kinds = good + (("noncollapse",) if slot == "layout" else ())
    ashape = (m, k) if not (slot == "layout" and rng.random() < 0.3) else (1, m, k)
    a = replace(_layout(rng, ashape, kinds), dtype=dtype, store="a", fill="ints")
    bk = k + 1 if slot == "arg" and rng.random() < 0.3 else k
    b_is_kmajor = rng.random() < 0.5
    b_shape = (n, bk) if b_is_kmajor else (bk, n)
    b = replace(_layout(rng, b_shape, good), dtype=dtype, store="b", fill="ints")
    if b_is_kmajor and not b.ptr0:  # the transpose of an [N, K] layout: column-major [K, N]
        b = replace(b, shape=(bk, n), strides=(b.strides[1], b.strides[0]), layout=b.layout + ".t")
    elif b_is_kmajor:
        b = replace(b, shape=(bk, n), strides=(b.strides[1], b.strides[0]))
    if bk != k:
        case.errors.add(ValueError)
        case.notes.append("b.shape[0] != K")
    case.arrays["a"], case.arrays["b"] = a, b
    if op == "matmul":
        out_dt = rng.choice([None, None, "float32", "bfloat16", "float16"])
        odt = out_dt or (dtype if dtype in ("float16", "bfloat16") else "float32")
        if out_dt is not None:
            case.scalars["out_dtype"] = out_dt
    else:
        int8 = dtype == "int8"
        scales = rng.choice(["none", "tensor", "vector", "block"] if not int8 else
                            ["none", "tensor", "vector"])  # fmt: skip
        if scales == "none" and int8:
            odt = "int32"
        else:
            odt = rng.choice(["float32", "bfloat16", "float16"])
        case.scalars["out_dtype"] = odt
        if slot == "arg" and rng.random() < 0.3 and not case.errors:
            case.scalars.pop("out_dtype")
            case.errors.add(TypeError)
            case.notes.append("no out_dtype")
        if scales != "none":
            kb, nb = -(-k // 128), -(-n // 128)
            sa_shape, sb_shape = {"tensor": ((1,), (1,)), "vector": ((m,), (1, n)),
                                  "block": ((m, kb), (nb, kb))}[scales]  # fmt: skip
            if scales == "vector" and rng.random() < 0.5:
                sa_shape, sb_shape = (m, 1), (n,)
            sa = replace(_layout(rng, sa_shape, ("contig", "transposed", "offset")),
                         dtype="float32", store="scale_a", fill="pow2")  # fmt: skip
            sb = replace(_layout(rng, sb_shape, ("contig", "transposed", "offset")),
                         dtype="float32", store="scale_b", fill="pow2")  # fmt: skip
            if sa.ptr0 or sb.ptr0:
                sa, sb = (
                    replace(sa, ptr0=False, offset=GUARD),
                    replace(sb, ptr0=False, offset=GUARD),
                )
            if slot == "arg" and not case.errors:
                sa = replace(sa, shape=(m + 2, 3), strides=(3, 1))
                case.errors.add(ValueError)
                case.notes.append("bad scale_a shape")
            case.arrays["scale_a"], case.arrays["scale_b"] = sa, sb
            case.notes.append(f"scales {scales}")
        if odt != "int32" and rng.random() < 0.3:
            bias = Arr((n,), odt, (1,), store="bias", fill="ints")
            if slot == "arg" and not case.errors:
                bias = replace(bias, shape=(n + 1,))
                case.errors.add(ValueError)
                case.notes.append("bad bias shape")
            case.arrays["bias"] = bias
    out = _out(rng, case, a, (m, n), odt, slot == "out", False, "a")
    if out is not None:
        case.arrays["out"] = out
        case.written = ("out",)
    if "out" in case.arrays and rng.random() < 0.1 and slot == "none":
        o = case.arrays["out"]
        if not o.ptr0 and o.store == "out" and m > 1 and n > 1:
            case.arrays["out"] = replace(o, strides=(1, m), layout="column-major")


# --- running -----------------------------------------------------------------------------------


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


class Buffers:
    """The case's arrays, materialized: one buffer of bytes per store, all 0xFF (NaN in every
    float dtype) before the inputs are written into their views; outputs keep the poison."""

    def __init__(self, case: Case, gen: Any) -> None:
        import torch

        self.case = case
        self.views: dict[str, Any] = {}
        self.stores: dict[str, Any] = {}
        size: dict[str, int] = {}
        for name, a in case.arrays.items():
            if not a.ptr0:
                end = (a.offset + a.span() + GUARD) * ITEM[a.dtype]
                size[a.store or name] = max(size.get(a.store or name, 0), end)
        for key, nbytes in size.items():
            self.stores[key] = torch.full((-(-nbytes // 8) * 8,), 0xFF, dtype=torch.uint8,
                                          device=DEVICE)  # fmt: skip
        for name, a in case.arrays.items():  # inputs in call order; outputs keep the poison
            if a.ptr0:
                self.views[name] = torch.empty_strided(
                    a.shape, a.strides, device=DEVICE, dtype=_torch_dtype(a.dtype)
                )
                continue
            typed = self.stores[a.store or name].view(_torch_dtype(a.dtype))
            self.views[name] = typed.as_strided(a.shape, a.strides, a.offset)
            if a.fill != "none" and math.prod(a.shape):
                typed[self.elements(name).flatten()] = _values(a, gen).flatten()
        self.snapshot = {k: v.clone() for k, v in self.stores.items()}

    def elements(self, name: str) -> Any:
        """Index of every element of the view in its store, in the array's own dtype."""
        import torch

        a = self.case.arrays[name]
        n = self.stores[a.store or name].numel() // ITEM[a.dtype]
        return torch.arange(n, device=DEVICE).as_strided(a.shape, a.strides, a.offset)

    def bytes_of(self, name: str) -> Any:
        """Every byte of the view in its store (flat)."""
        import torch

        item = ITEM[self.case.arrays[name].dtype]
        e = self.elements(name).flatten()
        return (e[:, None] * item + torch.arange(item, device=DEVICE)).flatten()

    def changed_outside(self) -> list[str]:
        """Stores with a byte changed outside the op's outputs: 'store[byte]' of the first."""
        import torch

        bad = []
        for key, store in self.stores.items():
            keep = torch.ones(store.numel(), dtype=torch.bool, device=DEVICE)
            for name in self.case.written:
                a = self.case.arrays.get(name)
                if a is not None and not a.ptr0 and (a.store or name) == key:
                    keep[self.bytes_of(name)] = False
            diff = (store != self.snapshot[key]) & keep
            if diff.any():
                bad.append(f"{key}[byte {int(torch.nonzero(diff)[0])}]")
        return bad

    def unchanged(self) -> bool:
        import torch

        return all(torch.equal(s, self.snapshot[k]) for k, s in self.stores.items())


def _values(a: Arr, gen: Any) -> Any:
    import torch

    shape = a.shape
    if a.fill == "ints":
        v = torch.randint(-2, 3, shape, device=DEVICE, generator=gen)
    elif a.fill == "pow2":
        v = 2.0 ** torch.randint(-2, 3, shape, device=DEVICE, generator=gen)
    elif a.fill == "pos":
        v = torch.rand(shape, device=DEVICE, generator=gen) + 0.5
    else:
        v = torch.randn(shape, device=DEVICE, generator=gen) * 2
    return v.to(_torch_dtype(a.dtype))


def _call(case: Case, v: dict[str, Any], stream: Any) -> Any:
    op, s = case.op, case.scalars
    kw: dict[str, Any] = {"stream": stream}
    if "out" in v:
        kw["out"] = v["out"]
    if op in ("gelu", "gelu_tanh", "gelu_and_mul", "gelu_tanh_and_mul"):
        kw["approximate"] = s.get("approximate", "tanh" if "tanh" in op else "none")
    if op in UNARY or op in GATED:
        return getattr(ak, case.public)(v["x"], **kw)
    if op == "softmax":
        return ak.softmax(v["x"], s.get("dim", -1), **kw)
    if op == "rms_norm":
        return ak.rms_norm(v["x"], v.get("weight"), s["eps"], **kw)
    if op == "layer_norm":
        return ak.layer_norm(v["x"], v.get("weight"), v.get("bias"), s["eps"], **kw)
    if op == "fused_add_rms_norm":
        return ak.fused_add_rms_norm(v["x"], v["residual"], v.get("weight"), s["eps"], **kw)
    if op == "matmul":
        return ak.matmul(v["a"], v["b"], s.get("out_dtype"), **kw)
    return ak.scaled_mm(v["a"], v["b"], v.get("scale_a"), v.get("scale_b"), s.get("out_dtype"),
                        v.get("bias"), **kw)  # fmt: skip


def _expected(case: Case, inp: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """name -> (fp64 reference, tolerance) of every result; the tolerance is (rtol, atol), or
    (rtol, atol, scale) where the absolute bound grows by two f32 ulps of ``scale`` per element,
    or None for an exact result."""
    op, x = case.op, inp.get("x")
    if op in UNARY:
        # The activations' documented absolute error near zero is ~ulp_f32(1) * |x| (1 + erf /
        # 1 + tanh cancel in f32).
        rtol, atol = ACT_TOL[str(x.dtype)[6:]]
        return {"out": (reference.activation(op, x, "float64"), (rtol, atol, x.double().abs()))}
    if op in GATED:
        d = x.shape[-1] // 2
        g, u = x[..., :d].double(), x[..., d:].double()
        rtol, atol = ACT_TOL[str(x.dtype)[6:]]
        return {"out": (reference.gated(op, x, "float64"), (rtol, atol, g.abs() * u.abs()))}
    if op == "softmax":
        return {"out": (reference.softmax(x), SOFTMAX_TOL[str(x.dtype)[6:]])}
    if op in GEMM:
        return _expected_gemm(case, inp)
    eps = case.scalars.get("eps", 0.0)
    w = inp.get("weight")
    tol = NORM_TOL[str(x.dtype)[6:]]
    if op == "rms_norm":
        return {"out": (reference.rms_norm(x, w, eps), tol)}
    if op == "layer_norm":
        return {"out": (reference.layer_norm(x, w, inp.get("bias"), eps), tol)}
    if op == "fused_add_rms_norm":
        y, s = reference.fused_add_rms_norm(x, inp["residual"], w, eps)
        return {"x": (y, tol), "residual": (s.double(), None)}
    raise AssertionError(f"no reference for {op}")


def _expected_gemm(case: Case, inp: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Exact: small-integer operands, power-of-two scales and integer bias keep every partial
    sum exact in f32, so the result is the exact value rounded once to the output dtype."""
    import torch

    a, b = inp["a"].double(), inp["b"].double()
    odt = case.scalars.get("out_dtype") or str(inp["a"].dtype)[6:]
    if case.op == "scaled_mm" and "scale_a" in inp:
        sa, sb = inp["scale_a"].double(), inp["scale_b"].double()
        if "scales block" in case.notes:
            kb = torch.arange(a.shape[1], device=DEVICE) // 128
            nb = torch.arange(b.shape[1], device=DEVICE) // 128
            y = (a * sa[:, kb]) @ (b * sb[nb][:, kb].t())
        else:
            y = (a @ b) * sa.reshape(-1, 1).expand(a.shape[0], 1) * sb.reshape(1, -1)
    else:
        y = a @ b
    if "bias" in inp:
        y = y + inp["bias"].double()
    return {"out": (y.to(_torch_dtype(odt)).double(), None)}


def _side_stream() -> Any:
    import torch

    return torch.cuda.Stream()


def _run_once(case: Case, gen_seed: int) -> tuple[str, str]:
    """One call on fresh buffers; returns (outcome, detail) and asserts the property."""
    import torch

    gen = torch.Generator(device=DEVICE)
    gen.manual_seed(gen_seed)
    bufs = Buffers(case, gen)
    v = bufs.views
    inputs = {k: t.clone() for k, t in v.items() if case.arrays[k].fill != "none"}
    overlap = _overlaps(case, bufs)
    errors = case.errors
    stream: Any = None
    side = None
    if case.stream != "current":
        side = _side_stream()
        side.wait_stream(torch.cuda.current_stream())
        stream = side if case.stream == "side_arg" else None
    try:
        if case.stream == "side_ctx":
            with torch.cuda.stream(side):
                res = _call(case, v, stream)
        else:
            res = _call(case, v, stream)
    except (TypeError, ValueError, NotImplementedError) as e:
        torch.cuda.synchronize()
        allowed = errors | ({ValueError} if overlap else set())
        assert type(e) in allowed, (
            f"raised {type(e).__name__}: {e}; expected "
            f"{'a result' if not errors else sorted(t.__name__ for t in errors)}"
            f"{' or ValueError (overlap: ' + overlap + ')' if overlap else ''}"
        )
        assert str(e).startswith(f"{case.public}:"), f"message does not name the op: {e}"
        assert bufs.unchanged(), f"raised {type(e).__name__} after writing: {e}"
        return type(e).__name__, str(e)
    if side is not None:
        torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert not errors, f"returned a result; expected {sorted(t.__name__ for t in errors)}"
    results = _results(case, v, res)
    for name, (ref, tol) in _expected(case, inputs).items():
        got = results[name]
        assert tuple(got.shape) == tuple(ref.shape), f"{name}: shape {tuple(got.shape)}"
        if ref.numel() == 0:
            continue
        if tol is None:
            bad = got.double() != ref
            assert not bad.any(), (
                f"{name}: {int(bad.sum())} of {ref.numel()} elements differ from the exact "
                f"result, first at {tuple(int(i) for i in torch.nonzero(bad)[0])}"
                f"{' (overlap: ' + overlap + ')' if overlap else ''}"
            )
        else:
            bound = tol[1] + tol[0] * ref.abs()
            if len(tol) == 3:
                bound = bound + 2.0**-22 * tol[2]
            bad = ~((got.double() - ref).abs() <= bound)  # NaN counts as bad
            if bad.any():
                i = tuple(int(j) for j in torch.nonzero(bad)[0])
                raise AssertionError(
                    f"{name}: {int(bad.sum())} of {ref.numel()} elements out of tolerance "
                    f"(rtol {tol[0]}, atol {tol[1]}), first at {i}: got {float(got[i])}, "
                    f"expected {float(ref[i])}{' (overlap: ' + overlap + ')' if overlap else ''}"
                )
    outside = bufs.changed_outside()
    assert not outside, f"wrote outside its outputs: {outside}"
    return "ok", ""


def _results(case: Case, v: dict[str, Any], res: Any) -> dict[str, Any]:
    import torch

    if case.op == "fused_add_rms_norm":
        assert res[0] is v["x"] and res[1] is v["residual"]
        return {"x": v["x"], "residual": v["residual"]}
    if "out" in v:
        assert res is v["out"], "out= given: the op must return it"
    else:
        assert isinstance(res, torch.Tensor) and res.device == v[next(iter(v))].device
        want = case.scalars.get("out_dtype")
        if case.op in GEMM and want is not None:
            assert res.dtype == _torch_dtype(want)
        elif case.op not in GEMM:
            assert res.dtype == v["x"].dtype
    return {"out": res}


def _overlaps(case: Case, bufs: Buffers) -> str:
    """Why a written array shares memory with another argument ('' when it does not): shared
    bytes (other than out exactly in place of x, where the op allows it), or interleaved byte
    ranges. Either makes a ValueError acceptable."""
    import torch

    why = []
    for w in case.written:
        aw = case.arrays.get(w)
        if aw is None or aw.ptr0 or math.prod(aw.shape) == 0:
            continue
        bw = bufs.bytes_of(w)
        for name, a in case.arrays.items():
            if name == w or a.ptr0 or math.prod(a.shape) == 0:
                continue
            if (a.store or name) != (aw.store or w):
                continue
            ba = bufs.bytes_of(name)
            exact = a.dtype == aw.dtype and torch.equal(bufs.elements(name), bufs.elements(w))
            if exact and w == "out" and name == "x" and case.op not in GATED + GEMM:
                continue
            if not (ba.min() <= bw.max() and bw.min() <= ba.max()):
                continue
            shared = bool(torch.isin(bw, ba).any())
            why.append(f"{w} {'shares bytes with' if shared else 'interleaves'} {name}")
    return "; ".join(why)


def _layout_errors(case: Case) -> set[type]:
    """ValueError when a drawn layout breaks the documented rules (independent of the op's own
    checks: the rules are re-derived here from the docstrings)."""
    errs: set[type] = set()
    op = case.op
    for name, a in case.arrays.items():
        if op in GEMM and name in ("a", "b"):
            ok = matrix_rule(a.shape, a.strides)
        elif op in GEMM and name == "out":
            (m, n) = a.shape if len(a.shape) == 2 else (1, 1)
            ok = m * n == 0 or ((n <= 1 or a.strides[1] == 1) and (m <= 1 or a.strides[0] >= n))
        elif op in GEMM:
            ok = True
        elif name in ("weight", "bias"):
            ok = True  # drawn contiguous unless the case says otherwise (in case.errors)
        else:
            ok = rows_rule(a.shape, a.strides)
            if ok and name in case.written and a.shape and math.prod(a.shape) > 0:
                lead = [s for n, s in zip(a.shape[:-1], a.strides[:-1], strict=True) if n > 1]
                ok = not lead or lead[-1] >= a.shape[-1]  # written rows must not overlap
        if not ok:
            errs.add(ValueError)
            case.notes.append(f"{name}'s layout breaks the documented rules")
    return errs


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(FIRST_SEED, FIRST_SEED + N_SEEDS), ids=lambda s: f"seed{s}")
def test_random_case(seed: int) -> None:
    case = draw(seed)
    case.errors |= _layout_errors(case)
    first = None
    for attempt in range(2):
        try:
            outcome = _run_once(case, seed * 2 + 1)
        except AssertionError as e:
            call = "second call (cached plan)" if attempt else "first call"
            raise AssertionError(f"{call}: {e}\n{case.describe()}") from None
        if first is None:
            first = outcome[0]
        else:
            assert outcome[0] == first, (
                f"second call gave {outcome[0]} ({outcome[1]}), first gave {first}\n"
                f"{case.describe()}"
            )
