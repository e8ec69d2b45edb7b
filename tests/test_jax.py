"""The JAX front end: ops under jax.jit as one XLA FFI custom call (aotkernels._xla).

Without a GPU, the host-only twin of the handler (``aotkernels_describe``) runs the same
attribute decoding and pointer patching on CPU buffers and returns the parameter block it would
launch with, so the launch description is checked end to end on any machine. GPU tests run the
real handler against jnp references.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from helpers.fake_family import fake_family

# JAX would take 75% of the GPU's memory on first use, starving the torch tests after these.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
np = pytest.importorskip("numpy")


@functools.lru_cache(maxsize=1)
def _xla_missing() -> str | None:
    try:
        from aotkernels import _xla  # noqa: F401
    except ImportError as e:
        return f"this aotkernels build has no XLA extension ({e})"
    return None


needs_xla = pytest.mark.skipif(_xla_missing() is not None, reason=str(_xla_missing()))


@functools.lru_cache(maxsize=1)
def _jax_gpu_missing() -> str | None:
    if _xla_missing():
        return _xla_missing()
    try:
        if not jax.devices("cuda"):
            return "jax sees no CUDA device"
    except RuntimeError as e:
        return f"jax has no CUDA backend ({e})"
    return None


def needs_jax_gpu(fn: Any) -> Any:
    reason = _jax_gpu_missing()
    return pytest.mark.gpu(pytest.mark.skipif(reason is not None, reason=str(reason))(fn))


# The activation family's parameter struct (arch_matrix.toml): out, x, rows, cols, x_row_stride,
# out_row_stride.
ACT = struct.Struct("<QQqqqq")


def _describe(desc: Any, operands: list[Any], results: list[Any]) -> tuple[list[Any], bytes]:
    """Run the host-only handler: the op's results and the parameter block it would launch."""
    from aotkernels import _jax

    size = len(desc.params)
    out = _jax.emit(
        desc,
        operands,
        [*results, jax.ShapeDtypeStruct((size,), jnp.uint8)],
        target=_jax.DESCRIBE_TARGET,
    )
    return out[:-1], np.asarray(out[-1]).tobytes()


def _act_desc(rows: int, cols: int, slots: tuple[int, int] = (1, 0), **kw: Any) -> Any:
    from aotkernels import _jax

    fields = {
        "kernel": "activation/ak_silu_f32",
        "params": ACT.pack(0, 0, rows, cols, cols, cols),
        "ptr_offsets": (0, 8),
        "slots": slots,
        "grid": (1, 1, 1),
        "block": (32, 8, 1),
    }
    fields.update(kw)
    return _jax.LaunchDescription(**fields)


def test_import_does_not_import_jax() -> None:
    code = (
        "import sys, aotkernels, aotkernels.ops; import aotkernels._doctor as d; "
        "d.jax_support(); print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('jax', 'jaxlib')))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "tests", check=True
    )
    assert r.stdout.strip() == "[]", r.stdout


