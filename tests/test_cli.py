"""The ``aotkernels`` command (matrix, inspect, doctor), in a subprocess and in-process; and
``import aotkernels`` doing no CUDA work."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from aotkernels._doctor import ptx_note
from aotkernels.cli import main
from aotkernels.manifest import load_manifest
from helpers import variant
from helpers.builds import clean_env, run, run_cli

FAMILIES = ("activation", "gated")


def run_json(*args: str, cwd: Path) -> dict[str, Any]:
    r = run_cli(*args, "--json", cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def main_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(autouse=True)
def _no_force_ptx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_FORCE_PTX_JIT", raising=False)
    monkeypatch.setenv("COLUMNS", "240")  # rich tables: no wrapping inside cells


# --- matrix ----------------------------------------------------------------------------------


def _check_matrix_shape(data: dict[str, Any]) -> None:
    assert isinstance(data["targets"], list) and data["targets"]
    for t in data["targets"]:
        assert isinstance(t["name"], str) and isinstance(t["cc"], str)
        assert isinstance(t["features"], list)
    by_name = {t["name"]: t for t in data["targets"]}
    assert by_name["sm_90a"]["cc"] == "9.0" and "wgmma" in by_name["sm_90a"]["features"]
    assert by_name["sm_100f"]["cc"] == "10.0"
    for f in data["families"].values():
        for key in ("ops", "dtypes", "targets", "ptx"):
            assert isinstance(f[key], list), key
    act = data["families"]["activation"]
    assert act["ops"][:5] == ["relu", "gelu", "gelu_tanh", "silu", "sigmoid"]
    assert act["ops"][5:] == [f"{op}_backward" for op in act["ops"][:5]]
    assert act["dtypes"] == ["f32", "f16", "bf16"]
    assert act["targets"][0] == "sm_75" and "sm_120" in act["targets"]
    assert act["ptx"] == ["compute_75", "compute_120"]


def test_matrix_json_subprocess(tmp_path: Path) -> None:
    data = run_json("matrix", cwd=tmp_path)
    _check_matrix_shape(data)
    assert set(FAMILIES) <= set(data["families"])


def test_matrix_json_in_process(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = main_json(capsys, "matrix")
    _check_matrix_shape(data)
    assert data == run_json("matrix", cwd=tmp_path)


def test_matrix_one_family(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = main_json(capsys, "matrix", "--family", "activation")
    assert list(data["families"]) == ["activation"]
    _check_matrix_shape(data)
    assert run_json("matrix", "--family", "gated", cwd=tmp_path)["families"].keys() == {"gated"}


def test_matrix_unknown_family(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["matrix", "--family", "norm_nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown family 'norm_nope'" in err and "activation" in err
    r = run_cli("matrix", "--family", "norm_nope", "--json", cwd=tmp_path)
    assert r.returncode == 2
    assert "unknown family 'norm_nope'" in r.stderr and r.stdout == ""


def test_matrix_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix"]) == 0
    out = capsys.readouterr().out
    for name in (*FAMILIES, "sm_90a", "sm_100f", "family-specific", "arch-specific"):
        assert name in out
    assert main(["matrix", "--family", "gated"]) == 0
    out = capsys.readouterr().out
    assert "gated" in out and "silu_and_mul" in out and "activation" not in out


# --- inspect ---------------------------------------------------------------------------------


def _check_inspect(data: dict[str, Any], manifest: dict[str, Any]) -> None:
    assert set(data["families"]) == set(manifest["families"])
    for name, fam in data["families"].items():
        want = manifest["families"][name]
        assert fam["file"] == f"{name}.fatbin"
        assert fam["bytes"] == want["bytes"] and isinstance(fam["bytes"], int)
        assert fam["verified"] is True, fam["problems"]
        assert fam["problems"] == []
        assert [i["target"] for i in fam["images"]] == [i["target"] for i in want["images"]]
        for i in fam["images"]:
            assert i["kind"] in ("cubin", "ptx")
            assert i["compressed"] is True
            assert isinstance(i["bytes"], int) and i["bytes"] > 0
        assert sorted(fam["dtypes"]) == sorted({e["dtype"] for e in want["entries"]})
    assert data["total_bytes"] == sum(f["bytes"] for f in manifest["families"].values())


def test_inspect_installed(
    capsys: pytest.CaptureFixture[str], installed_kernels: Path, tmp_path: Path
) -> None:
    manifest = load_manifest(installed_kernels)
    _check_inspect(main_json(capsys, "inspect"), manifest)
    _check_inspect(run_json("inspect", cwd=tmp_path), manifest)
    # the package folder and the kernels folder give the same answer
    _check_inspect(main_json(capsys, "inspect", str(installed_kernels.parent)), manifest)
    data = main_json(capsys, "inspect", str(installed_kernels))
    assert data["manifest"]["toolkit"] == manifest["toolkit"]


def test_inspect_single_fatbin(
    capsys: pytest.CaptureFixture[str], installed_kernels: Path, tmp_path: Path
) -> None:
    manifest = load_manifest(installed_kernels)
    path = installed_kernels / "gated.fatbin"
    data = run_json("inspect", str(path), cwd=tmp_path)
    assert list(data["families"]) == ["gated"]
    fam = data["families"]["gated"]
    assert fam["file"] == "gated.fatbin" and fam["bytes"] == path.stat().st_size
    assert fam["images"] == manifest["families"]["gated"]["images"]
    assert fam["verified"] is False and fam["problems"] == []  # no manifest to check against
    assert data["manifest"] is None
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "gated" in out and "compute_75" in out and "no manifest" in out


def test_inspect_damaged_install(
    capsys: pytest.CaptureFixture[str], installed_kernels: Path, tmp_path: Path
) -> None:
    kern = tmp_path / "kernels"
    shutil.copytree(installed_kernels, kern)
    data = bytearray((kern / "activation.fatbin").read_bytes())
    data[-1] ^= 0xFF  # payload byte: headers still parse
    (kern / "activation.fatbin").write_bytes(bytes(data))
    (kern / "gated.fatbin").unlink()
    assert main(["inspect", str(kern), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["families"]["activation"]["verified"] is False
    assert out["families"]["activation"]["problems"] == ["sha256 differs from the manifest"]
    assert out["families"]["gated"]["problems"] == ["fatbin missing"]
    assert main(["inspect", str(kern)]) == 1
    out = capsys.readouterr().out
    assert "sha256 differs from the manifest" in out and "fatbin missing" in out


def test_inspect_bad_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["inspect", str(tmp_path / "nothing.whl")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("x")
    assert main(["inspect", str(tmp_path / "notes.txt")]) == 2
    assert "expected a wheel, a folder or a .fatbin" in capsys.readouterr().err


def _installed_manifest() -> dict[str, Any]:
    from aotkernels._paths import KERNELS_DIR

    return load_manifest(KERNELS_DIR)


def test_inspect_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect"]) == 0
    out = capsys.readouterr().out
    for name in FAMILIES:
        assert name in out
    man = _installed_manifest()
    newest = max(variant.targets(man) - {"compute_75", "compute_120"}, key=lambda t: int(t[3:]))
    assert newest in out and variant.compression(man) in out and "ok" in out
    assert f"CUDA {man['toolkit_full']}" in out


# --- doctor ----------------------------------------------------------------------------------


def _sim(data: dict[str, Any], cc: str) -> dict[str, Any]:
    assert "driver" in data and (data["driver"] is None or isinstance(data["driver"], str))
    (dev,) = data["devices"]
    assert dev["cc"] == cc and dev["index"] is None
    return dev["families"]


def test_doctor_8_7(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for data in (
        main_json(capsys, "doctor", "--arch", "8.7"),
        run_json("doctor", "--arch", "8.7", cwd=tmp_path),
    ):
        fams = _sim(data, "8.7")
        assert set(FAMILIES) <= set(fams)
        for name in FAMILIES:
            assert fams[name]["image"] == "sm_86"
            assert "generic cubin sm_86" in fams[name]["reason"]


def test_doctor_12_1(capsys: pytest.CaptureFixture[str]) -> None:
    """A 12.1 GPU runs the sm_120 cubin; a build without one (CUDA 12.4) JITs compute_75."""
    man = _installed_manifest()
    has_cubin = "sm_120" in variant.targets(man)
    # Without a driver the doctor simulates the cubins' floor (12.0 for cu12), below what
    # cu12's PTX needs: name the PTX's driver.
    driver = [] if has_cubin else ["--driver", man["ptx_driver_floor"]]
    fams = _sim(main_json(capsys, "doctor", "--arch", "sm_121", *driver), "12.1")
    for name in FAMILIES:
        assert fams[name]["image"] == ("sm_120" if has_cubin else "compute_75")
        assert fams[name]["kind"] == ("cubin" if has_cubin else "ptx")


def _old_driver() -> tuple[str, str]:
    """A driver too old for the build's PTX (12.4 for ISA 9.0, 12.3 for 12.4's 8.4), the ISA."""
    isa = variant.ptx_isa(_installed_manifest())
    old = variant.driver_that_cannot_jit(isa)
    return f"{old[0]}.{old[1]}", f"{isa[0]}.{isa[1]}"


def test_doctor_old_driver(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    old, isa = _old_driver()
    for data in (
        main_json(capsys, "doctor", "--arch", "11.0", "--driver", old),
        run_json("doctor", "--arch", "11.0", "--driver", old, cwd=tmp_path),
    ):
        assert data["simulated"] == {"cc": "11.0", "driver": old}
        fams = _sim(data, "11.0")
        for name in FAMILIES:
            assert fams[name]["image"] is None
            assert fams[name]["error"] == "DriverTooOldError"
            assert f"CUDA {old}" in fams[name]["reason"]
            assert f"ISA {isa}" in fams[name]["reason"]


def test_doctor_driver_between_the_cubin_and_ptx_floors(capsys: pytest.CaptureFixture[str]) -> None:
    """CUDA 12.4's cubins load under a 12.0 driver (R525), its PTX needs 12.4 (R550): with a
    12.2 driver a 9.0 GPU runs its cubins, a 10.0 GPU (no cubin in that build) nothing. A
    CUDA 13 build has one floor for both and says nothing more."""
    man = _installed_manifest()
    data = main_json(capsys, "doctor", "--arch", "9.0", "--driver", "12.2")
    if variant.version(man["toolkit"]) >= (13, 0):
        assert "ptx_note" not in data
        assert data["package"]["ptx_driver_floor"] == data["package"]["driver_floor"] == "13.0"
        return
    assert data["package"]["driver_floor"] == "12.0"
    assert data["package"]["min_driver"] == "525.60.13"
    assert data["package"]["ptx_driver_floor"] == "12.4"
    note = data["ptx_note"]
    assert "its PTX needs a driver for CUDA >= 12.4 (NVIDIA >= 550.54.14)" in note
    assert "With a CUDA 12.2 driver: the cubins run, the PTX does not" in note
    for name in FAMILIES:
        assert _sim(data, "9.0")[name]["image"] == "sm_90"
    blackwell = _sim(main_json(capsys, "doctor", "--arch", "10.0", "--driver", "12.2"), "10.0")
    for name in FAMILIES:
        assert blackwell[name]["error"] == "DriverTooOldError"
    ok = main_json(capsys, "doctor", "--arch", "10.0", "--driver", "12.4")
    assert "does not" not in ok["ptx_note"]
    for name in FAMILIES:
        assert _sim(ok, "10.0")[name]["image"] == "compute_75"
        assert "its first load JIT-compiles" in _sim(ok, "10.0")[name]["reason"]
        assert _sim(ok, "10.0")[name]["jit_bytes"] > 0
    assert main(["doctor", "--arch", "9.0", "--driver", "12.2"]) == 0
    assert "PTX: its PTX needs a driver for CUDA >= 12.4" in capsys.readouterr().out


def test_ptx_note_of_each_variant() -> None:
    cu12 = {"driver_floor": "12.0", "ptx_driver_floor": "12.4"}
    assert ptx_note({"driver_floor": "13.0", "ptx_driver_floor": "13.0"}, (13, 0)) is None
    assert ptx_note({"driver_floor": "12.0", "ptx_driver_floor": None}, (12, 0)) is None
    note = ptx_note(cu12, (12, 2))
    assert note is not None and "550.54.14" in note and "the cubins run, the PTX does not" in note
    assert "does not" not in str(ptx_note(cu12, (12, 4)))
    assert "does not" not in str(ptx_note(cu12, (11, 8)))  # below both: the floor's own error


def test_doctor_no_image(capsys: pytest.CaptureFixture[str]) -> None:
    fams = _sim(main_json(capsys, "doctor", "--arch", "7.0"), "7.0")
    for name in FAMILIES:
        assert fams[name]["image"] is None
        assert fams[name]["error"] == "NoKernelImageError"
        assert "add [targets.sm_70]" in fams[name]["reason"]


def test_doctor_bad_arch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--arch", "ampere"]) == 2
    assert "--arch must look like 8.7 or sm_87, got 'ampere'" in capsys.readouterr().err


def test_doctor_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["doctor", "--arch", "12.1"]) == 0
    out = capsys.readouterr().out
    assert "simulating compute capability 12.1" in out
    for name in FAMILIES:
        assert name in out
    has_cubin = "sm_120" in variant.targets(_installed_manifest())
    assert ("sm_120" if has_cubin else "compute_75") in out
    r = run_cli("doctor", "--arch", "11.0", "--driver", _old_driver()[0], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "activation" in r.stdout and "none" in r.stdout


def test_console_script(tmp_path: Path) -> None:
    exe = shutil.which("aotkernels")
    if exe is None:
        pytest.skip("the aotkernels console script is not on PATH")
    r = run([exe, "matrix", "--json"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert set(FAMILIES) <= set(json.loads(r.stdout)["families"])


# --- import ----------------------------------------------------------------------------------

_IMPORT_PROBE = """
import json, sys, time
t0 = time.perf_counter()
import aotkernels
dt = time.perf_counter() - t0
from aotkernels import device
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "cupy", "jax")
               or m == "cuda" or m.startswith("cuda."))
