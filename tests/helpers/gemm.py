"""What the GEMM tests share: the path and layout names, a simulated GPU that records packed
launches, fake operands for the CPU tests, and builders of exactly representable device inputs
for the GPU tests. The references the results are checked against live in ``reference.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import pytest

from aotkernels import arrays, loader
from aotkernels.errors import NoKernelImageError
from aotkernels.ops import _op
from helpers.fake_dlpack import FakeCudaArray
from helpers.fake_family import fake_family

ENV = "AOTKERNELS_GEMM_PATH"
PATHS = ["mma_sync", "wgmma"]  # the paths an sm_90a image holds
LAYOUTS = ["kk", "kn", "mk", "mn"]  # a: k row-major, m column-major; b: k column-major, n row-major


# --- CPU: a simulated GPU and fake operands -------------------------------------------------------


class Launch(NamedTuple):
    """One recorded launch, as the kernel would have received it."""

    symbol: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    smem: int
    fields: dict[str, Any]  # the parameter block, unpacked by name
    tmaps: list[tuple[int, ...]]
    ptrs: tuple[int, ...]  # per-call pointers (none: the packed ones)


OUT_PTR = 0x7000000  # where the fake allocator puts outputs


def unflatten(tmaps: Any) -> list[tuple[int, ...]]:
    """PreparedLaunch's flat tensor-map values, one tuple per descriptor (pack_tensor_map)."""
    flat = list(tmaps)
    assert len(flat) % _MAP_FIELDS == 0
    return [tuple(flat[i : i + _MAP_FIELDS]) for i in range(0, len(flat), _MAP_FIELDS)]


def map2(offset: int, index: int, dtype: int, inner: int, outer: int, row_bytes: int,
         box_inner: int, box_outer: int) -> tuple[int, ...]:  # fmt: skip
    """The packed form of a rank-2 map (what the GEMM kernels read), for comparisons."""
    return (offset, index, dtype, 2, inner, outer, 1, 1, 1, row_bytes, 0, 0, 0,
            box_inner, box_outer, 1, 1, 1)  # fmt: skip


_MAP_FIELDS = 18  # src/tensor_map.h kTensorMapFields