def test_doctor_says_whether_the_build_has_the_xla_extension(
    capsys: pytest.CaptureFixture[str], installed_kernels: Any
) -> None:
    from importlib import metadata

    from aotkernels.cli import main

    assert main(["doctor", "--arch", "9.0", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)["jax"]
    assert rep["xla_extension"] is (_xla_missing() is None)
    assert rep["jaxlib"] == metadata.version("jaxlib")
    header = Path(jax.ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
    api = re.findall(r"#define XLA_FFI_API_(?:MAJOR|MINOR) (\d+)", header.read_text())
    assert rep["jaxlib_ffi_api"] == ".".join(api)
    if rep["xla_extension"]:
        from aotkernels import _xla

        assert rep["problem"] is None  # the jaxlib it was built with (or a newer one) is here
        assert rep["built_against_jaxlib"] == _xla.JAXLIB_VERSION
        assert re.fullmatch(r"\d+\.\d+(\.\d+)?", rep["built_against_jaxlib"])
        assert re.fullmatch(r"0\.\d+", rep["ffi_api"])
        assert main(["doctor", "--arch", "9.0"]) == 0
        text = " ".join(capsys.readouterr().out.split())  # rich may wrap the line
        assert f"jax.jit: XLA extension built against jaxlib {_xla.JAXLIB_VERSION}'s" in text
    else:
        assert rep["built_against_jaxlib"] is None


def test_ffi_api_compatibility_rule() -> None:
    """XLA runs handlers of its own FFI API major version and its own or an older minor one
    (measured: a handler built against jaxlib 0.10.2's 0.3 runs under 0.11.2's 0.4; one built
    against 0.4 is refused by 0.3)."""
    from aotkernels._jax import check_ffi_api

    assert check_ffi_api((0, 3), (0, 4)) is None
    assert check_ffi_api((0, 4), (0, 4)) is None
    assert check_ffi_api((0, 4), None) is None  # no jaxlib headers to judge by: XLA will say
    assert "XLA FFI API 0.4, newer than the installed jaxlib's 0.3" in str(
        check_ffi_api((0, 4), (0, 3))
    )
    assert check_ffi_api((1, 0), (0, 9)) is not None


@needs_xla
def test_describe_patches_operand_and_result_addresses() -> None:
    rows, cols = 3, 40
    x = jnp.arange(rows * cols, dtype=jnp.bfloat16).reshape(rows, cols)

    @jax.jit
    def f(x: Any) -> Any:
        (out,), block = _describe_traced(_act_desc(rows, cols), [x], [x])
        return out, block

    out, block = f(x)
    out_ptr, x_ptr, *rest = ACT.unpack(np.asarray(block).tobytes())
    assert x_ptr == x.unsafe_buffer_pointer()
    assert out_ptr == out.unsafe_buffer_pointer()
    assert out_ptr != x_ptr
    assert rest == [rows, cols, cols, cols]  # the non-pointer fields pass through untouched


def _describe_traced(desc: Any, operands: list[Any], like: list[Any]) -> tuple[list[Any], Any]:
    """``_describe`` for use inside jit: returns the block as an array (no host copy)."""
    from aotkernels import _jax

    results = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in like]
    out = _jax.emit(
        desc,
        operands,
        [*results, jax.ShapeDtypeStruct((len(desc.params),), jnp.uint8)],
        target=_jax.DESCRIBE_TARGET,
    )
    return out[:-1], out[-1]


@needs_xla
def test_describe_null_slot_and_eager_call() -> None:
    x = jnp.ones((2, 8), jnp.float32)
    _, block = _describe(
        _act_desc(2, 8, slots=(1, -1)), [x], [jax.ShapeDtypeStruct(x.shape, x.dtype)]
    )
    out_ptr, x_ptr, *_ = ACT.unpack(block)
    assert out_ptr != 0 and x_ptr == 0


@needs_xla
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"slots": (1, 5)}, "slot 5 outside [-1, 3)"),
        ({"slots": (1,)}, "2 pointer offsets but 1 slots"),
        ({"ptr_offsets": (0, 44)}, "pointer offset 44 outside the 48-byte parameter block"),
        ({"grid": (1, 1)}, "grid must have 3 dimensions"),
        ({"block": (0, 1, 1)}, "block out of range"),
        (
            {"tensor_maps": ((0, 0, 0, 1, 1, 1, 1, 1),)},
            "tensor_maps must hold 18 values per map, got 8",
        ),
        ({"tensor_maps": ((0, 0, 0, 2) + (1,) * 14,)}, "tensor map 0 outside the parameter block"),
    ],
)
def test_describe_rejects_bad_descriptions(fields: dict[str, Any], message: str) -> None:
    x = jnp.ones((2, 8), jnp.float32)
    with pytest.raises(jax.errors.JaxRuntimeError, match=re.escape(message)):
        _describe(_act_desc(2, 8, **fields), [x], [jax.ShapeDtypeStruct(x.shape, x.dtype)])


