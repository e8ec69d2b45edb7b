"""``aotkernels doctor``: the devices and driver, and per family the image that runs and why."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from . import device as _device
from . import loader
from .errors import AotKernelsError
from .select import choose_image, driver_too_old, format_version, min_driver, parse_version

__all__ = ["distribution", "jax_support", "parse_cc", "ptx_note", "report"]


# What a family's first load costs when the driver JIT-compiles its PTX, measured on an H200
# (R580 driver, CUDA_FORCE_PTX_JIT=1, JIT cache off) with the CUDA 12.4 build's PTX.
_JIT = (
    "an H200 took 33 s for gemm's 5.9 MB, 0.6-3.2 s for the 0.15-1.7 MB of each row-wise "
    "family; the driver caches the result for later processes)"
)


def distribution() -> str:
    """The installed distribution that owns this package (``aotkernels-cu13``), found with
    importlib.metadata; ``aotkernels (source)`` when the package is not from an install (a
    source checkout on ``sys.path``, or an editable install)."""
    from importlib import metadata

    here = Path(__file__).resolve().parent
    try:
        names = metadata.packages_distributions().get(__package__ or "aotkernels", [])
    except Exception:  # a broken dist-info elsewhere must not break the doctor
        names = []
    for name in dict.fromkeys(names):
        try:
            dist = metadata.distribution(name)
            init = Path(str(dist.locate_file(f"{__package__}/__init__.py"))).resolve()
        except (metadata.PackageNotFoundError, OSError):
            continue
        if init.parent == here:
            return str(dist.metadata["Name"])
    return "aotkernels (source)"


def jax_support() -> dict[str, Any]:
    """Whether this build has the XLA extension (ops under ``jax.jit``), the jaxlib and XLA FFI
    API it was compiled against, the jaxlib installed now and whether that one accepts it (read
    from its metadata and headers: jax is not imported)."""
    from importlib import import_module, metadata

    from ._jax import check_ffi_api, installed_ffi_api

    xla: Any = None
    with contextlib.suppress(ImportError):
        xla = import_module(f"{__package__}._xla")
    try:
        installed: str | None = metadata.version("jaxlib")
    except metadata.PackageNotFoundError:
        installed = None
    api = installed_ffi_api()
    rep: dict[str, Any] = {
        "xla_extension": xla is not None,
        "built_against_jaxlib": None,
        "ffi_api": None,
        "jaxlib": installed,
        "jaxlib_ffi_api": None if api is None else f"{api[0]}.{api[1]}",
        "problem": None,
    }
    if xla is not None:
        built = tuple(xla.FFI_API_VERSION)
        rep["built_against_jaxlib"] = xla.JAXLIB_VERSION
        rep["ffi_api"] = f"{built[0]}.{built[1]}"
        rep["problem"] = check_ffi_api(built, api)
    return rep


def ptx_note(man: dict[str, Any], driver: tuple[int, int] | None) -> str | None:
    """What this build's PTX asks of the driver beyond its cubins' floor, for ``driver``.

    A CUDA 12.4 build's cubins load under any 12.x driver (R525+), but its PTX, which the
    GPUs without a cubin here run (Blackwell, for one), needs a 12.4 driver (R550) to JIT.
    """
    ptx_floor = man.get("ptx_driver_floor")
    if not ptx_floor or parse_version(ptx_floor) <= parse_version(man["driver_floor"]):
        return None
    need = min_driver(ptx_floor)
    note = (
        f"its PTX needs a driver for CUDA >= {ptx_floor}"
        + (f" (NVIDIA >= {need})" if need else "")
        + "; the GPUs with no cubin in this build JIT that PTX"
    )
    floor = parse_version(man["driver_floor"])
    if driver is not None and floor <= driver < parse_version(ptx_floor):
        note += (
            f". With a CUDA {format_version(driver)} driver: the cubins run, the PTX does not "
            "(a GPU with no cubin here gets DriverTooOldError)"
        )
    return note


def parse_cc(text: str) -> tuple[int, int]:
    """``"8.7"``, ``"87"`` or ``"sm_87"`` -> (8, 7)."""
    t = text.strip().lower().removeprefix("sm_")
    m = re.match(r"^(\d+)\.(\d)$", t) or re.match(r"^(\d+)(\d)$", t)
    if not m:
        raise ValueError(f"--arch must look like 8.7 or sm_87, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def _families(cc: tuple[int, int], driver: tuple[int, int], label: str) -> dict[str, Any]:
    man = loader.manifest()
    too_old = driver_too_old(man, driver)
    out: dict[str, Any] = {}
    for name, fam in man["families"].items():
        try:
            c = choose_image(
                name,
                fam,
                cc,
                driver,
                device=label,
                force_ptx=loader.force_ptx(),
                known_targets=man["targets"],
            )
            out[name] = {"image": c.target, "kind": c.image["kind"], "reason": c.reason}
            if c.image["kind"] == "ptx" and c.image.get("uncompressed_bytes"):
                mb = c.image["uncompressed_bytes"] / 1e6
                out[name]["jit_bytes"] = c.image["uncompressed_bytes"]
                out[name]["reason"] += f"; its first load JIT-compiles {mb:.1f} MB of PTX ({_JIT}"
            paths = _paths_in(fam, c.target)
            if paths:
                out[name]["paths"] = paths
        except AotKernelsError as e:
            out[name] = {"image": None, "kind": None, "reason": str(e), "error": type(e).__name__}
        if too_old:  # as the loader does: below the floor nothing of this build loads
            would = out[name]
            if would["image"] is not None:
                would = f"with such a driver it would run {would['image']}: {would['reason']}"
            else:
                would = would["reason"]
            out[name] = {
                "image": None,
                "kind": None,
                "reason": f"{too_old}; {would}",
                "error": "DriverTooOldError",
            }
    return out


def _paths_in(fam: dict[str, Any], target: str) -> list[str]:
    """The code paths (variants' ``path``) the chosen image holds, for families with variants."""
    variants = fam.get("variants", {})
    held = {e["variant"] for e in fam["entries"] if target in e.get("images", ())}
    return sorted({variants[v]["path"] for v in held if v in variants})


def report(arch: str | None = None, driver: str | None = None) -> dict[str, Any]:
    """The doctor report; ``arch`` simulates a device, ``driver`` a driver CUDA version."""
    man = loader.manifest()
    rep: dict[str, Any] = {
        "package": {
            "distribution": distribution(),
            "version": man["package_version"],
            "toolkit": man["toolkit"],
            "toolkit_full": man.get("toolkit_full", man["toolkit"]),
            "toolkit_origin": man.get("toolkit_origin"),
            "driver_floor": man["driver_floor"],
            "min_driver": min_driver(man["driver_floor"]),
            "ptx_driver_floor": man.get("ptx_driver_floor"),
            "archs": man.get("archs"),
        },
        "jax": jax_support(),
        "driver": None,
        "devices": [],
    }
    real_driver: tuple[int, int] | None = None
    try:
        real_driver = _device.driver_version()
        rep["driver"] = format_version(real_driver)
        too_old = driver_too_old(man, real_driver)
        if too_old:
            rep["driver_too_old"] = too_old
    except AotKernelsError as e:
        rep["driver_error"] = str(e)
    if driver is not None:
        drv = parse_cc(driver)
    else:
        drv = real_driver or parse_version(man["driver_floor"])
    note = ptx_note(man, drv)
    if note:
        rep["ptx_note"] = note
    if arch is not None:
        cc = parse_cc(arch)
        label = f"a simulated {format_version(cc)} device"
        rep["simulated"] = {"cc": format_version(cc), "driver": format_version(drv)}
        rep["devices"].append(
            {
                "index": None,
                "name": "simulated",
                "cc": format_version(cc),
                "families": _families(cc, drv, label),
            }
        )
        return rep
    if real_driver is None:
        return rep
    for i in range(_device.device_count()):
        d = _device.device_info(i)
        rep["devices"].append({
            "index": i, "name": d.name, "cc": d.cc_str, "sm_count": d.sm_count,
            "families": _families(d.cc, drv, f"device {i} ({d.name})"),
        })  # fmt: skip
    return rep
