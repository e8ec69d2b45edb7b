#!/usr/bin/env python3
"""Merge wheels built from shards of the arch matrix into one wheel with one manifest.

Each shard is the same source built with its own AOTKERNELS_ARCHS (e.g. on separate CI
machines). Everything but aotkernels/kernels/ must be byte-identical across shards; each
family's fatbin entries are gathered from every shard, put in nvcc's order (as one full build
would write them) and checked: the same image from two shards must be the same bytes.

The merged wheel keeps the shards' zip entry order and entry attributes, its manifest is the
one a single build would write (``archs`` null) and RECORD is rewritten in entry order, so a
merge of reproducible shards is byte-identical to a one-machine build of the same commit.
By default every target the shards left out (``not in AOTKERNELS_ARCHS``) must have been built
by another shard; ``--allow-partial`` merges anyway.

Usage: merge_shards.py --out DIR SHARD.whl [SHARD.whl ...]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from aotkernels._build.matrix import parse_matrix
from aotkernels._build.plan import image_order
from aotkernels.fatbin import entry_bytes, pack_fatbin, read_fatbin
from aotkernels.manifest import image_record

KERNELS = "aotkernels/kernels/"
MANIFEST = KERNELS + "manifest.json"
NOT_IN_ARCHS = "not in AOTKERNELS_ARCHS"
# Per-family manifest fields that come from the sources, not from the shard's targets.
_SAME_FIELDS = ("file", "entries", "params", "param_format", "param_bytes")


class MergeError(ValueError):
    """The shards cannot be merged (they differ outside the kernels, or disagree on an image)."""


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


class Shard:
    def __init__(self, path: Path) -> None:
        self.path = path
        with zipfile.ZipFile(path) as zf:
            self.infos = {i.filename: i for i in zf.infolist()}
            self.files = {n: zf.read(n) for n in self.infos}
        try:
            self.manifest: dict[str, Any] = json.loads(self.files[MANIFEST])
        except KeyError:
            raise MergeError(f"{path}: no {MANIFEST}") from None
        records = [n for n in self.files if n.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise MergeError(f"{path}: expected one .dist-info/RECORD, found {records}")
        self.record = records[0]


def _entry_order(shards: list[Shard], names: set[str]) -> list[str]:
    """The first shard's entry order; a name only later shards have goes after its predecessor
    in that shard (a family only one shard built lands where a full build would put it)."""
    order = list(shards[0].infos)
    for shard in shards[1:]:
        prev: str | None = None
        for name in shard.infos:
            if name not in order:
                order.insert(order.index(prev) + 1 if prev is not None else 0, name)
            prev = name
    return [n for n in order if n in names]


def merge(paths: list[Path], *, allow_partial: bool = False) -> tuple[str, dict[str, bytes]]:
    """The merged wheel's file name and contents (in zip entry order)."""
    name, files, _ = _merge(paths, allow_partial=allow_partial)
    return name, files


