"""manifest.json: what a build holds, and everything the run time needs to know about it.

The build writes it (``_build.manifest_writer``, from the build plan, checked against the
fatbins); the run time (loader, doctor), ``aotkernels inspect`` and the tests read it. The run
time reads nothing else of the build: not arch_matrix.toml, not the plan.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .fatbin import FatbinImage

__all__ = ["MANIFEST_FORMAT", "ManifestError", "image_record", "load_manifest"]

# 2: param_offsets per family, targets; 3: constants (shared and per family), dtypes and
# op_dtypes per family
MANIFEST_FORMAT = 3


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
