"""Image choice: which image of a family's fatbin a device runs, and why.

Per device and family, in this order:
  1. the exact arch-specific cubin (``sm_90a`` on a 9.0 device);
  2. a family-specific cubin of the same major, highest minor <= the device's (``sm_100f`` on 10.3);
  3. a generic cubin of the same major, highest minor <= the device's (``sm_120`` on 12.1);
  4. PTX for a cc <= the device's whose ISA the driver can JIT (highest first);
  5. otherwise ``DriverTooOldError`` if step 4 failed only on the driver, else
     ``NoKernelImageError`` naming the device, the images held and the build setting to add.
With ``CUDA_FORCE_PTX_JIT=1`` the driver ignores cubins, so steps 1-3 are skipped.
Before any of that, the driver must reach the build's floor (``driver_too_old``): cubins of
toolkit X.Y need a driver of CUDA X.0 or later.
Pure functions of (manifest, cc, driver version): the tests drive them with simulated devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import DriverTooOldError, NoKernelImageError

__all__ = [
    "Choice",
    "choose_image",
    "driver_for_ptx_isa",
    "driver_ptx_isa",
    "driver_too_old",
    "format_version",
    "min_driver",
    "parse_version",
]

# Highest PTX ISA each driver's JIT accepts, by the CUDA version the driver reports.
_PTX_ISA_BY_CUDA = {
    (11, 0): (7, 0), (11, 1): (7, 1), (11, 2): (7, 2), (11, 3): (7, 3), (11, 4): (7, 4),
    (11, 5): (7, 5), (11, 6): (7, 6), (11, 7): (7, 7), (11, 8): (7, 8),
    (12, 0): (8, 0), (12, 1): (8, 1), (12, 2): (8, 2), (12, 3): (8, 3), (12, 4): (8, 4),
    (12, 5): (8, 5), (12, 6): (8, 5), (12, 8): (8, 7), (12, 9): (8, 8),
    (13, 0): (9, 0), (13, 1): (9, 1),
}  # fmt: skip


# Oldest Linux driver of each CUDA version (the CUDA release notes' driver table): a wheel
# whose manifest says driver_floor "13.0" needs R580, "12.0" R525; PTX of ISA 8.4 (CUDA 12.4)
# needs a 12.4 driver, R550.
_MIN_DRIVER = {
    (12, 0): "525.60.13", (12, 1): "530.30.02", (12, 2): "535.54.03", (12, 3): "545.23.06",
    (12, 4): "550.54.14", (12, 5): "555.42.02", (12, 6): "560.28.03", (12, 8): "570.26",
    (12, 9): "575.51.03", (13, 0): "580.65.06",
}  # fmt: skip


def format_version(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def parse_version(text: str) -> tuple[int, int]:
    """``"13.0"`` or ``"13.0.88"`` -> ``(13, 0)``: every version the manifest holds (toolkit,
    driver floors, compute capabilities, PTX ISAs)."""
    major, minor = str(text).split(".")[:2]
    return int(major), int(minor)


def min_driver(floor: str) -> str | None:
    """``"13.0"`` -> ``"580.65.06"``: the oldest NVIDIA driver serving that CUDA version."""
    return _MIN_DRIVER.get(parse_version(floor))


def driver_too_old(manifest: Mapping[str, Any], driver: tuple[int, int]) -> str | None:
    """Why nothing of this build loads under a driver of CUDA version ``driver``, or None when
    the driver reaches the manifest's floor (the loader raises it, the doctor reports it)."""
    floor = str(manifest["driver_floor"])
    if driver >= parse_version(floor):
        return None
    need = min_driver(floor)
    return (
        f"this aotkernels build (CUDA {manifest['toolkit']}) needs a driver supporting CUDA >= "
        f"{floor}"
        + (f" (NVIDIA driver >= {need})" if need else "")
        + f"; the installed driver supports CUDA {format_version(driver)}"
    )


def driver_ptx_isa(driver: tuple[int, int]) -> tuple[int, int]:
    """The newest PTX ISA a driver of CUDA version ``driver`` can JIT."""
    known = [k for k in _PTX_ISA_BY_CUDA if k <= driver]
    if not known:
        return (0, 0)
    if driver > max(_PTX_ISA_BY_CUDA):
        return (99, 99)  # a driver newer than this table reads every ISA we can emit
    return _PTX_ISA_BY_CUDA[max(known)]


