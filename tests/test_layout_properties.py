"""The op layer's layout checks against brute force, over random shapes and strides (CPU).

Each check reads an array's layout from its shape and strides alone; the model here enumerates
every element's offset instead. The rules must accept exactly the layouts the kernels can
address (row views, two-level rows), describe them so that every element lands where the
strides put it, refuse the rest with ``ValueError``, and never lose a bit of a stride or offset
past 2**31 (strides here reach 2**40). Overlap between two arrays is tested the same way in
tests/test_overlap.py.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aotkernels.ops._elementwise import joint_rows_view
from aotkernels.ops._op import Meta, _rows, _self_overlapping, _span, row_layout, rows_view
from aotkernels.ops._rowwise import joint_layout2, row_layout2

ITEM = {"f32": 4, "f16": 2, "bf16": 2, "int8": 1}
BIG = 1 << 40


# --- the model ------------------------------------------------------------------------------------


def offsets(meta: Meta) -> list[int]:
    """Every element's offset (in elements), in row-major index order."""
    ranges = [range(n) for n in meta.shape]
    return [
        sum(i * s for i, s in zip(idx, meta.strides, strict=True))
        for idx in itertools.product(*ranges)
    ]


def view_fits(meta: Meta, rows: int, cols: int, row_stride: int) -> bool:
    """Whether [rows, cols] with one row stride and contiguous cols places every element."""
    offs = offsets(meta)
    return rows * cols == len(offs) and all(
        off == (k // cols) * row_stride + k % cols for k, off in enumerate(offs)
    )


def row_stride_of(meta: Meta) -> int | None:
    """The row stride that makes ``meta`` [rows, shape[-1]] rows of contiguous elements, if
    any (found by brute force: row 1's first element, checked against every element)."""
    cols = meta.shape[-1]
    offs = offsets(meta)
    rs = offs[cols] if len(offs) > cols else cols
    return rs if view_fits(meta, len(offs) // cols, cols, rs) else None


def two_level_fits(meta: Meta, inner: int, rs: int, outer: int) -> bool:
    """Whether row r at (r // inner) * outer + (r % inner) * rs (r * rs when inner <= 1), of
    contiguous elements, places every element."""
    cols = meta.shape[-1]

    def start(r: int) -> int:
        return (r // inner) * outer + (r % inner) * rs if inner > 1 else r * rs

    return all(off == start(k // cols) + k % cols for k, off in enumerate(offsets(meta)))


def two_level_exists(meta: Meta) -> bool:
    """Whether some split of the row index (inner = any divisor of the row count) fits."""
    cols = meta.shape[-1]
    offs = offsets(meta)
    rows = len(offs) // cols
    starts = [offs[r * cols] for r in range(rows)]
    for inner in range(1, rows + 1):
        if rows % inner:
            continue
        rs = starts[1] if rows > 1 else cols
        outer = starts[inner] if rows > inner else 0
        if two_level_fits(meta, inner, rs, outer):
            return True
    return False


# --- layouts --------------------------------------------------------------------------------------


shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)
dtypes = st.sampled_from(sorted(ITEM))


@st.composite
def sliced_strides(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of a view of a contiguous buffer as frameworks make them: padded rows
    (``x[:, :h]``), step slices, permuted and broadcast (stride 0) dims, negative steps, rows
    2**31+ elements apart."""
    order = list(range(len(shape)))
    if shape and draw(st.booleans()):
        order = list(draw(st.permutations(order)))
    strides, acc = [0] * len(shape), 1
    for d in reversed(order):  # the buffer's innermost dim last in ``order``
        pad = draw(st.sampled_from([0, 0, 1, 3, (1 << 31) + 3, BIG]))
        step = draw(st.sampled_from([1, 1, 1, 2, -1]))
        strides[d] = acc * step
        acc *= shape[d] * abs(step) + pad
    for d in range(len(shape)):
        if draw(st.integers(0, 5)) == 0:
            strides[d] = 0
    return tuple(strides)


def scrambled_strides(shape: tuple[int, ...]) -> st.SearchStrategy[tuple[int, ...]]:
    """Any strides at all, small and past 2**31."""
    stride = st.one_of(st.integers(-6, 40), st.integers(-BIG, BIG))
    return st.tuples(*(stride for _ in shape))


def strides_for(shape: tuple[int, ...]) -> st.SearchStrategy[tuple[int, ...]]:
    return st.one_of(sliced_strides(shape), scrambled_strides(shape))


@st.composite
def layouts(draw: st.DrawFn, *, filled: bool = False, views_only: bool = False) -> Meta:
    """An array layout; ``filled``: at least one element (the row views treat empty arrays
    apart: nothing to launch); ``views_only``: views of a buffer, never scrambled strides."""
    shape = draw(shapes.filter(lambda s: bool(s) and math.prod(s) > 0) if filled else shapes)
    strides = draw(sliced_strides(shape) if views_only else strides_for(shape))
    return Meta(shape, strides, draw(dtypes))


PROPERTY = settings(max_examples=400, deadline=None)


# --- the checks -----------------------------------------------------------------------------------


@PROPERTY
@given(layouts())
def test_rows_view_places_every_element_or_refuses(meta: Meta) -> None:
    n = math.prod(meta.shape)
    if not meta.shape:
        assert rows_view("op", "x", meta) == (1, 1, 1)
        return
    if n == 0:
        assert rows_view("op", "x", meta) == (0, meta.shape[-1], meta.shape[-1])
        return
    contiguous = offsets(meta) == list(range(n))
    rs = row_stride_of(meta)
    if not contiguous and rs is None:
        with pytest.raises(ValueError, match=r"^op: x"):
            rows_view("op", "x", meta)
        return
    rows, cols, row_stride = rows_view("op", "x", meta)
    assert view_fits(meta, rows, cols, row_stride)
    if contiguous:
        assert (rows, cols) == (1, n)  # one long row: the widest vectors, the fewest blocks
    else:
        assert cols == meta.shape[-1]


@PROPERTY
@given(layouts(filled=True))
def test_row_layout_splits_at_the_last_dim(meta: Meta) -> None:
    cols = meta.shape[-1]
    rs = row_stride_of(meta)
    if rs is None:
        with pytest.raises(ValueError, match=r"^op: x"):
            row_layout("op", "x", meta)
        return
    rows, row_stride = row_layout("op", "x", meta)
    assert rows == math.prod(meta.shape[:-1])
    assert view_fits(meta, rows, cols, row_stride)


@PROPERTY
@given(layouts(filled=True))
def test_row_layout2_finds_every_two_level_split(meta: Meta) -> None:
    cols = meta.shape[-1]
    offs = offsets(meta)
    last_ok = cols == 1 or meta.strides[-1] == 1
    if not (last_ok and two_level_exists(meta)):
        with pytest.raises(ValueError, match=r"^op: x"):
            row_layout2("op", "x", meta)
        return
    rows, inner, rs, outer = row_layout2("op", "x", meta)
    assert rows * cols == len(offs)
    assert inner <= 1 or rows % inner == 0
    assert two_level_fits(meta, inner, rs, outer)


@PROPERTY
@given(layouts(filled=True), st.data())
def test_joint_views_fit_both_arrays(x: Meta, data: st.DataObject) -> None:
    """x and out of one shape get one row split; each keeps its own strides."""
    out = Meta(x.shape, data.draw(strides_for(x.shape)), x.dtype)
    try:
        rows, cols, x_rs, o_rs = joint_rows_view("op", x, out)
    except ValueError:
        assert row_stride_of(x) is None or row_stride_of(out) is None
    else:
        assert view_fits(x, rows, cols, x_rs) and view_fits(out, rows, cols, o_rs)
    try:
        rows, inner, (x_rs, x_outer), (o_rs, o_outer) = joint_layout2("op", x, out)
    except ValueError:
        return
    assert rows == math.prod(x.shape[:-1])
    assert two_level_fits(x, inner, x_rs, x_outer) and two_level_fits(out, inner, o_rs, o_outer)


@PROPERTY
@given(layouts(), st.integers(0, BIG))
def test_span_is_the_exact_byte_range(meta: Meta, ptr: int) -> None:
    offs = offsets(meta)
    item = ITEM[meta.dtype]
    if not offs:
        assert _span(meta, ptr) is None
        return
    assert _span(meta, ptr) == (ptr + min(offs) * item, ptr + (max(offs) + 1) * item)


@PROPERTY
@given(layouts())
def test_self_overlap_is_never_missed(meta: Meta) -> None:
    offs = offsets(meta)
    if len(set(offs)) < len(offs):
        assert _self_overlapping(meta)


@PROPERTY
@given(layouts(views_only=True))
def test_views_without_broadcast_do_not_overlap_themselves(meta: Meta) -> None:
    """Slices, steps and permutations of one buffer (no stride 0) are never refused as
    self-overlapping: out= may be any such view."""
    if any(s == 0 and n > 1 for n, s in zip(meta.shape, meta.strides, strict=True)):
        return
    offs = offsets(meta)
    assert len(set(offs)) == len(offs)  # the model agrees: distinct elements
    assert not _self_overlapping(meta)


@PROPERTY
@given(layouts())
def test_rows_cover_every_byte(meta: Meta) -> None:
    """The overlap check's description of an array covers each byte it touches, exactly for
    rows of one stride."""
    r = _rows(meta)
    offs = offsets(meta)
    if not offs:
        assert r is None
        return
    assert r is not None
    item = ITEM[meta.dtype]
    touched = {off * item + b for off in offs for b in range(item)}
    lo, hi = min(touched), max(touched) + 1
    described = [(r.lo + i * r.stride, r.lo + i * r.stride + r.length) for i in range(r.n)]
    assert all(any(a <= b < e for a, e in described) for b in touched)
    if r.n > 1 and r.stride >= r.length:  # disjoint rows of one stride: the array's bytes
        assert sum(e - a for a, e in described) == len(touched)
    elif r.n > 1:  # rows longer than their stride (a view that overlaps itself): one range
        assert described[0][0] <= lo and hi <= described[-1][1]
    else:  # one bounding row
        assert described[0][0] <= lo and hi <= described[0][1]
