"""Runtime: import without a driver, devices, loading, streams, threads, graphs, frameworks.

CPU tests run everywhere; GPU tests (marker `gpu`) need an NVIDIA GPU and torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import aotkernels as ak
from helpers.sanitizer import assert_clean, sanitizer_or_skip

SCRIPTS = Path(__file__).parent / "scripts"


def _run(
    script: str,
    env: dict[str, str] | None = None,
    timeout: int = 300,
    prefix: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(prefix or []), sys.executable, str(SCRIPTS / script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _json_line(proc: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- CPU ------------------------------------------------------------------------------------


def test_import_touches_no_cuda() -> None:
    code = (
        "import sys, time; t = time.perf_counter(); import aotkernels; "
        "dt = time.perf_counter() - t; "
        "bad = [m for m in sys.modules if m.startswith(('cuda', 'torch', 'cupy', 'jax')) "
        "or m == 'aotkernels._core']; print(dt, bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split(maxsplit=1)
    assert out[1].strip() == "[]"
    assert float(out[0]) < 0.5


def test_no_driver_gives_clear_error_at_first_op() -> None:
    """With no usable driver (CUDA_VISIBLE_DEVICES hides every GPU, or no libcuda on CI),
    the first op raises AotKernelsError while matrix/doctor --arch keep working."""
    code = (
        "import aotkernels as ak\n"
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from helpers.fake_dlpack import FakeCudaArray\n"
        "assert 'activation' in ak.matrix()['families']\n"
        "assert ak.doctor(arch='9.0')['devices'][0]['families']['activation']['image']\n"
        "try:\n    ak.silu(FakeCudaArray((4,)))\nexcept ak.AotKernelsError as e:\n"
        "    print('AotKernelsError:', e)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("AotKernelsError:"), proc.stdout
    assert "driver" in proc.stdout or "device" in proc.stdout


def test_error_hierarchy() -> None:
    assert issubclass(ak.NoKernelImageError, ak.AotKernelsError)
    assert issubclass(ak.DriverTooOldError, ak.AotKernelsError)
    assert issubclass(ak.AotKernelsError, RuntimeError)


def test_doctor_simulated_arch() -> None:
    rep = ak.doctor(arch="8.7")
    fams = rep["devices"][0]["families"]
    assert fams["activation"]["image"] == "sm_86"
    assert "generic cubin" in fams["activation"]["reason"]


# --- GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_loaded_image_matches_choice() -> None:
    """On the GPU, the driver runs exactly the chosen image (function attributes say so)."""
    from aotkernels import device, loader

    ak.preload()
    dev = device.device_info(0)
    for name in loader.manifest()["families"]:
        fam = loader.family_on(name, 0)
        choice = fam.choice
        assert choice.image["kind"] == "cubin", choice.reason
        assert fam.binary_version == dev.cc[0] * 10 + dev.cc[1]
        assert choice.target.startswith(f"sm_{dev.cc[0]}{dev.cc[1]}")


@pytest.mark.gpu
def test_doctor_on_this_gpu() -> None:
    rep = ak.doctor()
    assert rep["driver"] is not None and rep["devices"]
    for d in rep["devices"]:
        for fam in d["families"].values():
            assert fam["image"], fam["reason"]


@pytest.mark.gpu
def test_cupy_in_cupy_out() -> None:
    cp = pytest.importorskip("cupy")
    x = cp.random.standard_normal((37, 129), dtype=cp.float32)
    y = ak.silu(x)
    assert isinstance(y, cp.ndarray) and y.shape == x.shape
    cp.testing.assert_allclose(y, x / (1 + cp.exp(-x)), rtol=2e-6, atol=1e-7)
    g = ak.silu_and_mul(x[:, :128])
    assert isinstance(g, cp.ndarray) and g.shape == (37, 64)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        z = ak.relu(x)
    s.synchronize()
    cp.testing.assert_array_equal(z, cp.maximum(x, 0))


@pytest.mark.gpu
def test_jax_in_jax_out() -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np

    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    x = jax.random.normal(jax.random.PRNGKey(0), (33, 257), dtype=jnp.float32)
    y = ak.gelu(x)
    assert isinstance(y, jax.Array) and y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_allclose(
        np.asarray(y), np.asarray(jax.nn.gelu(x, approximate=False)), rtol=1e-5, atol=1e-6
    )
    xb = x.astype(jnp.bfloat16)
    yb = ak.silu_and_mul(xb[:, :256])
    assert isinstance(yb, jax.Array) and yb.shape == (33, 128) and yb.dtype == jnp.bfloat16
    with pytest.raises(TypeError, match="immutable"):
        ak.relu(x, out=x)


@pytest.mark.gpu
def test_side_stream_producer() -> None:
    """Input written by a slow kernel on a side stream; the op on that stream sees it."""
    import torch

    side = torch.cuda.Stream()
    src = torch.randn(1 << 20, device="cuda")
    ref = torch.nn.functional.silu(src)
    for _ in range(20):
        with torch.cuda.stream(side):
            x = torch.empty_like(src)
            torch.cuda._sleep(2_000_000)  # ~1 ms of spinning before the data lands
            x.copy_(src)
            y = ak.silu(x)  # default: torch's current stream, i.e. `side`
            z = torch.empty_like(x)
            ak.silu(x, out=z, stream=side)  # explicit stream object
        side.synchronize()
        assert torch.allclose(y, ref) and torch.allclose(z, ref)


@pytest.mark.gpu
def test_stream_is_the_callers() -> None:
    """A launch lands on the stream given, not the default one: a graph capture proves it."""
    import torch

    ak.preload()
    x = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ak.sigmoid(x, out=out)
        y = ak.silu_and_mul(x.view(64, 64))
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
        assert torch.allclose(out, torch.sigmoid(x))
        v = x.view(64, 64)
        assert torch.allclose(y, torch.nn.functional.silu(v[:, :32]) * v[:, 32:])


@pytest.mark.gpu
def test_first_call_during_capture() -> None:
    res = _json_line(_run("capture_without_preload.py"))
    assert res["outcome"] == "works" or res["outcome"].startswith("error:"), res


@pytest.mark.gpu
def test_32_threads_cold_start() -> None:
    res = _json_line(_run("cold_start_threads.py"))
    assert res["errors"] == []
    assert res["loads"] == ["activation", "gated"]  # each family loaded exactly once
    assert res["identical"]


@pytest.mark.gpu
def test_force_ptx_jit_runs_ptx() -> None:
    import torch

    from aotkernels.loader import manifest
    from aotkernels.select import parse_version

    cc = torch.cuda.get_device_capability()
    proc = _run("ptx_jit.py", env={"CUDA_FORCE_PTX_JIT": "1"})
    images = manifest()["families"]["activation"]["images"]
    if not any(i["kind"] == "ptx" and parse_version(i["cc"]) <= cc for i in images):
        # A build restricted by AOTKERNELS_ARCHS may hold no PTX for this device: forced JIT
        # must then refuse with the typed error that says so, not run a cubin.
        assert proc.returncode != 0
        assert "NoKernelImageError" in proc.stderr and "a PTX target" in proc.stderr
        return
    res = _json_line(proc)
    assert res["ok"] and res["kind"] == "ptx"
    assert res["target"] == f"compute_{res['ptx_version']}"
    assert res["binary_version"] == cc[0] * 10 + cc[1]


@pytest.mark.gpu
def test_fork_after_import() -> None:
    code = (
        "import os, aotkernels as ak\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    import torch\n"
        "    x = torch.randn(100, device='cuda')\n"
        "    ok = torch.allclose(ak.relu(x), torch.relu(x))\n"
        "    os._exit(0 if ok else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('child', os.waitstatus_to_exitcode(status))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "child 0", proc.stdout + proc.stderr


def _two_gpus() -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip(
            f"needs 2 GPUs (cuda:1 driven while cuda:0 is current), found "
            f"{torch.cuda.device_count()}"
        )


@pytest.mark.gpu
def test_ops_run_on_the_inputs_device() -> None:
    """Arrays on cuda:1 while cuda:0 is current: every family computes on cuda:1, on cuda:1's
    current stream (its input lands there after a ~10 ms spin, so an op launched on any other
    device or stream reads the NaN it held before), returns cuda:1 arrays and leaves cuda:0
    current."""
    import torch

    _two_gpus()
    dev = torch.device("cuda", 1)
    src = torch.randn(512, 256, device=dev).to(torch.bfloat16)
    w = (torch.rand(256, device=dev) + 0.5).to(torch.bfloat16)
    a_src = torch.randint(-2, 3, (512, 256), device=dev).to(torch.bfloat16)
    b = torch.randint(-2, 3, (256, 64), device=dev).to(torch.bfloat16)
    x, a = torch.full_like(src, float("nan")), torch.full_like(a_src, float("nan"))
    e4m3 = torch.float8_e4m3fn
    one = torch.ones(1, device=dev)
    with torch.cuda.device(dev):
        torch.cuda._sleep(20_000_000)
        x.copy_(src)
        a.copy_(a_src)
    with torch.cuda.device(0):
        r = torch.randn_like(src)  # on cuda:1: torch follows the tensor, not the current device
        r_ref = (src.float() + r.float()).to(torch.bfloat16)
        outs = {
            "relu": ak.relu(x),
            "silu_and_mul": ak.silu_and_mul(x),
            "rms_norm": ak.rms_norm(x, w),
            "softmax": ak.softmax(x),
            "matmul": ak.matmul(a, b),
            "scaled_mm": ak.scaled_mm(
                a.to(e4m3), b.t().contiguous().to(e4m3).t(), one, one, out_dtype="float32"
            ),
        }
        out = torch.full_like(x, float("nan"))
        assert ak.silu(x, out=out) is out
        xc = x.clone()
        ak.fused_add_rms_norm(xc, r, w)
        assert torch.cuda.current_device() == 0
    torch.cuda.synchronize(dev)
    refs = {
        "relu": torch.relu(src),
        "silu_and_mul": torch.nn.functional.silu(src[:, :128].float()) * src[:, 128:].float(),
        "rms_norm": src.double()
        * (src.double().square().mean(-1, keepdim=True) + 1e-6).rsqrt()
        * w.double(),
        "softmax": torch.softmax(src.double(), -1),
        "matmul": (a_src.float() @ b.float()).to(torch.bfloat16),
        "scaled_mm": a_src.float() @ b.float(),
    }
    for name, y in outs.items():
        assert y.device == dev, name
        torch.testing.assert_close(y.double(), refs[name].double(), rtol=1e-2, atol=1e-4)
    torch.testing.assert_close(out, torch.nn.functional.silu(src.float()).to(out.dtype))
    assert torch.equal(r, r_ref)
    rd = r_ref.double()
    fused_ref = rd * (rd.square().mean(-1, keepdim=True) + 1e-6).rsqrt() * w.double()
    torch.testing.assert_close(xc.double(), fused_ref, rtol=1e-2, atol=1e-4)


@pytest.mark.gpu
def test_arguments_on_two_devices_are_refused() -> None:
    import torch

    _two_gpus()
    x = torch.randn(8, 64, device="cuda:1")
    w0 = torch.ones(64, device="cuda:0")
    with pytest.raises(ValueError, match=r"rms_norm: weight must be on the same device as x"):
        ak.rms_norm(x, w0)
    with pytest.raises(ValueError, match=r"silu: out must be on the same device as x"):
        ak.silu(x, out=torch.empty(8, 64, device="cuda:0"))
    a = torch.zeros(16, 16, device="cuda:1", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"matmul: b must be on the same device as a"):
        ak.matmul(a, torch.zeros(16, 16, device="cuda:0", dtype=torch.bfloat16))


@pytest.mark.gpu
def test_two_threads_drive_two_gpus_at_once() -> None:
    """Cold start, one thread per GPU, both with cuda:0 current: correct results on each
    thread's own GPU and stream, every family loaded once per device."""
    _two_gpus()
    res = _json_line(_run("two_gpus.py"))
    assert res["errors"] == [] and res["mismatches"] == []
    assert res["result_devices"] == ["0->cuda:0", "1->cuda:1"]
    assert res["current_after"] == {"0": 0, "1": 0}
    fams = ["activation", "gated", "gemm", "norm", "softmax"]
    assert res["loads"] == sorted([f, d] for f in fams for d in (0, 1))


