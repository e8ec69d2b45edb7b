"""``aotkernels doctor``: the devices and driver, and per family the image that runs and why."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from . import device as _device
from . import loader
from .errors import AotKernelsError
from .select import choose_image, format_version

__all__ = ["distribution", "jax_support", "min_driver", "parse_cc", "report"]

# Oldest Linux driver of each CUDA major (CUDA release notes, minor-version compatibility):
# a wheel whose manifest says driver_floor "13.0" needs R580, "12.0" R525.
_MIN_DRIVER = {12: "525.60.13", 13: "580.65.06"}


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


def min_driver(floor: str) -> str | None:
    """``"13.0"`` -> ``"580.65.06"``: the oldest NVIDIA driver serving that CUDA version."""
    return _MIN_DRIVER.get(int(floor.split(".")[0]))


def _version(text: str) -> tuple[int, int]:
    major, minor = (int(v) for v in str(text).split(".")[:2])
    return major, minor


def parse_cc(text: str) -> tuple[int, int]:
    """``"8.7"``, ``"87"`` or ``"sm_87"`` -> (8, 7)."""
    t = text.strip().lower().removeprefix("sm_")
    m = re.match(r"^(\d+)\.(\d)$", t) or re.match(r"^(\d+)(\d)$", t)
    if not m:
        raise ValueError(f"--arch must look like 8.7 or sm_87, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def _families(cc: tuple[int, int], driver: tuple[int, int], label: str) -> dict[str, Any]:
    man = loader.manifest()
    targets = loader._matrix_targets()
    floor = _version(man["driver_floor"])
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
                matrix_targets=targets,
            )
            out[name] = {"image": c.target, "kind": c.image["kind"], "reason": c.reason}
            paths = _paths_in(fam, c.target)
            if paths:
                out[name]["paths"] = paths
        except AotKernelsError as e:
            out[name] = {"image": None, "kind": None, "reason": str(e), "error": type(e).__name__}
        if driver < floor:  # as the loader does: below the floor nothing of this build loads
            would = out[name]
            if would["image"] is not None:
                would = f"with such a driver it would run {would['image']}: {would['reason']}"
            else:
                would = would["reason"]
            out[name] = {
                "image": None,
                "kind": None,
                "reason": f"{_too_old(man, driver)}; {would}",
                "error": "DriverTooOldError",
            }
    return out


def _paths_in(fam: dict[str, Any], target: str) -> list[str]:
    """The code paths (variants' ``path``) the chosen image holds, for families with variants."""
    variants = fam.get("variants", {})
    held = {e["variant"] for e in fam["entries"] if target in e.get("images", ())}
    return sorted({variants[v]["path"] for v in held if v in variants})


def _too_old(man: dict[str, Any], driver: tuple[int, int]) -> str:
    need = min_driver(man["driver_floor"])
    return (
        f"this aotkernels build (CUDA {man['toolkit']}) needs a driver supporting CUDA >= "
        f"{man['driver_floor']}"
        + (f" (NVIDIA driver >= {need})" if need else "")
        + f"; the driver supports CUDA {format_version(driver)}"
    )


def report(arch: str | None = None, driver: str | None = None) -> dict[str, Any]:
    """The doctor report; ``arch`` simulates a device, ``driver`` a driver CUDA version."""
    man = loader.manifest()
    rep: dict[str, Any] = {
        "package": {
            "distribution": distribution(),
            "version": man["package_version"],
            "toolkit": man["toolkit"],
            "driver_floor": man["driver_floor"],
            "min_driver": min_driver(man["driver_floor"]),
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
        if real_driver < _version(man["driver_floor"]):
            rep["driver_too_old"] = _too_old(man, real_driver)
    except AotKernelsError as e:
        rep["driver_error"] = str(e)
    if driver is not None:
        drv = parse_cc(driver)
    else:
        floor = str(man["driver_floor"]).split(".")
        drv = real_driver or (int(floor[0]), int(floor[1]))
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