def driver_for_ptx_isa(isa: tuple[int, int]) -> tuple[int, int] | None:
    """The oldest driver CUDA version whose JIT reads PTX ISA ``isa`` (None: newer than we know)."""
    able = [cuda for cuda, top in _PTX_ISA_BY_CUDA.items() if top >= isa]
    return min(able) if able else None


@dataclass(frozen=True)
class Choice:
    family: str
    image: Mapping[str, Any]  # the manifest's image record
    reason: str

    @property
    def target(self) -> str:
        return str(self.image["target"])


def _cc(img: Mapping[str, Any]) -> tuple[int, int]:
    return parse_version(img["cc"])


def _isa(img: Mapping[str, Any]) -> tuple[int, int]:
    return parse_version(img["ptx_isa"])


def choose_image(
    family: str,
    fam: Mapping[str, Any],
    cc: tuple[int, int],
    driver: tuple[int, int],
    *,
    device: str = "device",
    force_ptx: bool = False,
    known_targets: Mapping[str, str] | None = None,
) -> Choice:
    """Pick ``fam``'s image for a device of compute capability ``cc`` under ``driver``.

    ``known_targets`` (the manifest's ``targets``: every target the matrix declares, built or
    not, with its compute capability) only words the error: which setting would serve the device.
    """
    images = list(fam["images"])
    cubins = [i for i in images if i["kind"] == "cubin"]
    if not force_ptx:
        for img in cubins:
            if img["variant"] == "a" and _cc(img) == cc:
                return Choice(family, img, f"exact arch-specific cubin {img['target']}")
        for variant, what in (("f", "family-specific"), ("", "generic")):
            same = [
                i
                for i in cubins
                if i["variant"] == variant and _cc(i)[0] == cc[0] and _cc(i)[1] <= cc[1]
            ]
            if same:
                img = max(same, key=_cc)
                return Choice(
                    family,
                    img,
                    f"{what} cubin {img['target']} (runs on {cc[0]}.x >= {img['cc']})",
                )
    ptx = sorted((i for i in images if i["kind"] == "ptx" and _cc(i) <= cc), key=_cc, reverse=True)
    jit_isa = driver_ptx_isa(driver)
    for img in ptx:
        if _isa(img) <= jit_isa:
            why = "CUDA_FORCE_PTX_JIT=1" if force_ptx else "no cubin for this device"
            return Choice(
                family,
                img,
                f"PTX {img['target']} JIT-compiled by the driver ({why}; ISA {img['ptx_isa']} "
                f"<= driver's {format_version(jit_isa)})",
            )
    held = ", ".join(i["target"] for i in images) or "nothing"
    if ptx:
        raise DriverTooOldError(
            f"{family}: {device} (compute capability {format_version(cc)}) can only run PTX "
            f"{ptx[0]['target']} of ISA {ptx[0]['ptx_isa']}, but the driver (CUDA "
            f"{format_version(driver)}) JITs up to ISA {format_version(jit_isa)}; "
            "update the NVIDIA driver"
        )
    sm = f"{cc[0]}{cc[1]}"
    known = [n for n, c in (known_targets or {}).items() if parse_version(c) == cc]
    if force_ptx:
        # Forced JIT takes PTX only: the cubin targets below may be in this build already.
        how = (
            f"rebuild with AOTKERNELS_ARCHS including a PTX target no newer than compute_{sm} "
            "(a build without AOTKERNELS_ARCHS keeps each family's PTX), or unset "
            "CUDA_FORCE_PTX_JIT (CUDA_FORCE_PTX_JIT=1 is set, so cubins were not considered)"
        )
    elif known:
        how = f"rebuild with AOTKERNELS_ARCHS including {' or '.join(known)}"
    else:
        how = (
            f"add [targets.sm_{sm}] to arch_matrix.toml and to this family's targets, then "
            f"rebuild with AOTKERNELS_ARCHS including sm_{sm}"
        )
    raise NoKernelImageError(
        f"{family}: no kernel image for {device} (compute capability {format_version(cc)}); "
        f"this build holds {held}; {how}"
    )