class FakeGpu:
    """family_on, the allocator and _core.PreparedLaunch replaced: calls run to the launch, which is
    recorded with its decoded parameter block."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from aotkernels import _core

        self.launches: list[Launch] = []
        self.use("sm_90a")
        monkeypatch.setattr(loader, "family_on", lambda name, dev: self.family)
        monkeypatch.setattr(arrays.Framework, "empty", self._empty)
        monkeypatch.setattr(_core, "PreparedLaunch", self._plan)
        monkeypatch.setattr(_op, "_PLANS", {})
        for var in (ENV, "AOTKERNELS_GEMM_TCGEN05"):
            monkeypatch.delenv(var, raising=False)

    def use(self, target: str, sm_count: int = 132) -> None:
        self.family = fake_family("gemm", target, sm_count)
        self.struct = self.family.params
        self.names = [name for name, _ in self.family.param_fields]

    def _empty(self, like: Any, shape: Any, dtype: str) -> Any:
        return FakeCudaArray(shape, arrays.dtype_name(dtype), ptr=OUT_PTR)

    def _plan(
        self, symbol: str, func: int, ctx: int, grid: list[int], block: list[int], smem: int,
        params: bytes, ptr_offsets: list[int], tmaps: Any = (),
    ) -> Any:  # fmt: skip
        assert func == self.family.kernels[symbol] and ctx == 0xC0
        assert ptr_offsets == self.family.ptr_offsets
        packed = dict(zip(self.names, self.struct.unpack(params), strict=True))
        ptr_names = [name for name, ptype in self.family.param_fields if ptype == "ptr"]
        rec = self.launches

        class Plan:
            def __call__(self, stream: int, *ptrs: int) -> None:
                # What the kernel receives: the packed block with this call's pointers patched in.
                fields = {**packed, **dict(zip(ptr_names, ptrs, strict=False))}
                rec.append(
                    Launch(symbol, tuple(grid), tuple(block), smem, fields, unflatten(tmaps), ptrs)
                )

        return Plan()

    @property
    def last(self) -> Launch:
        """The last GEMM launch (not a split-K reduction after it: flags bit 3)."""
        main = [launch for launch in self.launches if not launch.fields["flags"] & 8]
        assert main, "no launch"
        return main[-1]


def mat(
    shape: tuple[int, ...],
    dtype: str = "bfloat16",
    col_major: bool = False,
    ld: int | None = None,
    ptr: int = 0x100000,
    **kw: Any,
) -> FakeCudaArray:
    """A fake 2-D operand: row-major (or column-major) with leading dimension ``ld``."""
    if len(shape) != 2:
        return FakeCudaArray(shape, dtype, ptr=ptr, **kw)
    r, c = shape
    pitch = ld if ld is not None else (r if col_major else c)
    strides = (1, pitch) if col_major else (pitch, 1)
    return FakeCudaArray(shape, dtype, kw.pop("strides", strides), ptr=ptr, **kw)


A_PTR, B_PTR, SA_PTR, SB_PTR, BIAS_PTR, D_PTR = (0x100000 * i for i in range(1, 7))


def ab(
    m: int = 4, n: int = 5, k: int = 8, dtype: str = "bfloat16", layout: str = "kn"
) -> tuple[FakeCudaArray, FakeCudaArray]:
    """Fake a [m, k] at A_PTR and b [k, n] at B_PTR, laid out as ``layout`` (see LAYOUTS) says."""
    a = mat((m, k), dtype, col_major=layout[0] == "m", ptr=A_PTR)
    b = mat((k, n), dtype, col_major=layout[1] == "k", ptr=B_PTR)
    return a, b


def f32(shape: tuple[int, ...], ptr: int, **kw: Any) -> FakeCudaArray:
    """A fake float32 array: scales, or a float32 bias or out."""
    return FakeCudaArray(shape, "float32", ptr=ptr, **kw)


# --- GPU: exactly representable inputs ------------------------------------------------------------


def ids(shapes: Sequence[tuple[int, ...]]) -> list[str]:
    """pytest ids "MxNxK" for ``shapes``."""
    return ["x".join(map(str, s)) for s in shapes]


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def generator(*key: int) -> Any:
    """A device RNG seeded from ``key``: each case draws the same inputs on every run."""
    import torch

    return torch.Generator(device="cuda").manual_seed(hash(key) & 0x7FFFFFFF)


def small_ints(shape: tuple[int, ...], dtype: str, gen: Any, lo: int = -3, hi: int = 3) -> Any:
    """Small integers, exact in every operand dtype (e5m2 holds 0..4 exactly)."""
    import torch

    t = torch.randint(lo, hi + 1, shape, device="cuda", generator=gen, dtype=torch.int32)
    return t.to(torch.int8) if dtype == "int8" else t.to(torch.float32).to(torch_dtype(dtype))


def pow2(shape: tuple[int, ...], gen: Any, lo: int = -2, hi: int = 2) -> Any:
    """float32 powers of two in [2**lo, 2**hi]: scaling an exact sum by them stays exact."""
    import torch

    e = torch.randint(lo, hi + 1, shape, device="cuda", generator=gen, dtype=torch.int32)
    return torch.pow(2.0, e.to(torch.float32))


def poisoned(shape: tuple[int, int], dtype: Any) -> Any:
    """A buffer whose every element would show if a kernel read or left it: NaN (127 for int8)."""
    import torch

    if dtype == torch.int8:
        return torch.full(shape, 127, device="cuda", dtype=torch.int8)
    return torch.full(shape, float("nan"), device="cuda").to(dtype)


def place(vals: Any, col_major: bool, ld: str = "dense") -> Any:
    """``vals`` [R, C] copied into a row-major (or column-major) view of a poisoned buffer.

    ld "dense": leading dim = the unit-stride extent (odd sizes: rows not 16-byte aligned);
    "tma": rounded up to 16 bytes (TMA-legal); "wide": 16 more bytes on top (stride > cols).
    """
    rows, cols = vals.shape
    inner, outer = (rows, cols) if col_major else (cols, rows)
    step = 16 // vals.element_size()
    pitch = {
        "dense": inner,
        "tma": -(-max(inner, 1) // step) * step,
        "wide": -(-inner // step) * step + step,
    }[ld]
    buf = poisoned((outer, pitch), vals.dtype)
    view = buf[:, :inner]
    view.copy_(vals.t() if col_major else vals)
    return view.t() if col_major else view


def int_operands(
    m: int, n: int, k: int, dtype: str, layout: str, ld: str, gen: Any
) -> tuple[Any, Any, Any, Any]:
    """(a, b, a values, b values): small integers laid out as ``layout`` says."""
    av, bv = small_ints((m, k), dtype, gen), small_ints((k, n), dtype, gen)
    return place(av, layout[0] == "m", ld), place(bv, layout[1] == "k", ld), av, bv


def need_sm90a() -> None:
    import torch

    if torch.cuda.get_device_capability(0) != (9, 0):
        pytest.skip("the wgmma path runs on sm_90 (H100/H200) only")


def run_forced(path: str, call: Any, degenerate: bool) -> Any:
    """``call()`` under a forced path; wgmma may decline operands with a size-1 dim (its layout
    reading then sees no 16-byte row stride): NoKernelImageError, which returns None."""
    if path == "wgmma":
        need_sm90a()
        if degenerate:
            try:
                return call()
            except NoKernelImageError:
                return None
    return call()
