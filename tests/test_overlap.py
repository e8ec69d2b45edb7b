"""The runner's overlap test against brute force (CPU, no GPU): two strided arrays share a
byte exactly when ``_overlap`` says so for rows of one stride (the rows of a fused QKV buffer's
q, k and v), and ``_overlap`` never misses a shared byte for any other layout."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from aotkernels.ops._op import Meta, _overlap, _rows

ITEM = {"f32": 4, "f16": 2, "int8": 1}


def _bytes(meta: Meta, ptr: int) -> set[int]:
    item = ITEM[meta.dtype]
    out: set[int] = set()
    for idx in itertools.product(*(range(n) for n in meta.shape)):
        off = sum(i * s for i, s in zip(idx, meta.strides, strict=True))
        out.update(range(ptr + off * item, ptr + (off + 1) * item))
    return out


layouts = st.tuples(
    st.lists(st.integers(1, 4), min_size=1, max_size=3),  # shape
    st.lists(st.integers(-3, 40), min_size=3, max_size=3),  # strides (elements)
    st.integers(0, 200),  # element offset
    st.sampled_from(sorted(ITEM)),
)


def _meta(layout: tuple[list[int], list[int], int, str]) -> tuple[Meta, int]:
    shape, strides, offset, dtype = layout
    meta = Meta(tuple(shape), tuple(strides[: len(shape)]), dtype)
    return meta, 0x1000 + offset * ITEM[dtype]


@settings(max_examples=400, deadline=None)
@given(layouts, layouts)
def test_overlap_never_misses_and_is_exact_for_rows(la: tuple, lb: tuple) -> None:
    (ma, pa), (mb, pb) = _meta(la), _meta(lb)
    ra, rb = _rows(ma), _rows(mb)
    assert ra is not None and rb is not None
    shared = bool(_bytes(ma, pa) & _bytes(mb, pb))
    said = _overlap(pa, ra, pb, rb)
    assert said or not shared, "an overlap was missed"
    one_stride = ra.stride == rb.stride or 1 in (ra.n, rb.n)
    if ra.n > 1 and rb.n > 1 and one_stride and max(ra.length, rb.length) <= ra.stride:
        assert said == shared


def test_fused_qkv_slices_do_not_overlap() -> None:
    """q, k and v of one [tokens, (hq + 2 hk) * d] buffer interleave but share no element."""
    tokens, hq, hk, d = 7, 4, 2, 64
    row = (hq + 2 * hk) * d
    q = Meta((tokens, hq, d), (row, d, 1), "f16")
    k = Meta((tokens, hk, d), (row, d, 1), "f16")
    base = 0x10000
    rq, rk = _rows(q), _rows(k)
    assert rq is not None and rk is not None
    assert not _overlap(base, rq, base + hq * d * 2, rk)
    assert _overlap(base, rq, base + (hq * d - 1) * 2, rk)  # one element into q's rows