print(json.dumps({"seconds": dt, "heavy": heavy, "driver": device._driver is None,
                  "file": aotkernels.__file__}))
"""


def test_import_does_no_cuda_work(tmp_path: Path, installed_kernels: Path) -> None:
    r = run(
        [sys.executable, "-c", _IMPORT_PROBE],
        cwd=tmp_path,
        env=clean_env(CUDA_VISIBLE_DEVICES=""),
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert Path(out["file"]).parent == installed_kernels.parent  # the installed package
    assert out["heavy"] == [], f"import aotkernels imported {out['heavy']}"
    assert out["driver"] is True, "import aotkernels initialised the driver"
    assert out["seconds"] < 1.0, f"import aotkernels took {out['seconds']:.2f} s"


def test_api_matrix_and_doctor_survive_repeated_calls() -> None:
    """ak.matrix() / ak.doctor() must stay callable: a submodule of the same name, once imported,
    would replace the function on the package (regression: matrix.py / doctor.py)."""
    import aotkernels as ak
    import aotkernels._build.matrix  # importing submodules must not shadow the API
    import aotkernels.cli

    for _ in range(2):
        assert callable(ak.matrix) and callable(ak.doctor)
        assert set(FAMILIES) <= set(ak.matrix()["families"])
        fams = ak.doctor(arch="8.7")["devices"][0]["families"]
        assert fams["activation"]["image"] == "sm_86"