def _merge(
    paths: list[Path], *, allow_partial: bool
) -> tuple[str, dict[str, bytes], dict[str, zipfile.ZipInfo]]:
    if not paths:
        raise MergeError("no shard wheels given")
    names = {p.name for p in paths}
    if len(names) != 1:
        raise MergeError(f"shards must be the same wheel (name and tags), got {sorted(names)}")
    shards = [Shard(p) for p in paths]
    record = shards[0].record

    def fixed(s: Shard) -> dict[str, bytes]:
        return {n: d for n, d in s.files.items() if not n.startswith(KERNELS) and n != record}

    base = fixed(shards[0])
    for s in shards[1:]:
        other = fixed(s)
        diff = sorted(n for n in set(base) | set(other) if base.get(n) != other.get(n))
        if diff:
            raise MergeError(f"{s.path}: differs from {paths[0]} outside the kernels: {diff[:5]}")
    manifests = [s.manifest for s in shards]
    for key in ("format", "package_version", "toolkit_full", "driver_floor", "families_filter"):
        if len({json.dumps(m.get(key)) for m in manifests}) != 1:
            raise MergeError(f"shards disagree on {key}: {[m.get(key) for m in manifests]}")
    matrix = parse_matrix(tomllib.loads(base["aotkernels/arch_matrix.toml"].decode()))

    merged_manifest: dict[str, Any] = dict(manifests[0])
    merged_manifest["archs"] = None  # what a build of the whole matrix records
    # A shard without PTX records none; the whole build needs what any shard's PTX needs.
    floors = [m["ptx_driver_floor"] for m in manifests if m.get("ptx_driver_floor")]
    merged_manifest["ptx_driver_floor"] = max(floors, key=_version_key) if floors else None
    merged_manifest["families"] = {}
    out = dict(base)
    family_names = sorted({f for m in manifests for f in m["families"]})
    holes: list[str] = []
    for fam in family_names:
        if fam not in matrix.families:
            raise MergeError(f"family {fam!r} is not in the shards' arch_matrix.toml")
        family = matrix.families[fam]
        nvcc_order = image_order([matrix.targets[t] for t in family.targets], list(family.ptx))
        entries: dict[tuple[str, int, str], bytes] = {}
        per_shard = [
            (s, s.manifest["families"][fam]) for s in shards if fam in s.manifest["families"]
        ]
        first = per_shard[0][1]
        for s, fm in per_shard:
            for key in _SAME_FIELDS:
                if fm[key] != first[key]:
                    raise MergeError(
                        f"{s.path}: {fam}: manifest {key} differs from another shard's"
                    )
            try:
                data = s.files[KERNELS + fm["file"]]
            except KeyError:
                raise MergeError(f"{s.path}: {fam}: {fm['file']} missing") from None
            if hashlib.sha256(data).hexdigest() != fm["sha256"]:
                raise MergeError(f"{s.path}: {fam}: {fm['file']} does not match its manifest")
            for img in read_fatbin(data):
                ident = (img.kind, img.arch, img.variant)
                blob = entry_bytes(data, img)
                if ident in entries and entries[ident] != blob:
                    raise MergeError(
                        f"{s.path}: {fam} image {img.target} differs from another "
                        "shard's (built from other sources or flags?)"
                    )
                entries[ident] = blob
        unknown = sorted(set(entries) - set(nvcc_order))
        if unknown:
            raise MergeError(f"{fam}: images {unknown} are not in the matrix")
        fatbin = pack_fatbin(entries[k] for k in nvcc_order if k in entries)
        built = {k[0] + str(k[1]) + k[2] for k in entries}
        skipped = [s for s in first["skipped"] if not _covered(s[0], built)]
        holes += [f"{fam}:{t}" for t, why in skipped if why == NOT_IN_ARCHS]
        fam_manifest = dict(first)
        fam_manifest.update(
            bytes=len(fatbin),
            sha256=hashlib.sha256(fatbin).hexdigest(),
            images=[image_record(i) for i in read_fatbin(fatbin)],
            skipped=skipped,
        )
        merged_manifest["families"][fam] = fam_manifest
        out[KERNELS + first["file"]] = fatbin
    if holes and not allow_partial:
        raise MergeError(
            f"no shard built {', '.join(holes)} (pass --allow-partial to merge anyway)"
        )
    for s in shards:  # directory entries (auditwheel writes them) are kept as they are
        out.update({n: b"" for n in s.files if n.endswith("/") and n.startswith(KERNELS)})
    extra = sorted(
        n
        for s in shards
        for n in s.files
        if n.startswith(KERNELS) and n not in out and n != MANIFEST
    )
    if extra:
        raise MergeError(f"unexpected files under {KERNELS}: {extra}")
    out[MANIFEST] = (json.dumps(merged_manifest, indent=1, sort_keys=True) + "\n").encode()
    order = _entry_order(shards, set(out) | {record})
    infos = {n: next(s.infos[n] for s in shards if n in s.infos) for n in order}
    out[record] = _record(shards[0], record, order, out)
    return paths[0].name, {n: out[n] for n in order}, infos


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def _record(first: Shard, record: str, order: list[str], files: dict[str, bytes]) -> bytes:
    """RECORD with fresh hashes, in the first shard's line order and line ends (backends and
    auditwheel each have their own); files it lacks follow in entry order, RECORD's line last."""
    text = first.files[record].decode()
    eol = "\r\n" if "\r\n" in text else "\n"  # auditwheel writes csv's \r\n
    listed = [line.split(",")[0] for line in text.splitlines() if line]
    names = [n for n in listed if n in files and n != record]
    names += [n for n in order if n not in names and n != record and not n.endswith("/")]
    lines = [_record_line(n, files[n]) for n in names] + [f"{record},,"]
    return (eol.join(lines) + eol).encode()


def _covered(target: str, built: set[str]) -> bool:
    """Whether a target a shard skipped ('sm_90a', 'compute_75') was built by another shard."""
    if target.startswith("compute_"):
        return "ptx" + target.removeprefix("compute_") in built
    return "cubin" + target.removeprefix("sm_") in built


def write_wheel(path: Path, files: dict[str, bytes], infos: dict[str, zipfile.ZipInfo]) -> None:
    """Write ``files`` in the given order, each with its shard's entry attributes (timestamp,
    permissions, compression), so reproducible shards give a reproducible merge."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            src = infos[name]
            info = zipfile.ZipInfo(name, date_time=src.date_time)
            info.external_attr = src.external_attr
            info.compress_type = src.compress_type
            info.create_system = src.create_system
            zf.writestr(info, data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the merged wheel")
    ap.add_argument(
        "--allow-partial", action="store_true", help="merge even with targets no shard built"
    )
    ap.add_argument("shards", type=Path, nargs="+")
    args = ap.parse_args(argv)
    try:
        name, files, infos = _merge(args.shards, allow_partial=args.allow_partial)
    except (MergeError, OSError, KeyError, ValueError, zipfile.BadZipFile) as e:
        print(f"merge_shards: error: {e}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    write_wheel(args.out / name, files, infos)
    man = json.loads(files[MANIFEST])
    for fam, fm in man["families"].items():
        imgs = " ".join(i["target"] for i in fm["images"])
        print(f"merge_shards: {fam}.fatbin {fm['bytes']:,} B: {imgs}")
    print(f"merge_shards: {args.out / name} from {len(args.shards)} shards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