@needs_xla
def test_describe_lowering_names_the_target_and_vmaps_sequentially() -> None:
    x = jnp.ones((4, 2, 8), jnp.float32)

    def f(x: Any) -> Any:
        (out,), block = _describe_traced(_act_desc(2, 8), [x], [x])
        return out, block

    text = jax.jit(f).lower(x[0]).as_text()
    assert "stablehlo.custom_call @aotkernels_describe" in text
    _, blocks = jax.jit(jax.vmap(f))(x)
    assert blocks.shape == (4, ACT.size)
    for b in blocks:  # one call per batch element, with that element's description
        assert ACT.unpack(np.asarray(b).tobytes())[2:] == (2, 8, 8, 8)
    assert "while" in jax.jit(jax.vmap(f)).lower(x).as_text()


# --- the generic lowering of real op declarations, on CPU ---------------------------------------


def _fields(family: str, block: bytes) -> dict[str, Any]:
    """A launch's parameter block decoded with the family's layout (as the loader reads it)."""
    fam = fake_family(family, "sm_90")
    return dict(zip((n for n, _ in fam.param_fields), fam.params.unpack(block), strict=True))


@pytest.fixture
def no_gpu_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device-dependent inputs of a lowering, faked: the family's layout, an H100-sized SM
    count and a kernel table (the describe handler launches nothing)."""
    from aotkernels import _jax, device, loader

    class _Device:
        sm_count = 132

    monkeypatch.setattr(loader, "family_on", lambda name, d: fake_family(name, "sm_90"))
    monkeypatch.setattr(device, "device_info", lambda d: _Device())
    monkeypatch.setattr(_jax, "kernel_name", lambda family, symbol: f"{family}/{symbol}")


def _lowered(op: Any, arrays: list[Any], **attrs: Any) -> tuple[Any, list[bytes]]:
    """``op`` lowered under jit with the describe handler: its results and the parameter block
    of each launch, with the addresses XLA gave the buffers."""
    from aotkernels import _jax

    values = {a.name: a.check(op.name, attrs.get(a.name, a.default)) for a in op.attrs}

    @jax.jit
    def f(arrays: list[Any]) -> Any:
        blocks: list[Any] = []
        return _jax.lower(op, arrays, values, 0, blocks=blocks), blocks

    res, blocks = f(arrays)
    return res, [np.asarray(b).tobytes() for b in blocks]


@needs_xla
def test_lowering_binds_inputs_and_outputs_by_name(no_gpu_needed: None) -> None:
    from aotkernels.ops.activation import SILU

    x = jnp.ones((4, 40), jnp.bfloat16)
    out, (block,) = _lowered(SILU, [x])
    v = _fields("activation", block)
    assert v["x"] == x.unsafe_buffer_pointer()
    assert v["out"] == out.unsafe_buffer_pointer()
    assert v["rows"] * v["cols"] == 160 and out.shape == x.shape and out.dtype == x.dtype


@needs_xla
def test_lowering_gives_mutated_inputs_fresh_buffers(no_gpu_needed: None) -> None:
    from aotkernels.ops.norm import FUSED_ADD_RMS_NORM

    x, r, w = jnp.ones((4, 64)), jnp.full((4, 64), 2.0), jnp.ones((64,))
    (new_x, new_r), (block,) = _lowered(FUSED_ADD_RMS_NORM, [x, r, w], eps=1e-5)
    v = _fields("norm", block)
    # The kernel writes x and residual in place: XLA hands it copies (the inputs stay live), and
    # those copies are what the op returns.
    assert v["x"] == v["out"] == new_x.unsafe_buffer_pointer() != x.unsafe_buffer_pointer()
    assert v["residual"] == new_r.unsafe_buffer_pointer() != r.unsafe_buffer_pointer()
    assert v["weight"] == w.unsafe_buffer_pointer() and v["bias"] == 0
    assert v["eps"] == pytest.approx(1e-5) and (v["rows"], v["hidden"]) == (4, 64)


@needs_xla
def test_lowering_threads_a_workspace_between_launches(no_gpu_needed: None) -> None:
    """rms_norm_backward: the first launch writes per-block partial sums into a hidden workspace,
    the second reduces them into dweight; the workspace is one buffer across both calls."""
    from aotkernels.ops.norm import RMS_NORM_BACKWARD

    g, x, w = jnp.ones((4, 64)), jnp.full((4, 64), 2.0), jnp.ones((64,))
    (dx, dw), blocks = _lowered(RMS_NORM_BACKWARD, [g, x, w])
    first, second = (_fields("norm", b) for b in blocks)
    assert first["ws"] == second["ws"] != 0
    assert first["out"] == dx.unsafe_buffer_pointer() and first["dy"] == g.unsafe_buffer_pointer()
    assert second["dweight"] == dw.unsafe_buffer_pointer()
    assert dx.shape == x.shape and dw.shape == w.shape


@needs_xla
def test_lowering_of_absent_optionals_and_empty_arrays(no_gpu_needed: None) -> None:
    from aotkernels.ops.norm import LAYER_NORM, RMS_NORM

    _, (block,) = _lowered(LAYER_NORM, [jnp.ones((4, 64)), None, None])
    v = _fields("norm", block)
    assert v["weight"] == v["bias"] == 0 and v["flags"] == 0
    out, blocks = _lowered(RMS_NORM, [jnp.ones((0, 64)), jnp.ones((64,))])
    assert blocks == [] and out.shape == (0, 64)  # nothing to launch, an empty result


@needs_xla
def test_lowering_reports_bad_inputs_with_the_ops_messages(no_gpu_needed: None) -> None:
    from aotkernels.ops.activation import SILU

    with pytest.raises(TypeError, match=r"silu: x\.dtype must be one of .*, got int32"):
        _lowered(SILU, [jnp.ones((4, 8), jnp.int32)])


@needs_xla
def test_cpu_arrays_are_refused_by_name() -> None:
    import aotkernels as ak

    cpu = jax.devices("cpu")[0]
    x = jax.device_put(jnp.ones((4, 8)), cpu)
    with pytest.raises(ValueError, match="silu: x must be on a CUDA device, got one on"):
        ak.silu(x)
    with jax.default_device(cpu), pytest.raises(NotImplementedError, match="CUDA devices only"):
        jax.jit(ak.silu)(x)


def test_builds_without_the_xla_extension_refuse_traced_arrays_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Traced arrays cannot take the DLPack path: the error names the missing extension (not a
    tracer's missing __dlpack_device__)."""
    import aotkernels as ak
    from aotkernels import _jax

    monkeypatch.setitem(sys.modules, "aotkernels._xla", None)  # its import now fails
    monkeypatch.delattr(ak, "_xla", raising=False)
    assert not _jax.available()
    with pytest.raises(NotImplementedError, match=r"no XLA extension \(aotkernels\._xla\)"):
        jax.jit(ak.silu)(jnp.ones((4, 8)))


