"""arch_matrix.toml: loading, validation and target resolution.

This module is imported by the build (tools/build_plan.py, with ``python/`` on ``sys.path``)
and by the installed package, so it depends on the standard library only.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised by the 3.10 wheel only
    import tomli as tomllib

__all__ = [
    "DType",
    "Family",
    "Matrix",
    "MatrixError",
    "Target",
    "load_matrix",
    "parse_matrix",
    "parse_target_name",
]

PARAM_TYPES = ("ptr", "i64", "i32", "f32")
_TARGET_RE = re.compile(r"^sm_(\d+)(\d)([af]?)$")
_PTX_RE = re.compile(r"^compute_(\d+)(\d)$")
_IDENT_RE = re.compile(r"^[a-z][a-z0-9_]*$")


class MatrixError(ValueError):
    """The arch matrix is inconsistent; the message names the offending entry."""


@dataclass(frozen=True)
class Target:
    """One build target, e.g. ``sm_90a``: a cubin for compute capability ``cc``."""

    name: str
    cc: tuple[int, int]
    variant: str  # "" generic, "a" arch-specific, "f" family-specific
    features: frozenset[str]
    min_toolkit: tuple[int, int] = (0, 0)

    @property
    def sm(self) -> int:
        """The numeric arch as nvcc and fatbin headers spell it (9.0 -> 90, 12.0 -> 120)."""
        return self.cc[0] * 10 + self.cc[1]

    @property
    def cc_str(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}"


@dataclass(frozen=True)
class DType:
    name: str
    ctype: str
    bytes: int
    targets: frozenset[str]


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    sources: tuple[str, ...]
    ops: tuple[str, ...]
    dtypes: tuple[str, ...]
    targets: tuple[str, ...]  # resolved, in matrix order
    ptx: tuple[str, ...]
    params: tuple[tuple[str, str], ...]
    entry: str = "ak_{op}_{dtype}"
    requires: tuple[str, ...] = ()

    def symbol(self, op: str, dtype: str) -> str:
        return self.entry.format(op=op, dtype=dtype)


@dataclass(frozen=True)
class Matrix:
    features: Mapping[str, str]
    targets: Mapping[str, Target]
    dtypes: Mapping[str, DType]
    families: Mapping[str, Family]
    source: str = field(default="arch_matrix.toml", compare=False)

    def to_json(self) -> dict[str, Any]:
        """The ``aotkernels matrix --json`` shape (see DESIGN.md)."""
        return {
            "targets": [
                {
                    "name": t.name,
                    "cc": t.cc_str,
                    "variant": t.variant,
                    "features": sorted(t.features),
                    "min_toolkit": "{}.{}".format(*t.min_toolkit),
                }
                for t in self.targets.values()
            ],
            "dtypes": {
                d.name: {"ctype": d.ctype, "bytes": d.bytes, "targets": sorted(d.targets)}
                for d in self.dtypes.values()
            },
            "families": {
                f.name: {
                    "description": f.description,
                    "ops": list(f.ops),
                    "dtypes": list(f.dtypes),
                    "targets": list(f.targets),
                    "ptx": list(f.ptx),
                    "requires": list(f.requires),
                }
                for f in self.families.values()
            },
        }


def parse_target_name(name: str) -> tuple[tuple[int, int], str]:
    """``"sm_90a"`` -> ``((9, 0), "a")``; raises ``MatrixError`` for anything else."""
    m = _TARGET_RE.match(name)
    if not m:
        raise MatrixError(f"target name must look like sm_<major><minor>[a|f], got {name!r}")
    return (int(m.group(1)), int(m.group(2))), m.group(3)


def parse_ptx_name(name: str) -> tuple[int, int]:
    """``"compute_120"`` -> ``(12, 0)``."""
    m = _PTX_RE.match(name)
    if not m:
        raise MatrixError(f"PTX target must look like compute_<major><minor>, got {name!r}")
    return int(m.group(1)), int(m.group(2))


def _version(text: str, where: str) -> tuple[int, int]:
    m = re.match(r"^(\d+)\.(\d+)$", text)
    if not m:
        raise MatrixError(f"{where}: expected a version like '12.9', got {text!r}")
    return int(m.group(1)), int(m.group(2))


def _table(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = doc.get(key)
    if not isinstance(value, dict) or not value:
        raise MatrixError(f"{where}: missing or empty table [{key}]")
    return value


def _str_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MatrixError(f"{where}: expected a list of strings, got {value!r}")
    return value


def _parse_targets(doc: Mapping[str, Any], features: Mapping[str, str]) -> dict[str, Target]:
    targets: dict[str, Target] = {}
    for name, spec in _table(doc, "targets", "arch_matrix").items():
        where = f"targets.{name}"
        try:
            cc_from_name, variant = parse_target_name(name)
        except MatrixError as e:
            raise MatrixError(f"{where}: {e}") from None
        if not isinstance(spec, dict) or "cc" not in spec:
            raise MatrixError(f"{where}: missing 'cc'")
        cc = _version(str(spec["cc"]), f"{where}.cc")
        if cc != cc_from_name:
            raise MatrixError(
                f"{where}.cc: expected {cc_from_name[0]}.{cc_from_name[1]} to match the name, "
                f"got {spec['cc']}"
            )
        feats = _str_list(spec.get("features", []), f"{where}.features")
        for feat in feats:
            if feat not in features:
                raise MatrixError(f"{where}.features: unknown feature {feat!r} (not in [features])")
        min_tk = _version(str(spec.get("min_toolkit", "0.0")), f"{where}.min_toolkit")
        targets[name] = Target(name, cc, variant, frozenset(feats), min_tk)
    return targets


def _parse_dtypes(doc: Mapping[str, Any], targets: Mapping[str, Target]) -> dict[str, DType]:
    dtypes: dict[str, DType] = {}
    for name, spec in _table(doc, "dtypes", "arch_matrix").items():
        where = f"dtypes.{name}"
        if not isinstance(spec, dict):
            raise MatrixError(f"{where}: expected a table")
        for key in ("ctype", "bytes", "targets"):
            if key not in spec:
                raise MatrixError(f"{where}: missing {key!r}")
        raw = spec["targets"]
        names = list(targets) if raw == "all" else _str_list(raw, f"{where}.targets")
        for t in names:
            if t not in targets:
                raise MatrixError(f"{where}.targets: unknown target {t!r}")
        if not isinstance(spec["bytes"], int) or spec["bytes"] not in (1, 2, 4, 8):
            raise MatrixError(f"{where}.bytes: expected 1, 2, 4 or 8, got {spec['bytes']!r}")
        dtypes[name] = DType(name, str(spec["ctype"]), spec["bytes"], frozenset(names))
    return dtypes


def _resolve_family_targets(
    where: str, spec: Mapping[str, Any], targets: Mapping[str, Target], features: Mapping[str, str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if "targets" in spec and "requires" in spec:
        raise MatrixError(f"{where}: give either 'targets' or 'requires', not both")
    if "targets" in spec:
        names = _str_list(spec["targets"], f"{where}.targets")
        for t in names:
            if t not in targets:
                raise MatrixError(f"{where}.targets: unknown target {t!r}")
        if not names:
            raise MatrixError(f"{where}.targets: empty")
        return tuple(names), ()
    requires = _str_list(spec.get("requires", []), f"{where}.requires")
    for feat in requires:
        if feat not in features:
            raise MatrixError(f"{where}.requires: unknown feature {feat!r}")
    # Per compute capability keep the most portable qualifying target: a generic cubin runs on
    # later minors too, an `f` cubin on its family, an `a` cubin on one cc only.
    rank = {"": 0, "f": 1, "a": 2}
    best: dict[tuple[int, int], Target] = {}
    for tgt in targets.values():
        if not set(requires) <= tgt.features:
            continue
        if not requires and tgt.variant:
            continue
        if tgt.cc not in best or rank[tgt.variant] < rank[best[tgt.cc].variant]:
            best[tgt.cc] = tgt
    if not best:
        raise MatrixError(f"{where}.requires: no target provides all of {requires}")
    chosen = {t.name for t in best.values()}
    return tuple(n for n in targets if n in chosen), tuple(requires)


def _parse_family(
    name: str,
    spec: Any,
    targets: Mapping[str, Target],
    dtypes: Mapping[str, DType],
    features: Mapping[str, str],
    kernels_dir: Path | None,
) -> Family:
    where = f"families.{name}"
    if not _IDENT_RE.match(name):
        raise MatrixError(f"{where}: family names are lower-case identifiers, got {name!r}")
    if not isinstance(spec, dict):
        raise MatrixError(f"{where}: expected a table")
    sources = _str_list(spec.get("sources", []), f"{where}.sources")
    if not sources:
        raise MatrixError(f"{where}.sources: a family needs at least one source file")
    if kernels_dir is not None:
        for src in sources:
            if not (kernels_dir / name / src).is_file():
                raise MatrixError(f"{where}.sources: {src!r} not found in kernels/{name}/")
    ops = _str_list(spec.get("ops", []), f"{where}.ops")
    if not ops:
        raise MatrixError(f"{where}.ops: a family needs at least one op")
    for op in ops:
        if not _IDENT_RE.match(op):
            raise MatrixError(f"{where}.ops: op names are lower-case identifiers, got {op!r}")
    if len(set(ops)) != len(ops):
        raise MatrixError(f"{where}.ops: duplicate op in {ops}")
    fam_dtypes = _str_list(spec.get("dtypes", []), f"{where}.dtypes")
    if not fam_dtypes:
        raise MatrixError(f"{where}.dtypes: a family needs at least one dtype")
    for dt in fam_dtypes:
        if dt not in dtypes:
            raise MatrixError(f"{where}.dtypes: unknown dtype {dt!r} (known: {', '.join(dtypes)})")
    fam_targets, requires = _resolve_family_targets(where, spec, targets, features)
    for dt in fam_dtypes:
        for t in fam_targets:
            if t not in dtypes[dt].targets:
                raise MatrixError(
                    f"{where}: dtype {dt!r} is not available on target {t!r} "
                    f"(dtypes.{dt}.targets); drop the dtype or the target"
                )
    ptx = _str_list(spec.get("ptx", []), f"{where}.ptx")
    for p in ptx:
        try:
            parse_ptx_name(p)
        except MatrixError as e:
            raise MatrixError(f"{where}.ptx: {e}") from None
    raw_params = spec.get("params")
    if not isinstance(raw_params, list) or not raw_params:
        raise MatrixError(f"{where}.params: expected a list of [name, type] pairs")
    params: list[tuple[str, str]] = []
    for p in raw_params:
        if (
            not isinstance(p, list)
            or len(p) != 2
            or not _IDENT_RE.match(str(p[0]))
            or p[1] not in PARAM_TYPES
        ):
            raise MatrixError(f"{where}.params: expected [name, one of {PARAM_TYPES}], got {p!r}")
        params.append((p[0], p[1]))
    if len({p[0] for p in params}) != len(params):
        raise MatrixError(f"{where}.params: duplicate parameter name")
    entry = str(spec.get("entry", "ak_{op}_{dtype}"))
    if "{op}" not in entry or "{dtype}" not in entry:
        raise MatrixError(f"{where}.entry: must contain {{op}} and {{dtype}}, got {entry!r}")
    return Family(
        name=name,
        description=str(spec.get("description", "")),
        sources=tuple(sources),
        ops=tuple(ops),
        dtypes=tuple(fam_dtypes),
        targets=fam_targets,
        ptx=tuple(ptx),
        params=tuple(params),
        entry=entry,
        requires=requires,
    )


def parse_matrix(
    doc: Mapping[str, Any], *, kernels_dir: Path | None = None, source: str = "arch_matrix.toml"
) -> Matrix:
    """Validate a parsed TOML document; ``kernels_dir`` also checks that sources exist."""
    try:
        if doc.get("schema") != 1:
            raise MatrixError(f"schema: expected 1, got {doc.get('schema')!r}")
        features = dict(_table(doc, "features", "arch_matrix"))
        targets = _parse_targets(doc, features)
        dtypes = _parse_dtypes(doc, targets)
        families = {
            name: _parse_family(name, spec, targets, dtypes, features, kernels_dir)
            for name, spec in _table(doc, "families", "arch_matrix").items()
        }
        symbols: dict[str, str] = {}
        for fam in families.values():
            for op in fam.ops:
                for dt in fam.dtypes:
                    sym = fam.symbol(op, dt)
                    if sym in symbols:
                        raise MatrixError(
                            f"families.{fam.name}: entry point {sym!r} also made by "
                            f"families.{symbols[sym]}"
                        )
                    symbols[sym] = fam.name
    except MatrixError as e:
        raise MatrixError(f"{source}: {e}") from None
    return Matrix(features, targets, dtypes, families, source)


def load_matrix(path: str | Path, *, check_sources: bool = True) -> Matrix:
    """Read and validate ``arch_matrix.toml`` (sources are checked next to it in ``kernels/``)."""
    path = Path(path)
    with path.open("rb") as f:
        try:
            doc = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise MatrixError(f"{path}: not valid TOML: {e}") from None
    kernels_dir = path.parent / "kernels" if check_sources else None
    return parse_matrix(doc, kernels_dir=kernels_dir, source=str(path))
