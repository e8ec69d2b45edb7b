"""manifest.json: what a build holds, written from the plan and checked against the fatbins.

The build writes it (tools/write_manifest.py); the runtime, ``aotkernels inspect`` and the
tests read it. A fatbin whose headers differ from what the plan promised fails the build.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .fatbin import FatbinImage, read_fatbin

__all__ = [
    "MANIFEST_FORMAT",
    "ManifestError",
    "check_fatbin",
    "image_record",
    "load_manifest",
    "write_manifest",
]

MANIFEST_FORMAT = 1

# Driver CUDA version (from cuDriverGetVersion, as major.minor) needed by a toolkit's cubins and
# PTX: a cubin or PTX from toolkit X.Y needs a driver of major X (minor-version compatibility).
# Issue 6 (cu12/cu13 variants) relies on the same rule.


class ManifestError(RuntimeError):
    """A fatbin does not match what the plan or manifest says."""


def image_record(img: FatbinImage) -> dict[str, Any]:
    return {
        "kind": img.kind,
        "target": img.target,
        "arch": img.arch,
        "variant": img.variant,
        "cc": "{}.{}".format(*img.cc),
        "ptx_isa": img.ptx_isa,
        "compressed": img.compressed,
        "compression": img.compression,
        "bytes": img.stored_bytes,
        "uncompressed_bytes": img.uncompressed_size,
    }


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


def write_manifest(
    plan: Mapping[str, Any],
    fatbins: Mapping[str, Path],
    out_dir: Path,
    *,
    toolkit: str,
    package_version: str,
) -> dict[str, Any]:
    """Copy each family's fatbin to ``out_dir/<family>.fatbin``, check it, write the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*.fatbin"):
        if stale.stem not in plan["families"]:
            stale.unlink()
    major, minor = (int(v) for v in toolkit.split(".")[:2])
    families: dict[str, Any] = {}
    for name, fam in plan["families"].items():
        if name not in fatbins:
            raise ManifestError(f"{name}: the plan has this family but no fatbin was built")
        data = Path(fatbins[name]).read_bytes()
        images = check_fatbin(name, data, fam["images"])
        isas = {i.ptx_isa for i in images if i.ptx_isa is not None}
        if len(isas) > 1:
            raise ManifestError(f"{name}: PTX images of several ISA versions: {sorted(isas)}")
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
            "skipped": fam["skipped"],
        }
    manifest = {
        "format": MANIFEST_FORMAT,
        "package_version": package_version,
        "toolkit": f"{major}.{minor}",
        "toolkit_full": toolkit,
        "driver_floor": f"{major}.0",
        "archs": plan.get("archs"),
        "families_filter": plan.get("families_filter"),
        "families": families,
    }
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    (out_dir / "manifest.json").write_text(text)
    return manifest


def load_manifest(kernels_dir: Path) -> dict[str, Any]:
    """Read ``kernels_dir/manifest.json``; raise ``ManifestError`` naming the file if unusable."""
    path = kernels_dir / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise ManifestError(f"{path}: missing (is aotkernels built and installed?)") from None
    except (OSError, ValueError) as e:
        raise ManifestError(f"{path}: unreadable: {e}") from None
    if manifest.get("format") != MANIFEST_FORMAT:
        raise ManifestError(
            f"{path}: format {manifest.get('format')!r}, this aotkernels reads {MANIFEST_FORMAT}"
        )
    return dict(manifest)