# --- the real handler on a GPU ----------------------------------------------------------------


def _silu_launch(x: Any) -> Any:
    """A launch description of ak_silu_<dtype> written by hand (no op layer involved)."""
    from aotkernels import _jax, device, loader
    from aotkernels.dtypes import BY_LONG
    from aotkernels.ops._elementwise import elementwise_config

    n = x.size
    dev = x.devices().pop().local_hardware_id if hasattr(x, "devices") else 0
    dt = BY_LONG[str(x.dtype)]
    fam = loader.family_on("activation", dev)
    c = loader.constants("activation")
    sms = device.device_info(dev).sm_count
    cfg = elementwise_config(1, n, x.dtype.itemsize, sms, c["unroll"], c["max_threads"])
    # The family's fields by name (pointers 0: the handler patches them): one row of n.
    fields = {"rows": 1, "cols": n, "x_row_stride": n, "out_row_stride": n}
    slots = {"out": 1, "x": 0}  # args first (x), then rets (y); other pointers null
    return _jax.LaunchDescription(
        kernel=_jax.kernel_name("activation", f"ak_silu_{dt}"),
        params=fam.params.pack(*(fields.get(name, 0) for name, _ in fam.param_fields)),
        ptr_offsets=tuple(fam.ptr_offsets),
        slots=tuple(slots.get(name, -1) for name, t in fam.param_fields if t == "ptr"),
        grid=(cfg.grid[0], cfg.grid[1], 1),
        block=(cfg.block[0], cfg.block[1], 1),
    )


