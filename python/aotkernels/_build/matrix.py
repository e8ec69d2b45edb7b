"""arch_matrix.toml: loading, validation and target resolution.

Imported by the build (tools/build_plan.py, with ``python/`` on ``sys.path``) and, installed,
by ``aotkernels matrix`` only: standard library only.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..dtypes import split_dtype

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised by the 3.10 wheel only
    import tomli as tomllib

__all__ = [
    "DType",
    "EntrySpec",
    "Family",
    "Matrix",
    "MatrixError",
    "Target",
    "Variant",
    "load_matrix",
    "parse_matrix",
    "cpp_name",
    "cpp_type",
    "parse_constants",
    "parse_target_name",
]

# A constant of the matrix: a number, or a named group of integers (an enum or a set of flag
# bits, e.g. {has_weight = 1, has_bias = 2}).
Constant = int | float | dict[str, int]

PARAM_TYPES = ("ptr", "i64", "i32", "f32", "tmap")
_TARGET_RE = re.compile(r"^sm_(\d+)(\d)([af]?)$")
_PTX_RE = re.compile(r"^compute_(\d+)(\d)$")
_IDENT_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# Operand layouts a variant may compile in: one letter per operand (a, then b): k = K-major,
# m = M-major (a), n = N-major (b); "any" = read from the parameters at run time.
LAYOUTS = ("any", "kk", "kn", "mk", "mn")


_VARIANT_KEYS = {"path", "requires", "layouts", "byte_layouts", "ops"}


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
class Variant:
    """One kernel configuration of a family: a code path at one tile size (see [families.gemm])."""

    name: str
    path: str
    requires: tuple[str, ...]
    constants: tuple[tuple[str, int], ...]  # become `static constexpr int` members
    layouts: tuple[str, ...]
    byte_layouts: tuple[str, ...]
    ops: tuple[str, ...] = ()  # the family's ops this variant serves (empty: all of them)

    def layouts_for(self, dtype_bytes: int) -> tuple[str, ...]:
        return self.byte_layouts if dtype_bytes == 1 else self.layouts

    def constant(self, key: str) -> int:
        return dict(self.constants)[key]


@dataclass(frozen=True)
class EntrySpec:
    """One extern "C" kernel: op x dtype (x variant x layout for families with variants)."""

    symbol: str
    op: str
    dtype: str
    variant: Variant | None = None
    layout: str = ""
    requires: frozenset[str] = frozenset()  # features a target needs to hold this entry

    @property
    def variant_name(self) -> str:
        return self.variant.name if self.variant else ""

    def config(self, family: str) -> str:
        """The C++ config struct of its variant (and layout), e.g. ``ak_gemm_v_wg_64x128_kn``."""
        suffix = "" if self.layout in ("", "any") else f"_{self.layout}"
        return f"ak_{family}_v_{self.variant_name}{suffix}"


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
    op_dtypes: tuple[tuple[str, tuple[str, ...]], ...] = ()  # per op, when not every dtype
    dtype_requires: tuple[tuple[str, tuple[str, ...]], ...] = ()
    variants: tuple[Variant, ...] = ()
    constants: Mapping[str, Constant] = field(default_factory=dict)

    def symbol(self, op: str, dtype: str) -> str:
        return self.entry.format(op=op, dtype=dtype)

    def dtypes_of(self, op: str) -> tuple[str, ...]:
        return dict(self.op_dtypes).get(op, self.dtypes)

    def entry_specs(self, dtypes: Mapping[str, DType]) -> list[EntrySpec]:
        """Every entry point of the family, in a stable order."""
        specs: list[EntrySpec] = []
        dreq = dict(self.dtype_requires)
        for op in self.ops:
            for dt in self.dtypes_of(op):
                base = self.symbol(op, dt)
                if not self.variants:
                    specs.append(EntrySpec(base, op, dt))
                    continue
                parts = split_dtype(dt)
                dt_req = frozenset(f for part in parts for f in dreq.get(part, ()))
                for v in self.variants:
                    if v.ops and op not in v.ops:
                        continue
                    for lay in v.layouts_for(dtypes[parts[0]].bytes):
                        name = v.name if lay == "any" else f"{v.name}_{lay}"
                        req = frozenset(v.requires) | dt_req
                        specs.append(EntrySpec(f"{base}_{name}", op, dt, v, lay, req))
        return specs


@dataclass(frozen=True)
class Matrix:
    features: Mapping[str, str]
    targets: Mapping[str, Target]
    dtypes: Mapping[str, DType]
    families: Mapping[str, Family]
    source: str = field(default="arch_matrix.toml", compare=False)
    # Constants shared by several families' kernels, by namespace (ak::<namespace> in C++).
    shared: Mapping[str, Mapping[str, Constant]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The ``aotkernels matrix --json`` shape (the README and tests/test_cli.py show it)."""
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
                    "variants": {v.name: v.path for v in f.variants},
                    "constants": dict(f.constants),
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
    variants = _parse_variants(where, spec, features, ops)
    for dt in fam_dtypes:
        missing = [t for t in fam_targets if t not in dtypes[dt].targets]
        # A family with variants builds each entry only where its dtype exists; any other
        # family promises every op x dtype on every target.
        if missing and (not variants or len(missing) == len(fam_targets)):
            raise MatrixError(
                f"{where}: dtype {dt!r} is not available on target {missing[0]!r} "
                f"(dtypes.{dt}.targets); drop the dtype or the target"
            )
    # op_dtypes may also name mixed-operand pairs "<a>x<b>" of family dtypes of one size.
    pairs = {
        f"{a}x{b}"
        for a in fam_dtypes
        for b in fam_dtypes
        if a != b and dtypes[a].bytes == dtypes[b].bytes
    }
    op_dtypes = _parse_op_map(where, "op_dtypes", spec, set(ops), set(fam_dtypes) | pairs)
    dtype_requires = _parse_op_map(where, "dtype_requires", spec, set(fam_dtypes), set(features))
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
        op_dtypes=op_dtypes,
        dtype_requires=dtype_requires,
        variants=variants,
        constants=parse_constants(spec.get("constants", {}), f"{where}.constants"),
    )