@pytest.mark.gpu
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "initcheck", "synccheck"])
def test_compute_sanitizer_clean(tool: str) -> None:
    sanitizer = sanitizer_or_skip()
    proc = _run(
        "sanitize_case.py", timeout=600, prefix=[sanitizer, "--tool", tool, "--error-exitcode", "9"]
    )
    assert_clean(proc, "SANITIZE_CASE_OK")


def test_launch_plan_binding_checks_its_arguments() -> None:
    """The _core binding is exercised without a driver: construction validates the layout."""
    from aotkernels import _core

    params = bytes(48)
    _core.PreparedLaunch("ak_relu_f32", 0, 0, [1, 1, 1], [256, 1, 1], 0, params, [0, 8])
    with pytest.raises(ValueError, match="pointer offset outside the parameters"):
        _core.PreparedLaunch("ak_relu_f32", 0, 0, [1, 1, 1], [256, 1, 1], 0, params, [44])
    with pytest.raises(ValueError, match="3 dimensions"):
        _core.PreparedLaunch("ak_relu_f32", 0, 0, [1, 1], [256, 1, 1], 0, params, [0])


class _CaiOnly:
    """Exposes only ``__cuda_array_interface__`` (as numba / cuda.core arrays do)."""

    def __init__(self, t: object) -> None:
        self.__cuda_array_interface__ = t.__cuda_array_interface__  # type: ignore[attr-defined]


