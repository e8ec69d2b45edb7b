"""The build plan: arch_matrix.toml, filtered for one build, expanded into what CMake compiles.

``tools/build_plan.py`` writes the plan at configure time: a ``plan.cmake`` that CMake includes
(one fatbin target per family), the generated sources (the parameter struct header and the
explicit instantiation file of each family) and ``plan.json`` for the manifest step. Standard
library only: the build imports it from the source tree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..dtypes import split_dtype
from .matrix import (
    Constant,
    EntrySpec,
    Family,
    Matrix,
    Target,
    cpp_name,
    cpp_type,
    parse_ptx_name,
)

__all__ = [
    "BuildPlan",
    "Entry",
    "FamilyPlan",
    "PlanError",
    "check_toolkit",
    "entry_json",
    "image_order",
    "make_plan",
    "param_layout",
    "parse_arch_filter",
    "plan_json",
    "ptx_min_toolkit",
    "summary_line",
    "write_plan",
]

# Size, alignment, C type and struct code of each parameter type the matrix may declare. A
# `tmap` is a TMA descriptor (CUtensorMap: 128 bytes) the runtime encodes. CUDA 13's cuda.h
# aligns it to 128 bytes, CUDA 12's to 64: the generated struct spells out alignas(128), so the
# layout (which the runtime packs from the manifest) is the same whichever toolkit built it.
_PARAM_C = {
    "ptr": (8, 8, "void*", "Q"),
    "i64": (8, 8, "int64_t", "q"),
    "i32": (4, 4, "int32_t", "i"),
    "f32": (4, 4, "float", "f"),
    "tmap": (128, 128, "CUtensorMap", "128s"),
}


class PlanError(ValueError):
    """A build setting (AOTKERNELS_ARCHS, AOTKERNELS_FAMILIES, toolkit) cannot be honoured."""


@dataclass(frozen=True)
class Entry:
    symbol: str
    op: str
    dtype: str
    variant: str = ""
    layout: str = ""
    images: tuple[str, ...] = ()  # targets / PTX names whose image holds it; () = every image


@dataclass(frozen=True)
class FamilyPlan:
    family: Family
    targets: tuple[Target, ...]
    ptx: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (target, reason) left out of this build
    matrix: Matrix = field(compare=False, repr=False, kw_only=True)

    @property
    def name(self) -> str:
        return self.family.name

    def entry_specs(self) -> list[EntrySpec]:
        return self.family.entry_specs(self.matrix.dtypes)

    def image_names(self) -> list[str]:
        return [t.name for t in self.targets] + list(self.ptx)

    def images_holding(self, spec: EntrySpec) -> tuple[str, ...]:
        """The images of this build that hold ``spec``: the target has its dtype and features.

        A PTX image counts as the generic target of its compute capability.
        """
        matrix = self.matrix
        names = []
        for name in self.image_names():
            tname = "sm_" + name.removeprefix("compute_") if name.startswith("compute_") else name
            t = matrix.targets.get(tname)
            if t is None:
                continue
            has_dtype = all(tname in matrix.dtypes[d].targets for d in split_dtype(spec.dtype))
            if has_dtype and spec.requires <= t.features:
                names.append(name)
        return tuple(names)

    def entries(self) -> list[Entry]:
        out = []
        for spec in self.entry_specs():
            images = self.images_holding(spec) if spec.variant else ()
            if spec.variant and not images:
                continue  # no image of this build can hold it (e.g. AOTKERNELS_ARCHS=80, fp8)
            out.append(
                Entry(spec.symbol, spec.op, spec.dtype, spec.variant_name, spec.layout, images)
            )
        return out

    def gencode_flags(self) -> list[str]:
        flags = []
        for t in self.targets:
            arch = f"{t.sm}{t.variant}"
            flags.append(f"-gencode=arch=compute_{arch},code=sm_{arch}")
        for p in self.ptx:
            flags.append(f"-gencode=arch={p},code={p}")
        return flags

    def expected_images(self) -> list[tuple[str, int, str]]:
        """(kind, arch, variant) of every image the fatbin must hold, in nvcc's order."""
        return image_order(list(self.targets), list(self.ptx))


