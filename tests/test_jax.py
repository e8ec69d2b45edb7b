"""The JAX front end: ops under jax.jit as one XLA FFI custom call (aotkernels._xla).

Without a GPU, the host-only twin of the handler (``aotkernels_describe``) runs the same
attribute decoding and pointer patching on CPU buffers and returns the parameter block it would
launch with, so the launch description is checked end to end on any machine. GPU tests run the
real handler against jnp references.
"""

from __future__ import annotations

import functools
import re
import struct
import subprocess
import sys
from typing import Any

import pytest

from conftest import ROOT

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
        "kernels": (0x1000,),
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
        ({"tensor_maps": ((0, 0, 0, 1, 1, 1, 1, 1),)}, "tensor map 0 outside the parameter block"),
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


# --- the real handler on a GPU ----------------------------------------------------------------


def _silu_launch(x: Any) -> Any:
    """A launch description of ak_silu_<dtype> written by hand (no op layer involved)."""
    from aotkernels import _jax, device, loader
    from aotkernels.ops._elementwise import elementwise_config

    n = x.size
    dev = x.devices().pop().local_hardware_id if hasattr(x, "devices") else 0
    dt = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[str(x.dtype)]
    fam = loader.family_on("activation", dev)
    kernels = tuple(
        loader.family_on("activation", d).kernels[f"ak_silu_{dt}"]
        for d in range(device.device_count())
    )
    cfg = elementwise_config(1, n, x.dtype.itemsize, device.device_info(dev).sm_count, 4)
    return _jax.LaunchDescription(
        kernels=kernels,
        params=fam.params.pack(0, 0, 1, n, n, n),
        ptr_offsets=tuple(fam.ptr_offsets),
        slots=(1, 0),
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