@needs_jax_gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_handler_runs_a_hand_written_launch(dtype: str) -> None:
    from aotkernels import _jax

    x = jax.random.normal(jax.random.key(0), (37, 129), jnp.float32).astype(dtype)
    desc = _silu_launch(x)

    @jax.jit
    def f(x: Any) -> Any:
        (y,) = _jax.emit(desc, [x], [jax.ShapeDtypeStruct(x.shape, x.dtype)])
        return y * 2  # the custom call's result feeds an XLA op on the same stream

    got = np.asarray(f(x).astype(jnp.float32))
    ref = np.asarray(jax.nn.silu(x.astype(jnp.float32)) * 2)
    rtol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=1e-5)
    assert "custom_call @aotkernels_launch" in f.lower(x).as_text()


# --- every op under jax.jit against jnp -----------------------------------------------------

# (rtol, atol) per output dtype: each kernel computes in f32 and rounds once; the jnp reference
# computes in f32 too (XLA's own exp / erf / tanh / rsqrt, a few f32 ulps apart from CUDA's).
TOL = {
    # f32: libm differences and sums of up to ~1e3 terms in another order: ~1e-6 relative.
    "float32": (2e-5, 2e-5),
    # one rounding to f16 (half an ulp: 2**-11); an f32 difference can flip a tie: one ulp.
    "float16": (1e-3, 1e-5),
    # one rounding to bf16 (half an ulp: 2**-9); a flipped tie: one ulp (2**-8) and margin.
    "bfloat16": (8e-3, 1e-5),
}
FLOATS = ["float32", "float16", "bfloat16"]


def _close(got: Any, ref: Any) -> None:
    rtol, atol = TOL[str(got.dtype)]
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_allclose(
        np.asarray(got.astype(jnp.float32)), np.asarray(ref, np.float32), rtol=rtol, atol=atol
    )


def _f32(x: Any) -> Any:
    return x.astype(jnp.float32)


def _rms_ref(x: Any, w: Any, eps: float = 1e-6) -> Any:
    xf = _f32(x)
    return xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps) * _f32(w)


def _ln_ref(x: Any, w: Any, b: Any, eps: float = 1e-5) -> Any:
    xf = _f32(x)
    mu = jnp.mean(xf, -1, keepdims=True)
    y = (xf - mu) * jax.lax.rsqrt(jnp.mean((xf - mu) ** 2, -1, keepdims=True) + eps)
    return y * (1 if w is None else _f32(w)) + (0 if b is None else _f32(b))


def _gated_ref(act: Any, x: Any) -> Any:
    d = x.shape[-1] // 2
    return act(_f32(x[..., :d])) * _f32(x[..., d:])


def _gelu(approximate: bool) -> Any:
    return lambda t: jax.nn.gelu(t, approximate=approximate)


# name -> (inputs by shape, our call, jnp reference of the f32 result)
UNARY = {
    "relu": (lambda ak, x: ak.relu(x), lambda x: jnp.maximum(_f32(x), 0)),
    "gelu": (lambda ak, x: ak.gelu(x), lambda x: _gelu(False)(_f32(x))),
    "gelu_tanh": (lambda ak, x: ak.gelu(x, "tanh"), lambda x: _gelu(True)(_f32(x))),
    "silu": (lambda ak, x: ak.silu(x), lambda x: jax.nn.silu(_f32(x))),
    "sigmoid": (lambda ak, x: ak.sigmoid(x), lambda x: jax.nn.sigmoid(_f32(x))),
    "silu_and_mul": (lambda ak, x: ak.silu_and_mul(x), lambda x: _gated_ref(jax.nn.silu, x)),
    "gelu_and_mul": (lambda ak, x: ak.gelu_and_mul(x), lambda x: _gated_ref(_gelu(False), x)),
    "gelu_tanh_and_mul": (
        lambda ak, x: ak.gelu_and_mul(x, "tanh"),
        lambda x: _gated_ref(_gelu(True), x),
    ),
    "softmax": (lambda ak, x: ak.softmax(x), lambda x: jax.nn.softmax(_f32(x), axis=-1)),
}