@dataclass(frozen=True)
class BuildPlan:
    matrix: Matrix
    families: dict[str, FamilyPlan]
    toolkit: tuple[int, int]
    archs: str | None
    family_filter: str | None


def image_order(targets: list[Target], ptx: list[str]) -> list[tuple[str, int, str]]:
    """(kind, arch, variant) in the order nvcc writes them for our -gencode list.

    nvcc groups entries by virtual architecture, in order of first appearance, and puts the PTX
    of a group before its cubins. Shard merging uses the same order, so a merged fatbin lists
    like one built whole.
    """
    groups: dict[str, list[tuple[str, int, str]]] = {}
    for t in targets:
        groups.setdefault(f"compute_{t.sm}{t.variant}", []).append(("cubin", t.sm, t.variant))
    for p in ptx:
        major, minor = parse_ptx_name(p)
        groups.setdefault(p, []).insert(0, ("ptx", major * 10 + minor, ""))
    return [img for group in groups.values() for img in group]


def parse_arch_filter(text: str, matrix: Matrix) -> set[str]:
    """``"80;90a;compute_75"`` (also ``sm_90a``, ``9.0a``, commas) -> target / PTX names."""
    wanted: set[str] = set()
    ptx_known = {p for f in matrix.families.values() for p in f.ptx}
    for raw in re.split(r"[;,\s]+", text.strip()):
        if not raw:
            continue
        tok = raw.lower()
        if tok.startswith("compute_"):
            name = tok
        else:
            tok = tok.removeprefix("sm_")
            m = re.match(r"^(\d+)\.(\d)([af]?)$", tok)
            name = f"sm_{m.group(1)}{m.group(2)}{m.group(3)}" if m else f"sm_{tok}"
        if name not in matrix.targets and name not in ptx_known:
            known = ", ".join([*matrix.targets, *sorted(ptx_known)])
            raise PlanError(f"AOTKERNELS_ARCHS: {raw!r} is not a target of the matrix ({known})")
        wanted.add(name)
    if not wanted:
        raise PlanError("AOTKERNELS_ARCHS: set but names no target")
    return wanted


def ptx_min_toolkit(matrix: Matrix, name: str) -> tuple[int, int]:
    """The oldest toolkit that writes PTX ``compute_<cc>``: its generic target's minimum."""
    t = matrix.targets.get("sm_" + name.removeprefix("compute_"))
    return t.min_toolkit if t is not None else (0, 0)


def make_plan(
    matrix: Matrix,
    toolkit: tuple[int, int],
    archs: str | None = None,
    families: str | None = None,
) -> BuildPlan:
    """Filter the matrix by ``AOTKERNELS_ARCHS``/``AOTKERNELS_FAMILIES`` and the toolkit."""
    wanted = parse_arch_filter(archs, matrix) if archs else None
    fam_names = list(matrix.families)
    if families:
        fam_names = [f for f in re.split(r"[;,\s]+", families.strip()) if f]
        for f in fam_names:
            if f not in matrix.families:
                raise PlanError(
                    f"AOTKERNELS_FAMILIES: unknown family {f!r} (families: "
                    f"{', '.join(matrix.families)})"
                )
    plans: dict[str, FamilyPlan] = {}
    for name in fam_names:
        fam = matrix.families[name]
        targets: list[Target] = []
        skipped: list[tuple[str, str]] = []
        for tname in fam.targets:
            t = matrix.targets[tname]
            if wanted is not None and tname not in wanted:
                skipped.append((tname, "not in AOTKERNELS_ARCHS"))
            elif toolkit < t.min_toolkit:
                skipped.append((tname, "needs CUDA {}.{}".format(*t.min_toolkit)))
            else:
                targets.append(t)
        ptx: list[str] = []
        for p in fam.ptx:
            need = ptx_min_toolkit(matrix, p)
            if wanted is not None and p not in wanted:
                skipped.append((p, "not in AOTKERNELS_ARCHS"))
            elif toolkit < need:
                skipped.append((p, "needs CUDA {}.{}".format(*need)))
            else:
                ptx.append(p)
        if targets or ptx:
            plans[name] = FamilyPlan(fam, tuple(targets), tuple(ptx), tuple(skipped), matrix=matrix)
    if not plans:
        raise PlanError(
            f"nothing to build: AOTKERNELS_ARCHS={archs!r} and AOTKERNELS_FAMILIES={families!r} "
            "leave no family with a target"
        )
    return BuildPlan(matrix, plans, toolkit, archs, families)