def parse_constants(raw: Any, where: str) -> dict[str, Constant]:
    """A ``constants`` table: each key a number, or a table of integer members (an enum, or a
    set of flags when the group is named ``flags``: distinct powers of two)."""
    if not isinstance(raw, dict):
        raise MatrixError(f"{where}: expected a table, got {raw!r}")
    out: dict[str, Constant] = {}
    for name, value in raw.items():
        cw = f"{where}.{name}"
        if not _IDENT_RE.match(name):
            raise MatrixError(f"{cw}: constant names are lower-case identifiers, got {name!r}")
        if _is_number(value):
            out[name] = value
            continue
        if not isinstance(value, dict) or not value:
            raise MatrixError(f"{cw}: expected a number or a table of integer members, got {value!r}")
        for member, v in value.items():
            if not _IDENT_RE.match(member):
                raise MatrixError(f"{cw}: member names are lower-case identifiers, got {member!r}")
            if not _is_number(v) or isinstance(v, float):
                raise MatrixError(f"{cw}.{member}: expected an integer, got {v!r}")
            if name == "flags" and (v <= 0 or v & (v - 1)):
                raise MatrixError(f"{cw}.{member}: a flag is a power of two, got {v}")
        values = list(value.values())
        if len(set(values)) != len(values):
            raise MatrixError(f"{cw}: two members share a value in {value}")
        out[name] = dict(value)
    # Scalars and group members share the C++ namespace (groups are unscoped enums).
    seen: dict[str, str] = {}
    for name, value in out.items():
        for key in value if isinstance(value, dict) else [name]:
            full = f"{name}.{key}" if isinstance(value, dict) else name
            other = seen.setdefault(cpp_name(key), full)
            if other != full:
                raise MatrixError(f"{where}: {other} and {full} are both {cpp_name(key)} in C++")
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def cpp_name(name: str) -> str:
    """The C++ spelling of a constant or group member: ``has_weight`` -> ``kHasWeight``."""
    return "k" + cpp_type(name)