def _normal(shape: tuple[int, ...], dtype: str, seed: int = 0) -> Any:
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32).astype(dtype)


@needs_jax_gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(UNARY))
def test_jit_unary_ops(name: str, dtype: str) -> None:
    import aotkernels as ak

    ours, ref = UNARY[name]
    x = _normal((3, 37, 258), dtype)  # odd rows, a row length that is not a multiple of 16 B
    got = jax.jit(lambda x: ours(ak, x))(x)
    assert got.dtype == x.dtype
    _close(got, ref(x))


@needs_jax_gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_jit_norms(dtype: str) -> None:
    import aotkernels as ak

    x, w, b = _normal((37, 1000), dtype), _normal((1000,), dtype, 1), _normal((1000,), dtype, 2)
    _close(jax.jit(lambda x, w: ak.rms_norm(x, w, 1e-5))(x, w), _rms_ref(x, w, 1e-5))
    _close(jax.jit(lambda x, w, b: ak.layer_norm(x, w, b))(x, w, b), _ln_ref(x, w, b))
    _close(jax.jit(lambda x: ak.layer_norm(x))(x), _ln_ref(x, None, None))


@needs_jax_gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_fused_add_rms_norm_returns_new_arrays(dtype: str) -> None:
    import aotkernels as ak

    x, r, w = _normal((37, 1000), dtype), _normal((37, 1000), dtype, 1), _normal((1000,), dtype, 2)
    x_before, r_before = np.asarray(x), np.asarray(r)
    s = (_f32(x) + _f32(r)).astype(dtype)  # the new residual: the sum, rounded once
    for fn in (jax.jit(ak.fused_add_rms_norm), ak.fused_add_rms_norm):  # traced and eager
        new_x, new_r = fn(x, r, w)
        np.testing.assert_array_equal(np.asarray(new_r), np.asarray(s))
        _close(new_x, _rms_ref(s, w))
        # JAX arrays are immutable: the inputs keep their values.
        np.testing.assert_array_equal(np.asarray(x), x_before)
        np.testing.assert_array_equal(np.asarray(r), r_before)


def _small_ints(shape: tuple[int, ...], dtype: Any, seed: int) -> Any:
    """Integers in [-3, 3]: exact in every operand dtype, and f32 sums of their products are
    exact, so only the output's rounding differs from the reference."""
    return jax.random.randint(jax.random.key(seed), shape, -3, 4).astype(dtype)


@needs_jax_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_jit_matmul(dtype: str) -> None:
    import aotkernels as ak

    a, b = _small_ints((67, 136), dtype, 0), _small_ints((136, 96), dtype, 1)
    ref = _f32(a) @ _f32(b)
    _close(jax.jit(ak.matmul)(a, b), ref)
    got = jax.jit(lambda a, b: ak.matmul(a, b, jnp.float32))(a, b)
    assert got.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))


@needs_jax_gpu
def test_jit_scaled_mm() -> None:
    import aotkernels as ak

    fp8 = jnp.float8_e4m3fn
    a, b = _small_ints((64, 128), fp8, 0), _small_ints((128, 96), fp8, 1)
    sa, sb = jnp.array([0.5], jnp.float32), jnp.array([2.0], jnp.float32)
    for fast in (False, True):  # an attribute of the custom call: both accumulation loops

        def f(a: Any, b: Any, sa: Any, sb: Any, fast: bool = fast) -> Any:
            return ak.scaled_mm(a, b, sa, sb, jnp.bfloat16, use_fast_accum=fast)

        _close(jax.jit(f)(a, b, sa, sb), (_f32(a) @ _f32(b)) * 0.5 * 2.0)
    i8 = _small_ints((64, 128), jnp.int8, 2), _small_ints((128, 96), jnp.int8, 3)
    got = jax.jit(lambda a, b: ak.scaled_mm(a, b, out_dtype=jnp.int32))(*i8)
    ref = i8[0].astype(jnp.int32) @ i8[1].astype(jnp.int32)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))