def param_layout(params: Iterable[tuple[str, str]]) -> tuple[str, int, list[tuple[str, int]]]:
    """C layout of a parameter struct: (``struct`` format, size, [(name, offset)])."""
    fmt, offset, offsets, align = "<", 0, [], 1
    for name, ptype in params:
        size, field_align, _, code = _PARAM_C[ptype]
        pad = -offset % field_align
        fmt += "x" * pad + code
        offset += pad
        offsets.append((name, offset))
        offset += size
        align = max(align, field_align)
    tail = -offset % align
    return fmt + "x" * tail, offset + tail, offsets


def _constants_block(namespace: str, constants: dict[str, Constant]) -> list[str]:
    """C++ for a constants table of the matrix: ``constexpr`` numbers and unscoped enums."""
    lines = ["", f"namespace ak::{namespace} {{"]
    for name, value in constants.items():
        if isinstance(value, dict):
            members = ", ".join(f"{cpp_name(m)} = {v}" for m, v in value.items())
            lines.append(f"enum {cpp_type(name)} : int {{ {members} }};")
        elif isinstance(value, float):
            lines.append(f"constexpr float {cpp_name(name)} = {value!r}f;")
        else:
            lines.append(f"constexpr int {cpp_name(name)} = {value};")
    lines.append(f"}}  // namespace ak::{namespace}")
    return lines


def _params_header(fp: FamilyPlan) -> str:
    fam = fp.family
    _, size, offsets = param_layout(fam.params)
    lines = [
        "// Generated from arch_matrix.toml by tools/build_plan.py; do not edit.",
        "#pragma once",
        "#include <cstddef>",
        "#include <cstdint>",
    ]
    if any(t == "tmap" for _, t in fam.params):
        lines.append("#include <cuda.h>  // CUtensorMap")
    lines += [
        "",
        f"// Kernel parameters of the {fam.name} family, passed by value; the runtime packs the",
        "// same layout from the manifest.",
        f"struct ak_{fam.name}_params {{",
    ]
    lines += [
        f"  {'' if t != 'tmap' else f'alignas({_PARAM_C[t][1]}) '}{_PARAM_C[t][2]} {n};"
        for n, t in fam.params
    ]
    lines += ["};", f'static_assert(sizeof(ak_{fam.name}_params) == {size}, "layout drift");']
    lines += [
        f'static_assert(offsetof(ak_{fam.name}_params, {n}) == {off}, "layout drift");'
        for n, off in offsets
    ]
    # The matrix's constants, which the op layer reads from the manifest: the kernels use these
    # names and never restate the values.
    for ns, table in fp.matrix.shared.items():
        lines += _constants_block(ns, dict(table))
    if fam.constants:
        lines += _constants_block(fam.name, dict(fam.constants))
    configs: dict[str, EntrySpec] = {}
    for spec in fp.entry_specs():
        if spec.variant:
            configs.setdefault(spec.config(fam.name), spec)
    for name, spec in configs.items():
        assert spec.variant is not None
        lines += ["", f"// variant {spec.variant.name} ({spec.variant.path}), layout {spec.layout}"]
        lines.append(f"struct {name} {{")
        lines += [f"  static constexpr int {k} = {v};" for k, v in spec.variant.constants]
        any_layout = spec.layout == "any"
        lines.append(f"  static constexpr bool layout_from_flags = {str(any_layout).lower()};")
        lines.append(f"  static constexpr bool a_mmajor = {str(spec.layout[:1] == 'm').lower()};")
        lines.append(f"  static constexpr bool b_kmajor = {str(spec.layout[1:] == 'k').lower()};")
        lines.append("};")
    return "\n".join(lines) + "\n"