class _DLPackOnly:
    """Exposes only the DLPack protocol (a producer aotkernels has no adapter for)."""

    def __init__(self, t: object) -> None:
        self._t = t

    def __dlpack__(self, stream: int | None = None) -> object:
        return self._t.__dlpack__(stream=stream)  # type: ignore[attr-defined]

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._t.__dlpack_device__()  # type: ignore[attr-defined, no-any-return]


@pytest.mark.gpu
@pytest.mark.parametrize("wrap", [_CaiOnly, _DLPackOnly])
def test_generic_producers(wrap: type) -> None:
    """Inputs known only by protocol come back as a DLPack buffer any framework can take."""
    import torch

    x = torch.randn(257, 96, device="cuda")
    y = ak.silu(wrap(x))
    assert not isinstance(y, torch.Tensor)
    t = torch.from_dlpack(y)
    assert t.shape == x.shape and t.device == x.device
    torch.testing.assert_close(t, torch.nn.functional.silu(x), rtol=1e-5, atol=1e-6)
    out = torch.full_like(x, float("nan"))
    assert ak.relu(wrap(x), out=wrap(out)) is not None
    assert torch.equal(out, torch.relu(x))
    g = torch.from_dlpack(ak.silu_and_mul(wrap(x)))
    assert g.shape == (257, 48)