@needs_jax_gpu
def test_hlo_has_our_custom_call_and_eager_calls_work() -> None:
    import aotkernels as ak

    x = _normal((4, 256), "bfloat16")
    text = jax.jit(ak.silu).lower(x).as_text()
    assert "stablehlo.custom_call @aotkernels_launch" in text
    _close(ak.silu(x), jax.nn.silu(_f32(x)))  # eager: the same custom call, jitted once


@needs_jax_gpu
def test_vmap_over_a_leading_axis() -> None:
    import aotkernels as ak

    x, w = _normal((5, 7, 512), "bfloat16"), _normal((512,), "bfloat16", 1)
    got = jax.jit(jax.vmap(lambda x: ak.rms_norm(x, w)))(x)
    _close(got, _rms_ref(x, w))
    _close(jax.vmap(ak.silu)(x), jax.nn.silu(_f32(x)))


@needs_jax_gpu
def test_out_is_refused() -> None:
    import aotkernels as ak

    x = _normal((4, 256), "float32")
    with pytest.raises(TypeError, match="out= is not supported"):
        ak.silu(x, out=jnp.empty_like(x))
    with pytest.raises(TypeError, match="out= is not supported"):
        jax.jit(lambda x: ak.silu(x, out=x))(x)


@needs_jax_gpu
def test_bad_inputs_raise_typed_errors_under_jit() -> None:
    import aotkernels as ak

    with pytest.raises(TypeError, match=r"silu: x\.dtype must be one of"):
        jax.jit(ak.silu)(jnp.ones((4, 8), jnp.int32))
    with pytest.raises(ValueError, match="rms_norm: weight"):
        jax.jit(ak.rms_norm)(jnp.ones((4, 8)), jnp.ones((7,)))


# --- backward ops and attention under jax.jit ----------------------------------------------------

FORWARD_REFS = {
    "relu": lambda t: jnp.maximum(t, 0),
    "gelu": _gelu(False),
    "silu": jax.nn.silu,
    "sigmoid": jax.nn.sigmoid,
}


def _vjp(fn: Any, *primals: Any) -> Any:
    """The f32 gradients of ``fn`` at ``primals`` (rounded inputs, f32 math) as a function of the
    output's gradient."""
    _, pullback = jax.vjp(fn, *(_f32(p) for p in primals))
    return lambda g: pullback(_f32(g))


@needs_jax_gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(FORWARD_REFS))
def test_jit_elementwise_backward(name: str, dtype: str) -> None:
    import aotkernels as ak

    x, g = _normal((37, 258), dtype), _normal((37, 258), dtype, 1)
    ours = getattr(ak, f"{name}_backward")
    (ref,) = _vjp(FORWARD_REFS[name], x)(g)
    if name == "relu":  # the derivative's step at 0 is a convention; N(0, 1) never hits it
        assert not np.any(np.asarray(x) == 0)
    _close(jax.jit(ours)(g, x), ref)


@needs_jax_gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_jit_gated_and_softmax_backward(dtype: str) -> None:
    import aotkernels as ak

    x, g = _normal((37, 258), dtype), _normal((37, 129), dtype, 1)
    (ref,) = _vjp(lambda t: _gated_ref(jax.nn.silu, t), x)(g)
    _close(jax.jit(ak.silu_and_mul_backward)(g, x), ref)
    (ref,) = _vjp(lambda t: _gated_ref(_gelu(True), t), x)(g)
    _close(jax.jit(lambda g, x: ak.gelu_and_mul_backward(g, x, "tanh"))(g, x), ref)
    y = jax.nn.softmax(_f32(_normal((37, 258), dtype, 2)), axis=-1).astype(dtype)
    gy = _normal((37, 258), dtype, 3)
    ref = _f32(y) * (_f32(gy) - jnp.sum(_f32(gy) * _f32(y), -1, keepdims=True))
    _close(jax.jit(ak.softmax_backward)(gy, y), ref)