def _image_condition(name: str) -> str:
    """Preprocessor test true in exactly the device pass that builds image ``name``.

    An `a` target's pass defines __CUDA_ARCH_FEAT_SM<cc>_ALL (every nvcc since 12.0); `a` and
    `f` passes define __CUDA_ARCH_FAMILY_SPECIFIC__ (12.9+, the first nvcc with `f` targets).
    __CUDA_ARCH_SPECIFIC__ would do for `a` too, but only from 12.9: under 12.4 a test on it
    silently drops every `a`-only entry (and lets the generic entries into the `a` image). A PTX
    image compiles like the generic target of its cc.
    """
    arch = name.removeprefix("compute_").removeprefix("sm_")
    variant = arch[-1] if arch[-1] in "af" else ""
    digits = arch.rstrip("af")
    cond = f"__CUDA_ARCH__ == {int(digits) * 10}"
    feat = f"__CUDA_ARCH_FEAT_SM{digits}_ALL"
    if variant == "a":
        return f"({cond} && defined({feat}))"
    if variant == "f":
        return f"({cond} && defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && !defined({feat}))"
    return f"({cond} && !defined({feat}) && !defined(__CUDA_ARCH_FAMILY_SPECIFIC__))"


def _entries_source(fp: FamilyPlan) -> str:
    fam = fp.family
    lines = [
        "// Generated from arch_matrix.toml by tools/build_plan.py; do not edit.",
        f'// Explicit instantiations of the {fam.name} template: one extern "C" kernel per',
        "// op x dtype, named by the matrix's `entry` pattern.",
        f'#include "{fam.name}_params.h"',
        f'#include "{fam.name}.cuh"',
        "",
    ]
    specs = {s.symbol: s for s in fp.entry_specs()}
    all_images = tuple(fp.image_names())
    # A mixed-operand dtype "<a>x<b>" instantiates with ak_mixed_t<A, B>, which the family's
    # header defines; an alias keeps the template's comma out of the entry macros.
    mixed = sorted({e.dtype for e in fp.entries() if len(split_dtype(e.dtype)) == 2})
    for dt in mixed:
        a, b = (fp.matrix.dtypes[d].ctype for d in split_dtype(dt))
        lines.append(f"using ak_dtype_{dt} = ak_mixed_t<{a}, {b}>;")
    if mixed:
        lines.append("")
    for e in fp.entries():
        ctype = f"ak_dtype_{e.dtype}" if e.dtype in mixed else fp.matrix.dtypes[e.dtype].ctype
        spec = specs[e.symbol]
        if spec.variant is None:
            lines.append(f"AK_ENTRY({e.symbol}, {e.op}, {ctype})")
            continue
        macro = f"AK_ENTRY_{spec.variant.path.upper()}"
        if dict(spec.variant.constants).get("cluster", 1) > 1:
            macro += "_CLUSTER"  # the kernel declares its thread-block cluster (__cluster_dims__)
        line = f"{macro}({e.symbol}, {e.op}, {ctype}, {spec.config(fam.name)})"
        if e.images == all_images:
            lines.append(line)
            continue
        conditions = dict.fromkeys(_image_condition(i) for i in e.images)  # sm_80 == compute_80
        lines.append("#if " + " || \\\n    ".join(conditions))
        lines += [line, "#endif"]
    return "\n".join(lines) + "\n"


def _cmake_list(items: Iterable[str]) -> str:
    return '"' + ";".join(str(i).replace('"', '\\"') for i in items) + '"'


def _write_if_different(path: Path, text: str) -> None:
    """Keep mtimes of unchanged generated files, so only the touched family rebuilds."""
    if path.exists() and path.read_text() == text:
        return
    path.write_text(text)