def cpp_type(name: str) -> str:
    """The C++ enum type of a group: ``scale_mode`` -> ``ScaleMode``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _parse_op_map(
    where: str, key: str, spec: Mapping[str, Any], keys: set[str], values: set[str]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """An optional ``{name = [values]}`` table (op -> dtypes, dtype -> features)."""
    raw = spec.get(key, {})
    if not isinstance(raw, dict):
        raise MatrixError(f"{where}.{key}: expected a table, got {raw!r}")
    out = []
    for name, vals in raw.items():
        if name not in keys:
            raise MatrixError(
                f"{where}.{key}: unknown key {name!r} (expected one of {sorted(keys)})"
            )
        items = _str_list(vals, f"{where}.{key}.{name}")
        for v in items:
            if v not in values:
                raise MatrixError(f"{where}.{key}.{name}: unknown value {v!r}")
        out.append((name, tuple(items)))
    return tuple(out)


def _parse_variants(
    where: str, spec: Mapping[str, Any], features: Mapping[str, str], fam_ops: Sequence[str]
) -> tuple[Variant, ...]:
    raw = spec.get("variants", {})
    if not isinstance(raw, dict):
        raise MatrixError(f"{where}.variants: expected a table of tables")
    out = []
    for name, v in raw.items():
        vw = f"{where}.variants.{name}"
        if not _IDENT_RE.match(name) or not isinstance(v, dict):
            raise MatrixError(f"{vw}: expected a table named by a lower-case identifier")
        path = v.get("path")
        if not isinstance(path, str) or not _IDENT_RE.match(path):
            raise MatrixError(f"{vw}.path: expected an identifier, got {path!r}")
        req = _str_list(v.get("requires", []), f"{vw}.requires")
        for feat in req:
            if feat not in features:
                raise MatrixError(f"{vw}.requires: unknown feature {feat!r}")
        layouts = _str_list(v.get("layouts", ["any"]), f"{vw}.layouts")
        byte_layouts = _str_list(v.get("byte_layouts", layouts), f"{vw}.byte_layouts")
        for lay in layouts + byte_layouts:
            if lay not in LAYOUTS:
                raise MatrixError(f"{vw}.layouts: expected one of {LAYOUTS}, got {lay!r}")
        ops = _str_list(v.get("ops", []), f"{vw}.ops")
        for op in ops:
            if op not in fam_ops:
                raise MatrixError(f"{vw}.ops: {op!r} is not one of the family's ops {list(fam_ops)}")
        constants = []
        for key, val in v.items():
            if key in _VARIANT_KEYS:
                continue
            if not _IDENT_RE.match(key) or not isinstance(val, int) or isinstance(val, bool):
                raise MatrixError(f"{vw}.{key}: expected an integer constant, got {val!r}")
            constants.append((key, val))
        out.append(
            Variant(
                name, path, tuple(req), tuple(constants), tuple(layouts), tuple(byte_layouts),
                tuple(ops),
            )
        )
    return tuple(out)


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
        raw_shared = doc.get("constants", {})
        if not isinstance(raw_shared, dict):
            raise MatrixError(f"constants: expected a table of namespaces, got {raw_shared!r}")
        shared = {}
        for ns, table in raw_shared.items():
            if not _IDENT_RE.match(ns) or ns in families:
                raise MatrixError(
                    f"constants.{ns}: expected a lower-case namespace that is no family's name"
                )
            shared[ns] = parse_constants(table, f"constants.{ns}")
        symbols: dict[str, str] = {}
        for fam in families.values():
            for e in fam.entry_specs(dtypes):
                if e.symbol in symbols:
                    raise MatrixError(
                        f"families.{fam.name}: entry point {e.symbol!r} also made by "
                        f"families.{symbols[e.symbol]}"
                    )
                symbols[e.symbol] = fam.name
    except MatrixError as e:
        raise MatrixError(f"{source}: {e}") from None
    return Matrix(features, targets, dtypes, families, source, shared)


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
