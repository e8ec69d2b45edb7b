"""What a build holds: ``aotkernels inspect`` for a wheel, an install, a folder or a .fatbin.

Every fatbin is listed from its own headers (``fatbin.read_fatbin``); where a manifest is
present, each family is checked against it (sha256 and image list) and problems are reported.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path
from typing import Any

from .fatbin import FatbinError, read_fatbin
from .manifest import image_record

__all__ = ["inspect_path"]


def _from_files(
    files: dict[str, bytes], manifest: dict[str, Any] | None, source: str
) -> dict[str, Any]:
    families: dict[str, Any] = {}
    fam_manifest = (manifest or {}).get("families", {})
    for fname, data in sorted(files.items()):
        name = Path(fname).stem
        problems: list[str] = []
        try:
            images = [image_record(i) for i in read_fatbin(data)]
        except FatbinError as e:
            images, problems = [], [f"unreadable: {e}"]
        entry: dict[str, Any] = {
            "file": fname,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "images": images,
        }
        want = fam_manifest.get(name)
        if want is not None:
            entry["entries"] = want["entries"]
            entry["dtypes"] = sorted({e["dtype"] for e in want["entries"]})
            entry["ops"] = sorted({e["op"] for e in want["entries"]})
            if want["sha256"] != entry["sha256"]:
                problems.append("sha256 differs from the manifest")
            if [i["target"] for i in want["images"]] != [i["target"] for i in images]:
                problems.append("images differ from the manifest")
        elif manifest is not None:
            problems.append("not in the manifest")
        entry["verified"] = manifest is not None and not problems
        entry["problems"] = problems
        families[name] = entry
    for name in fam_manifest:
        if name not in families:
            families[name] = {
                "file": fam_manifest[name]["file"],
                "bytes": 0,
                "images": [],
                "verified": False,
                "problems": ["fatbin missing"],
            }
    meta = None
    if manifest is not None:
        meta = {
            k: manifest.get(k)
            for k in (
                "package_version",
                "toolkit",
                "toolkit_full",
                "toolkit_origin",
                "driver_floor",
                "archs",
                "families_filter",
            )
        }
    return {
        "source": source,
        "manifest": meta,
        "families": families,
        "targets": _bytes_per_target(families),
        "total_bytes": sum(f["bytes"] for f in families.values()),
    }


def _bytes_per_target(families: dict[str, Any]) -> dict[str, int]:
    """Stored bytes of each target's images summed over families (what one target costs the
    wheel), in first-seen order: ``{"compute_75": 49536, "sm_75": 53848, ...}``."""
    out: dict[str, int] = {}
    for fam in families.values():
        for img in fam["images"]:
            out[img["target"]] = out.get(img["target"], 0) + int(img["bytes"])
    return out


def _from_wheel(path: Path) -> dict[str, Any]:
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        kern = [n for n in names if n.startswith("aotkernels/kernels/")]
        files = {Path(n).name: zf.read(n) for n in kern if n.endswith(".fatbin")}
        man = next((n for n in kern if n.endswith("/manifest.json")), None)
        manifest = json.loads(zf.read(man)) if man else None
    out = _from_files(files, manifest, str(path))
    out["wheel_bytes"] = path.stat().st_size
    return out


def _from_dir(path: Path) -> dict[str, Any]:
    for cand in (path / "aotkernels" / "kernels", path / "kernels", path):
        if (cand / "manifest.json").is_file() or any(cand.glob("*.fatbin")):
            man = cand / "manifest.json"
            manifest = json.loads(man.read_text()) if man.is_file() else None
            files = {p.name: p.read_bytes() for p in sorted(cand.glob("*.fatbin"))}
            return _from_files(files, manifest, str(cand))
    raise FileNotFoundError(f"{path}: no manifest.json or .fatbin files found")


def inspect_path(path: str | Path | None = None) -> dict[str, Any]:
    """List families x images x sizes of ``path`` (default: this installed package)."""
    if path is None:
        from ._paths import KERNELS_DIR

        return _from_dir(KERNELS_DIR)
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or directory")
    if p.is_dir():
        return _from_dir(p)
    if p.suffix == ".whl":
        return _from_wheel(p)
    if p.suffix == ".fatbin":
        return _from_files({p.name: p.read_bytes()}, None, str(p))
    raise ValueError(f"{p}: expected a wheel, a folder or a .fatbin file")