def plan_json(plan: BuildPlan) -> dict[str, Any]:
    out: dict[str, Any] = {
        "toolkit": "{}.{}".format(*plan.toolkit),
        "archs": plan.archs,
        "families_filter": plan.family_filter,
        # Every target the matrix declares (built or not): the run time's error for a device
        # this build cannot serve names the one that would.
        "targets": {t.name: t.cc_str for t in plan.matrix.targets.values()},
        "constants": {ns: dict(table) for ns, table in plan.matrix.shared.items()},
        "families": {},
    }
    for fp in plan.families.values():
        fmt, size, offsets = param_layout(fp.family.params)
        out["families"][fp.name] = {
            "targets": [t.name for t in fp.targets],
            "ptx": list(fp.ptx),
            "skipped": [list(s) for s in fp.skipped],
            "images": [list(i) for i in fp.expected_images()],
            "entries": [entry_json(e) for e in fp.entries()],
            "variants": {
                v.name: {"path": v.path, "requires": list(v.requires), **dict(v.constants)}
                for v in fp.family.variants
            },
            "params": [list(p) for p in fp.family.params],
            "param_format": fmt,
            "param_bytes": size,
            "param_offsets": dict(offsets),
            "dtypes": list(fp.family.dtypes),
            "op_dtypes": {op: list(fp.family.dtypes_of(op)) for op in fp.family.ops},
            "constants": dict(fp.family.constants),
        }
    return out


def entry_json(e: Entry) -> dict[str, Any]:
    """An entry as plan.json and the manifest record it (variant entries say where they are)."""
    out: dict[str, Any] = {"symbol": e.symbol, "op": e.op, "dtype": e.dtype}
    if e.variant:
        out.update(variant=e.variant, layout=e.layout, images=list(e.images))
    return out


def write_plan(
    plan: BuildPlan, out_dir: Path, kernels_dir: Path, cmake_vars: dict[str, str] | None = None
) -> None:
    """Write plan.cmake, plan.json and each family's generated sources into ``out_dir``.

    ``cmake_vars`` are set in plan.cmake too (e.g. the CUTLASS include folder).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    gen = out_dir / "generated"
    gen.mkdir(exist_ok=True)
    cmake = [
        "# Generated by tools/build_plan.py from arch_matrix.toml; do not edit.",
        f"set(AK_FAMILIES {_cmake_list(plan.families)})",
    ]
    cmake += [f"set({k} {_cmake_list([v])})" for k, v in (cmake_vars or {}).items()]
    for fp in plan.families.values():
        _write_if_different(gen / f"{fp.name}_params.h", _params_header(fp))
        src = gen / f"{fp.name}_entries.cu"
        _write_if_different(src, _entries_source(fp))
        cmake += [
            f"set(AK_{fp.name}_SOURCE {_cmake_list([src.as_posix()])})",
            f"set(AK_{fp.name}_INCLUDE {_cmake_list([(kernels_dir / fp.name).as_posix()])})",
            f"set(AK_{fp.name}_GENCODE {_cmake_list(fp.gencode_flags())})",
            f"set(AK_{fp.name}_SUMMARY {_cmake_list([summary_line(fp)])})",
        ]
    _write_if_different(out_dir / "plan.cmake", "\n".join(cmake) + "\n")
    _write_if_different(out_dir / "plan.json", json.dumps(plan_json(plan), indent=1) + "\n")


def summary_line(fp: FamilyPlan) -> str:
    images = [t.name for t in fp.targets] + list(fp.ptx)
    n = len(fp.entries())
    line = f"{fp.name}: {n} entry points x {len(images)} images ({' '.join(images)})"
    if fp.skipped:
        line += f"; skipped {', '.join(f'{t} ({why})' for t, why in fp.skipped)}"
    return line


def check_toolkit(text: str) -> tuple[int, int]:
    m = re.match(r"^(\d+)\.(\d+)", text)
    if not m:
        raise PlanError(f"toolkit version: expected like '13.0', got {text!r}")
    return int(m.group(1)), int(m.group(2))
