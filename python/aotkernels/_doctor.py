"""``aotkernels doctor``: the devices and driver, and per family the image that runs and why."""

from __future__ import annotations

import re
from typing import Any

from . import device as _device
from . import loader
from .errors import AotKernelsError
from .select import choose_image, format_version

__all__ = ["parse_cc", "report"]


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
        except AotKernelsError as e:
            out[name] = {"image": None, "kind": None, "reason": str(e), "error": type(e).__name__}
    return out


def report(arch: str | None = None, driver: str | None = None) -> dict[str, Any]:
    """The doctor report; ``arch`` simulates a device, ``driver`` a driver CUDA version."""
    man = loader.manifest()
    rep: dict[str, Any] = {
        "package": {
            "version": man["package_version"],
            "toolkit": man["toolkit"],
            "driver_floor": man["driver_floor"],
            "archs": man.get("archs"),
        },
        "driver": None,
        "devices": [],
    }
    real_driver: tuple[int, int] | None = None
    try:
        real_driver = _device.driver_version()
        rep["driver"] = format_version(real_driver)
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
