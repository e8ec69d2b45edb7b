"""Writing manifest.json: each family's fatbin checked against the build plan, then recorded.

A fatbin whose headers differ from what the plan promised fails the build, and so does an image
whose kernels (its cubin's entry symbols, its PTX's ``.entry`` names) differ from the plan's
entries for that image: a preprocessor guard that drops kernels compiles cleanly.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..fatbin import FatbinImage, read_fatbin
from ..manifest import MANIFEST_FORMAT, ManifestError, image_record
from ..select import driver_for_ptx_isa, format_version, parse_version
from .symbols import image_symbols

__all__ = ["check_fatbin", "check_symbols", "write_manifest"]


def check_fatbin(
    name: str, data: bytes, expected: list[tuple[str, int, str]], *, compressed: bool = True
) -> list[FatbinImage]:
    """Read ``data``'s headers and fail unless they hold exactly the ``expected`` images."""
    images = read_fatbin(data)
    found = sorted((i.kind, i.arch, i.variant) for i in images)
    want = sorted(tuple(e) for e in expected)
    if found != want:
        missing = sorted(set(want) - set(found))
        extra = sorted(set(found) - set(want))
        raise ManifestError(
            f"{name}: fatbin images differ from the plan: missing {missing}, unexpected {extra}"
        )
    if compressed:
        plain = [i.target for i in images if not i.compressed]
        if plain:
            raise ManifestError(f"{name}: images not compressed: {plain}")
    return images


def check_symbols(
    name: str, data: bytes, images: list[FatbinImage], entries: list[dict[str, Any]]
) -> dict[str, int]:
    """Fail unless every image defines exactly the plan's entries for it; {target: count}.

    An entry without ``images`` belongs in every image of the family.
    """
    counts = {}
    problems = []
    for img in images:
        want = {e["symbol"] for e in entries if img.target in e.get("images", [img.target])}
        found = image_symbols(data, img)
        if found != want:
            missing, extra = sorted(want - found), sorted(found - want)
            problems.append(
                f"{img.target}: {len(missing)} missing {_few(missing)}, "
                f"{len(extra)} unexpected {_few(extra)}"
            )
        counts[img.target] = len(found)
    if problems:
        raise ManifestError(
            f"{name}: kernels differ from the plan (a preprocessor guard this toolkit reads "
            f"differently?): {'; '.join(problems)}"
        )
    return counts


def _few(names: list[str], n: int = 4) -> str:
    return (
        "["
        + ", ".join(names[:n])
        + (f", ... {len(names) - n} more" if len(names) > n else "")
        + "]"
    )


def write_manifest(
    plan: Mapping[str, Any],
    fatbins: Mapping[str, Path],
    out_dir: Path,
    *,
    toolkit: str,
    package_version: str,
    kernel_counts: dict[str, dict[str, int]] | None = None,
    toolkit_origin: str | None = None,
) -> dict[str, Any]:
    """Copy each family's fatbin to ``out_dir/<family>.fatbin``, check it, write the manifest.

    ``kernel_counts``, if given, receives {family: {image: kernels checked}}.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*.fatbin"):
        if stale.stem not in plan["families"]:
            stale.unlink()
    major, minor = parse_version(toolkit)
    families: dict[str, Any] = {}
    ptx_isas: set[tuple[int, int]] = set()
    checked: dict[str, dict[str, int]] = {}
    for name, fam in plan["families"].items():
        if name not in fatbins:
            raise ManifestError(f"{name}: the plan has this family but no fatbin was built")
        data = Path(fatbins[name]).read_bytes()
        images = check_fatbin(name, data, fam["images"])
        kernels = check_symbols(name, data, images, fam["entries"])
        isas = {i.ptx_isa for i in images if i.ptx_isa is not None}
        if len(isas) > 1:
            raise ManifestError(f"{name}: PTX images of several ISA versions: {sorted(isas)}")
        ptx_isas |= {parse_version(v) for v in isas if v}
        dest = out_dir / f"{name}.fatbin"
        shutil.copyfile(fatbins[name], dest)
        families[name] = {
            "file": dest.name,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "images": [image_record(i) for i in images],
            "entries": fam["entries"],
            "variants": fam.get("variants", {}),
            "params": fam["params"],
            "param_format": fam["param_format"],
            "param_bytes": fam["param_bytes"],
            "param_offsets": fam["param_offsets"],
            "skipped": fam["skipped"],
            "dtypes": fam["dtypes"],
            "op_dtypes": fam["op_dtypes"],
            "constants": fam["constants"],
        }
        checked[name] = kernels
    manifest = {
        "format": MANIFEST_FORMAT,
        "package_version": package_version,
        "toolkit": f"{major}.{minor}",
        "toolkit_full": toolkit,
        "toolkit_origin": toolkit_origin,  # where the compiler came from, when the build knows
        # Cubins of toolkit X.Y need a driver of CUDA X.0 or later (minor-version
        # compatibility); its PTX needs a driver whose JIT reads the PTX's ISA (12.4's 8.4:
        # a 12.4 driver), which only GPUs without a cubin here depend on.
        "driver_floor": f"{major}.0",
        "ptx_driver_floor": _ptx_floor(ptx_isas),
        "archs": plan.get("archs"),
        "families_filter": plan.get("families_filter"),
        "targets": plan["targets"],
        "constants": plan["constants"],
        "families": families,
    }
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    (out_dir / "manifest.json").write_text(text)
    if kernel_counts is not None:
        kernel_counts.update(checked)
    return manifest


def _ptx_floor(isas: set[tuple[int, int]]) -> str | None:
    if not isas:
        return None
    need = driver_for_ptx_isa(max(isas))
    return format_version(need) if need else None
