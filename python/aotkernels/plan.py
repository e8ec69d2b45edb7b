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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .arch_matrix import Family, Matrix, Target, parse_ptx_name

__all__ = [
    "BuildPlan",
    "Entry",
    "FamilyPlan",
    "PlanError",
    "check_toolkit",
    "image_order",
    "make_plan",
    "param_layout",
    "parse_arch_filter",
    "plan_json",
    "summary_line",
    "write_plan",
]

# Size, alignment, C type and struct code of each parameter type the matrix may declare.
_PARAM_C = {
    "ptr": (8, "void*", "Q"),
    "i64": (8, "int64_t", "q"),
    "i32": (4, "int32_t", "i"),
    "f32": (4, "float", "f"),
}


class PlanError(ValueError):
    """A build setting (AOTKERNELS_ARCHS, AOTKERNELS_FAMILIES, toolkit) cannot be honoured."""


@dataclass(frozen=True)
class Entry:
    symbol: str
    op: str
    dtype: str


@dataclass(frozen=True)
class FamilyPlan:
    family: Family
    targets: tuple[Target, ...]
    ptx: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (target, reason) left out of this build

    @property
    def name(self) -> str:
        return self.family.name

    def entries(self) -> list[Entry]:
        f = self.family
        return [Entry(f.symbol(op, dt), op, dt) for op in f.ops for dt in f.dtypes]

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
        ptx = [p for p in fam.ptx if wanted is None or p in wanted]
        skipped += [(p, "not in AOTKERNELS_ARCHS") for p in fam.ptx if p not in ptx]
        if targets or ptx:
            plans[name] = FamilyPlan(fam, tuple(targets), tuple(ptx), tuple(skipped))
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
        size, _, code = _PARAM_C[ptype]
        pad = -offset % size
        fmt += "x" * pad + code
        offset += pad
        offsets.append((name, offset))
        offset += size
        align = max(align, size)
    tail = -offset % align
    return fmt + "x" * tail, offset + tail, offsets


def _params_header(fp: FamilyPlan) -> str:
    fam = fp.family
    _, size, offsets = param_layout(fam.params)
    lines = [
        "// Generated from arch_matrix.toml by tools/build_plan.py; do not edit.",
        "#pragma once",
        "#include <cstddef>",
        "#include <cstdint>",
        "",
        f"// Kernel parameters of the {fam.name} family, passed by value; the runtime packs the",
        "// same layout from the manifest.",
        f"struct ak_{fam.name}_params {{",
    ]
    lines += [f"  {_PARAM_C[t][1]} {n};" for n, t in fam.params]
    lines += ["};", f'static_assert(sizeof(ak_{fam.name}_params) == {size}, "layout drift");']
    lines += [
        f'static_assert(offsetof(ak_{fam.name}_params, {n}) == {off}, "layout drift");'
        for n, off in offsets
    ]
    return "\n".join(lines) + "\n"


def _entries_source(fp: FamilyPlan, matrix: Matrix) -> str:
    fam = fp.family
    lines = [
        "// Generated from arch_matrix.toml by tools/build_plan.py; do not edit.",
        f'// Explicit instantiations of the {fam.name} template: one extern "C" kernel per',
        "// op x dtype, named by the matrix's `entry` pattern.",
        f'#include "{fam.name}_params.h"',
        f'#include "{fam.name}.cuh"',
        "",
    ]
    for e in fp.entries():
        ctype = matrix.dtypes[e.dtype].ctype
        lines.append(f"AK_ENTRY({e.symbol}, {e.op}, {ctype})")
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
        "families": {},
    }
    for fp in plan.families.values():
        fmt, size, _ = param_layout(fp.family.params)
        out["families"][fp.name] = {
            "targets": [t.name for t in fp.targets],
            "ptx": list(fp.ptx),
            "skipped": [list(s) for s in fp.skipped],
            "images": [list(i) for i in fp.expected_images()],
            "entries": [{"symbol": e.symbol, "op": e.op, "dtype": e.dtype} for e in fp.entries()],
            "params": [list(p) for p in fp.family.params],
            "param_format": fmt,
            "param_bytes": size,
        }
    return out


def write_plan(plan: BuildPlan, out_dir: Path, kernels_dir: Path) -> None:
    """Write plan.cmake, plan.json and each family's generated sources into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    gen = out_dir / "generated"
    gen.mkdir(exist_ok=True)
    cmake = [
        "# Generated by tools/build_plan.py from arch_matrix.toml; do not edit.",
        f"set(AK_FAMILIES {_cmake_list(plan.families)})",
    ]
    for fp in plan.families.values():
        _write_if_different(gen / f"{fp.name}_params.h", _params_header(fp))
        src = gen / f"{fp.name}_entries.cu"
        _write_if_different(src, _entries_source(fp, plan.matrix))
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