@needs_jax_gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_jit_norm_backward(dtype: str) -> None:
    """Two launches each (per-block partial weight gradients in a workspace, then their sum):
    the workspace passes from one custom call to the next inside the program."""
    import aotkernels as ak

    x, g = _normal((37, 1000), dtype), _normal((37, 1000), dtype, 1)
    w, b = _normal((1000,), dtype, 2), _normal((1000,), dtype, 3)
    dx, dw = jax.jit(ak.rms_norm_backward)(g, x, w)
    ref_dx, ref_dw = _vjp(_rms_ref, x, w)(g)
    _close(dx, ref_dx)
    _close(dw, ref_dw)
    dx, dw, db = jax.jit(ak.layer_norm_backward)(g, x, w, b)
    ref_dx, ref_dw, ref_db = _vjp(_ln_ref, x, w, b)(g)
    for got, ref in ((dx, ref_dx), (dw, ref_dw), (db, ref_db)):
        _close(got, ref)


def _attention_ref(q: Any, k: Any, v: Any, causal: bool) -> Any:
    """f32 softmax(q k^T / sqrt(D)) v per head, [B, S, H, D], keys shared by H / Hkv heads."""
    rep = q.shape[2] // k.shape[2]
    qf, kf, vf = _f32(q), jnp.repeat(_f32(k), rep, axis=2), jnp.repeat(_f32(v), rep, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", qf, kf) / np.sqrt(q.shape[-1])
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        keep = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq)
        s = jnp.where(keep, s, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), vf)


# As FlashAttention: probabilities rounded to the operand dtype before the P @ V product add a
# rounding per term; outputs of N(0, 1) inputs are O(1) averages.
ATTENTION_TOL = {"float16": (2e-3, 3e-3), "bfloat16": (1e-2, 2e-2)}


@needs_jax_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_jit_attention(dtype: str, causal: bool) -> None:
    import aotkernels as ak

    q = _normal((2, 77, 8, 64), dtype)
    k, v = _normal((2, 77, 2, 64), dtype, 1), _normal((2, 77, 2, 64), dtype, 2)
    got = jax.jit(lambda q, k, v: ak.attention(q, k, v, causal))(q, k, v)
    rtol, atol = ATTENTION_TOL[dtype]
    np.testing.assert_allclose(
        np.asarray(_f32(got)), np.asarray(_attention_ref(q, k, v, causal)), rtol=rtol, atol=atol
    )


def _assert_attention_close(got: Any, ref: Any, dtype: str) -> None:
    rtol, atol = ATTENTION_TOL[dtype]
    np.testing.assert_allclose(np.asarray(_f32(got)), np.asarray(ref), rtol=rtol, atol=atol)


@needs_jax_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_jit_attention_varlen(dtype: str) -> None:
    import aotkernels as ak

    bounds = [0, 5, 5, 45]  # an empty sequence between a short and a long one
    q = _normal((45, 8, 64), dtype)
    k, v = _normal((45, 2, 64), dtype, 1), _normal((45, 2, 64), dtype, 2)
    cu = jnp.asarray(bounds, jnp.int32)
    got = jax.jit(lambda q, k, v, cu: ak.attention_varlen(q, k, v, cu, cu, 40, 40, True))(
        q, k, v, cu
    )
    ref = jnp.concatenate(
        [
            _attention_ref(q[None, s:e], k[None, s:e], v[None, s:e], True)[0]
            for s, e in itertools.pairwise(bounds)
            if e > s
        ]
    )
    _assert_attention_close(got, ref, dtype)


@needs_jax_gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_jit_attention_decode(dtype: str) -> None:
    import aotkernels as ak

    lens = [10, 64, 33]
    q = _normal((3, 1, 8, 64), dtype)
    k, v = _normal((3, 64, 2, 64), dtype, 1), _normal((3, 64, 2, 64), dtype, 2)
    got = jax.jit(ak.attention_decode)(q, k, v, jnp.asarray(lens, jnp.int32))
    ref = jnp.concatenate(
        [
            _attention_ref(q[b : b + 1], k[b : b + 1, :n], v[b : b + 1, :n], False)
            for b, n in enumerate(lens)
        ]
    )
    _assert_attention_close(got, ref, dtype)
