#!/usr/bin/env python3
"""Merge wheels built from shards of the arch matrix into one wheel with one manifest.

Each shard is the same source built with its own AOTKERNELS_ARCHS (e.g. on separate CI
machines). Everything but aotkernels/kernels/ must be byte-identical across shards; each
family's fatbin entries are gathered from every shard, put in nvcc's order (as one full build
would write them) and checked: the same image from two shards must be the same bytes.

Usage: merge_shards.py --out DIR SHARD.whl [SHARD.whl ...]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from aotkernels.arch_matrix import parse_matrix
from aotkernels.fatbin import entry_bytes, pack_fatbin, read_fatbin
from aotkernels.manifest import image_record
from aotkernels.plan import image_order

KERNELS = "aotkernels/kernels/"


class MergeError(ValueError):
    """The shards cannot be merged (they differ outside the kernels, or disagree on an image)."""


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _read(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def merge(shards: list[Path]) -> tuple[str, dict[str, bytes]]:
    """The merged wheel's file name and contents."""
    if not shards:
        raise MergeError("no shard wheels given")
    names = {p.name for p in shards}
    if len(names) != 1:
        raise MergeError(f"shards must be the same wheel (name and tags), got {sorted(names)}")
    contents = [_read(p) for p in shards]
    record = next(n for n in contents[0] if n.endswith(".dist-info/RECORD"))

    def fixed(files: dict[str, bytes]) -> dict[str, bytes]:
        return {n: d for n, d in files.items() if not n.startswith(KERNELS) and n != record}

    base = fixed(contents[0])
    for path, files in zip(shards[1:], contents[1:], strict=True):
        other = fixed(files)
        diff = sorted(n for n in set(base) | set(other) if base.get(n) != other.get(n))
        if diff:
            raise MergeError(f"{path}: differs from {shards[0]} outside the kernels: {diff[:5]}")
    manifests = [json.loads(f[KERNELS + "manifest.json"]) for f in contents]
    for key in ("package_version", "toolkit_full", "driver_floor"):
        if len({m[key] for m in manifests}) != 1:
            raise MergeError(f"shards disagree on {key}: {[m[key] for m in manifests]}")
    matrix = parse_matrix(tomllib.loads(base["aotkernels/arch_matrix.toml"].decode()))

    merged_manifest: dict[str, Any] = dict(manifests[0])
    merged_manifest["archs"] = None
    merged_manifest["shards"] = [m.get("archs") for m in manifests]
    merged_manifest["families"] = {}
    out = dict(base)
    family_names = sorted({f for m in manifests for f in m["families"]})
    for fam in family_names:
        family = matrix.families[fam]
        order = image_order([matrix.targets[t] for t in family.targets], list(family.ptx))
        entries: dict[tuple[str, int, str], bytes] = {}
        for path, files, man in zip(shards, contents, manifests, strict=True):
            if fam not in man["families"]:
                continue
            data = files[KERNELS + man["families"][fam]["file"]]
            for img in read_fatbin(data):
                ident = (img.kind, img.arch, img.variant)
                blob = entry_bytes(data, img)
                if ident in entries and entries[ident] != blob:
                    raise MergeError(
                        f"{path}: {fam} image {img.target} differs from another "
                        "shard's (built from other sources or flags?)"
                    )
                entries[ident] = blob
        unknown = sorted(set(entries) - set(order))
        if unknown:
            raise MergeError(f"{fam}: images {unknown} are not in the matrix")
        fatbin = pack_fatbin(entries[k] for k in order if k in entries)
        first = next(m["families"][fam] for m in manifests if fam in m["families"])
        built = {k[0] + str(k[1]) + k[2] for k in entries}
        fam_manifest = dict(first)
        fam_manifest.update(
            bytes=len(fatbin),
            sha256=hashlib.sha256(fatbin).hexdigest(),
            images=[image_record(i) for i in read_fatbin(fatbin)],
            skipped=[s for s in first["skipped"] if not _covered(s[0], built)],
        )
        merged_manifest["families"][fam] = fam_manifest
        out[KERNELS + first["file"]] = fatbin
    out[KERNELS + "manifest.json"] = (
        json.dumps(merged_manifest, indent=1, sort_keys=True) + "\n"
    ).encode()
    lines = [_record_line(n, d) for n, d in sorted(out.items())] + [f"{record},,"]
    out[record] = ("\n".join(lines) + "\n").encode()
    return shards[0].name, out


def _covered(target: str, built: set[str]) -> bool:
    """Whether a target a shard skipped ('sm_90a', 'compute_75') was built by another shard."""
    if target.startswith("compute_"):
        return "ptx" + target.removeprefix("compute_") in built
    return "cubin" + target.removeprefix("sm_") in built


def write_wheel(path: Path, files: dict[str, bytes]) -> None:
    """Write a wheel with sorted entries and fixed timestamps (SOURCE_DATE_EPOCH or 1980)."""
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    import time

    stamp = time.gmtime(max(epoch, 315532800))[:6]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(files, key=lambda n: (n.endswith("RECORD"), n)):
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, files[name])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the merged wheel")
    ap.add_argument("shards", type=Path, nargs="+")
    args = ap.parse_args(argv)
    try:
        name, files = merge(args.shards)
    except (MergeError, OSError, KeyError, ValueError) as e:
        print(f"merge_shards: error: {e}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    write_wheel(args.out / name, files)
    print(f"merge_shards: {args.out / name} from {len(args.shards)} shards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
