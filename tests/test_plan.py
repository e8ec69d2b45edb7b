"""The build plan: AOTKERNELS_ARCHS / AOTKERNELS_FAMILIES filters, toolkit gating, gencode
flags, parameter struct layout and the files CMake reads (rewritten only when they change)."""

from __future__ import annotations

import copy
import ctypes
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from aotkernels._build.matrix import Matrix, load_matrix, parse_matrix
from aotkernels._build.plan import (
    PlanError,
    check_toolkit,
    make_plan,
    param_layout,
    parse_arch_filter,
    plan_json,
    summary_line,
    write_plan,
)
from conftest import ROOT
from helpers.builds import clean_env

MATRIX_PATH = ROOT / "arch_matrix.toml"
KERNELS_DIR = ROOT / "kernels"
TK = (13, 0)
GENERIC = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load_matrix(MATRIX_PATH)


@pytest.fixture(scope="module")
def real_doc() -> dict[str, Any]:
    with MATRIX_PATH.open("rb") as f:
        return tomllib.load(f)


def matrix_with(real_doc: dict[str, Any], **families: dict[str, Any]) -> Matrix:
    """The real matrix plus extra families (each a copy of activation with changes)."""
    doc = copy.deepcopy(real_doc)
    for name, changes in families.items():
        fam = copy.deepcopy(doc["families"]["activation"])
        fam["entry"] = f"ak_{name}_{{op}}_{{dtype}}"
        fam.update(changes)
        doc["families"][name] = fam
    return parse_matrix(doc)


def names(fp: Any) -> list[str]:
    return [t.name for t in fp.targets]


# --- filters ---------------------------------------------------------------------------------


def test_no_filter_builds_every_family_and_target(matrix: Matrix) -> None:
    plan = make_plan(matrix, TK)
    assert list(plan.families) == list(matrix.families)
    for name, fam in matrix.families.items():
        fp = plan.families[name]
        assert names(fp) == list(fam.targets)
        assert fp.ptx == fam.ptx
        assert fp.skipped == ()
    act = plan.families["activation"]
    assert names(act) == GENERIC
    assert act.ptx == ("compute_75", "compute_120")
    assert plan.archs is None and plan.family_filter is None and plan.toolkit == TK


@pytest.mark.parametrize("archs", ["80;90", "sm_80,sm_90", "8.0;9.0", " 80 , sm_90 ", "SM_80;90"])
def test_arch_filter_spellings(matrix: Matrix, archs: str) -> None:
    plan = make_plan(matrix, TK, archs=archs)
    assert plan.archs == archs
    for fp in plan.families.values():
        if fp.family.variants:  # gemm: its own target list (test_gemm_* below)
            continue
        if fp.family.requires:  # quant (fp8 conversions): sm_89 and later only
            assert names(fp) == ["sm_90"]
            continue
        assert names(fp) == ["sm_80", "sm_90"]
        assert fp.ptx == ()
        skipped = dict(fp.skipped)
        assert set(skipped) == {
            "sm_75",
            "sm_86",
            "sm_89",
            "sm_100",
            "sm_120",
            "compute_75",
            "compute_120",
        }
        assert set(skipped.values()) == {"not in AOTKERNELS_ARCHS"}


def test_arch_filter_single_dotted(matrix: Matrix) -> None:
    plan = make_plan(matrix, TK, archs="8.0")
    before_fp8 = [n for n, f in matrix.families.items() if not f.requires]
    assert list(plan.families) == before_fp8  # quant needs sm_89's fp8 conversions
    assert {n: names(fp) for n, fp in plan.families.items()} == {n: ["sm_80"] for n in before_fp8}


def test_quant_family_targets(matrix: Matrix) -> None:
    """fp8 outputs exist from sm_89 on: one generic cubin per cc there, PTX for later GPUs,
    and the bf16/f16/f32 families' images are untouched by it."""
    q = matrix.families["quant"]
    assert q.targets == ("sm_89", "sm_90", "sm_100", "sm_120")
    assert q.ptx == ("compute_89",)
    plan = make_plan(matrix, TK)
    assert names(plan.families["quant"]) == ["sm_89", "sm_90", "sm_100", "sm_120"]
    assert [e.symbol for e in plan.families["quant"].entries()][:3] == [
        "ak_fp8_rms_norm_f32",
        "ak_fp8_rms_norm_f16",
        "ak_fp8_rms_norm_bf16",
    ]
    assert names(plan.families["norm"]) == GENERIC


def test_arch_filter_ptx_only(matrix: Matrix) -> None:
    plan = make_plan(matrix, TK, archs="compute_75")
    for fp in plan.families.values():
        assert fp.targets == ()
        assert fp.ptx == ("compute_75",)
        assert fp.gencode_flags() == ["-gencode=arch=compute_75,code=compute_75"]


def test_parse_arch_filter_spellings(matrix: Matrix) -> None:
    assert parse_arch_filter("80;90a;compute_75", matrix) == {"sm_80", "sm_90a", "compute_75"}
    assert parse_arch_filter("9.0a,10.0f", matrix) == {"sm_90a", "sm_100f"}
    assert parse_arch_filter("sm_120f 12.0 COMPUTE_120", matrix) == {
        "sm_120f",
        "sm_120",
        "compute_120",
    }
    assert parse_arch_filter("100", matrix) == {"sm_100"}


@pytest.mark.parametrize("bad", ["81", "sm_95", "8.1", "compute_86", "90b", "ampere"])
def test_unknown_arch_is_named(matrix: Matrix, bad: str) -> None:
    with pytest.raises(PlanError, match=re.escape(f"AOTKERNELS_ARCHS: {bad!r} is not a target")):
        make_plan(matrix, TK, archs=f"80;{bad}")


def test_arch_filter_naming_nothing(matrix: Matrix) -> None:
    with pytest.raises(PlanError, match="names no target"):
        parse_arch_filter(" ; , ", matrix)


def test_arch_filter_leaving_nothing_to_build(matrix: Matrix) -> None:
    # sm_100f is a target of the matrix but of no family
    with pytest.raises(PlanError, match=r"nothing to build: AOTKERNELS_ARCHS='100f'"):
        make_plan(matrix, TK, archs="100f")


def test_arch_filter_with_a_family(real_doc: dict[str, Any]) -> None:
    m = matrix_with(real_doc, hopper={"requires": ["wgmma"], "ptx": []})
    plan = make_plan(m, TK, archs="80;90a")
    assert names(plan.families["hopper"]) == ["sm_90a"]
    assert names(plan.families["activation"]) == ["sm_80"]
    assert plan.families["hopper"].gencode_flags() == ["-gencode=arch=compute_90a,code=sm_90a"]
    plan = make_plan(m, TK, archs="80;90")
    assert "hopper" not in plan.families  # its only target is filtered out, no PTX either


def test_family_filter(matrix: Matrix) -> None:
    plan = make_plan(matrix, TK, families="activation")
    assert list(plan.families) == ["activation"]
    assert plan.family_filter == "activation"
    plan = make_plan(matrix, TK, archs="75", families="gated, activation")
    assert list(plan.families) == ["gated", "activation"]
    assert all(names(fp) == ["sm_75"] for fp in plan.families.values())


def test_unknown_family_is_named(matrix: Matrix) -> None:
    msg = r"AOTKERNELS_FAMILIES: unknown family 'no_such_family'"
    with pytest.raises(PlanError, match=msg) as info:
        make_plan(matrix, TK, families="activation;no_such_family")
    assert f"(families: {', '.join(matrix.families)})" in str(info.value)


# --- toolkit ---------------------------------------------------------------------------------


def test_toolkit_too_old_drops_f_targets(real_doc: dict[str, Any]) -> None:
    m = matrix_with(
        real_doc,
        tc={"requires": ["tcgen05"], "ptx": ["compute_100"]},
        blockscaled={"requires": ["block_scaled_mma"], "ptx": []},
    )
    assert m.families["tc"].targets == ("sm_100f",)
    assert m.families["blockscaled"].targets == ("sm_100f", "sm_120f")

    old = make_plan(m, (12, 8))
    tc = old.families["tc"]
    assert tc.targets == ()
    assert tc.ptx == ("compute_100",)
    assert tc.skipped == (("sm_100f", "needs CUDA 12.9"),)
    assert tc.gencode_flags() == ["-gencode=arch=compute_100,code=compute_100"]
    # nothing left of blockscaled: no target, no PTX -> not built at all
    assert "blockscaled" not in old.families
    # families without min_toolkit targets are untouched
    assert names(old.families["activation"]) == GENERIC

    new = make_plan(m, (12, 9))
    assert names(new.families["tc"]) == ["sm_100f"]
    assert new.families["tc"].skipped == ()
    assert names(new.families["blockscaled"]) == ["sm_100f", "sm_120f"]


def test_toolkit_too_old_for_everything(real_doc: dict[str, Any]) -> None:
    m = matrix_with(real_doc, tc={"requires": ["tcgen05"], "ptx": []})
    with pytest.raises(PlanError, match="nothing to build"):
        make_plan(m, (12, 8), families="tc")


def test_check_toolkit() -> None:
    assert check_toolkit("13.0.88") == (13, 0)
    assert check_toolkit("12.9") == (12, 9)
    with pytest.raises(PlanError, match="'thirteen'"):
        check_toolkit("thirteen")


# --- gencode / images ------------------------------------------------------------------------


def test_gencode_flags_exact(matrix: Matrix, real_doc: dict[str, Any]) -> None:
    plan = make_plan(matrix, TK)
    assert plan.families["activation"].gencode_flags() == [
        "-gencode=arch=compute_75,code=sm_75",
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_86,code=sm_86",
        "-gencode=arch=compute_89,code=sm_89",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_100,code=sm_100",
        "-gencode=arch=compute_120,code=sm_120",
        "-gencode=arch=compute_75,code=compute_75",
        "-gencode=arch=compute_120,code=compute_120",
    ]
    m = matrix_with(real_doc, special={"targets": ["sm_90a", "sm_100f", "sm_120a"], "ptx": []})
    assert make_plan(m, TK).families["special"].gencode_flags() == [
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_100f,code=sm_100f",
        "-gencode=arch=compute_120a,code=sm_120a",
    ]


def test_expected_images(real_doc: dict[str, Any]) -> None:
    m = matrix_with(
        real_doc, special={"targets": ["sm_80", "sm_90a", "sm_100f"], "ptx": ["compute_90"]}
    )
    fp = make_plan(m, TK).families["special"]
    assert fp.expected_images() == [
        ("cubin", 80, ""),
        ("cubin", 90, "a"),
        ("cubin", 100, "f"),
        ("ptx", 90, ""),
    ]


def test_entries(matrix: Matrix) -> None:
    fp = make_plan(matrix, TK).families["gated"]
    entries = fp.entries()
    fam = matrix.families["gated"]
    assert len(entries) == len(fam.ops) * len(fam.dtypes)
    assert len({e.symbol for e in entries}) == len(entries)
    e = next(e for e in entries if e.op == "silu_and_mul" and e.dtype == "bf16")
    assert e.symbol == "ak_silu_and_mul_bf16"


# --- parameter struct layout -----------------------------------------------------------------

_CTYPES = {
    "ptr": ctypes.c_void_p,
    "i64": ctypes.c_int64,
    "i32": ctypes.c_int32,
    "f32": ctypes.c_float,
}


def _ctypes_layout(params: list[tuple[str, str]]) -> tuple[int, list[tuple[str, int]]]:
    """The C compiler's answer (x86-64 / aarch64 Linux ABI), through ctypes."""
    cls = type("P", (ctypes.Structure,), {"_fields_": [(n, _CTYPES[t]) for n, t in params]})
    return ctypes.sizeof(cls), [(n, getattr(cls, n).offset) for n, _ in params]


@pytest.mark.parametrize(
    "params",
    [
        [("n", "i32"), ("p", "ptr"), ("a", "f32")],  # 0, pad to 8, 16, tail pad 20 -> 24
        [("a", "f32"), ("b", "i32"), ("p", "ptr")],  # no padding
        [("p", "ptr"), ("a", "f32")],  # tail padding only
        [("a", "i32"), ("b", "f32"), ("c", "i32")],  # all 4-byte: size 12, no tail
        [
            ("out", "ptr"),
            ("x", "ptr"),
            ("rows", "i64"),
            ("n", "i32"),
            ("eps", "f32"),
            ("k", "i32"),
            ("y", "ptr"),
        ],
    ],
)
def test_param_layout_matches_c(params: list[tuple[str, str]]) -> None:
    fmt, size, offsets = param_layout(params)
    c_size, c_offsets = _ctypes_layout(params)
    assert (size, offsets) == (c_size, c_offsets)
    assert struct.calcsize(fmt) == size
    packed = struct.pack(fmt, *[1.5 if t == "f32" else 7 for _, t in params])
    assert len(packed) == size


def test_param_layout_exact() -> None:
    fmt, size, offsets = param_layout([("n", "i32"), ("p", "ptr"), ("a", "f32")])
    assert fmt == "<ixxxxQfxxxx"
    assert size == 24
    assert offsets == [("n", 0), ("p", 8), ("a", 16)]
    packed = struct.pack(fmt, -3, 0xDEADBEEF, 2.0)
    assert packed[0:4] == struct.pack("<i", -3)
    assert packed[8:16] == struct.pack("<Q", 0xDEADBEEF)
    assert packed[16:20] == struct.pack("<f", 2.0)


def test_every_real_family_param_layout_matches_c(matrix: Matrix) -> None:
    for fam in matrix.families.values():
        if any(t == "tmap" for _, t in fam.params):
            continue  # ctypes cannot align to 128 before 3.13; nvcc's static_asserts check it
        _, size, offsets = param_layout(fam.params)
        assert (size, offsets) == _ctypes_layout(list(fam.params)), fam.name


def test_real_family_param_layout(matrix: Matrix) -> None:
    fmt, size, offsets = param_layout(matrix.families["activation"].params)
    assert size == 64 and fmt == "<QQqqqqQq"
    assert [o for _, o in offsets] == [0, 8, 16, 24, 32, 40, 48, 56]


# --- written files ---------------------------------------------------------------------------


def test_write_plan_files(matrix: Matrix, tmp_path: Path) -> None:
    plan = make_plan(matrix, TK, archs="75;90;compute_75")
    write_plan(plan, tmp_path, KERNELS_DIR)
    gen = tmp_path / "generated"
    assert list(plan.families) == list(matrix.families)
    assert sorted(p.name for p in gen.iterdir()) == sorted(
        f"{f}_{k}" for f in plan.families for k in ("params.h", "entries.cu")
    )

    cmake = (tmp_path / "plan.cmake").read_text()
    assert f'set(AK_FAMILIES "{";".join(plan.families)}")' in cmake
    assert (
        'set(AK_activation_GENCODE "-gencode=arch=compute_75,code=sm_75;'
        '-gencode=arch=compute_90,code=sm_90;-gencode=arch=compute_75,code=compute_75")'
    ) in cmake
    assert f'set(AK_gated_SOURCE "{(gen / "gated_entries.cu").as_posix()}")' in cmake
    assert f'set(AK_gated_INCLUDE "{(KERNELS_DIR / "gated").as_posix()}")' in cmake
    assert "skipped sm_80 (not in AOTKERNELS_ARCHS)" in cmake

    data = json.loads((tmp_path / "plan.json").read_text())
    assert data == json.loads(json.dumps(plan_json(plan)))
    assert data["archs"] == "75;90;compute_75" and data["toolkit"] == "13.0"
    act = data["families"]["activation"]
    assert act["targets"] == ["sm_75", "sm_90"] and act["ptx"] == ["compute_75"]
    # nvcc order: per virtual arch in -gencode order, its PTX first, then its cubins
    assert act["images"] == [["ptx", 75, ""], ["cubin", 75, ""], ["cubin", 90, ""]]
    assert act["param_bytes"] == 64 and act["param_format"] == "<QQqqqqQq"
    assert {"symbol": "ak_relu_bf16", "op": "relu", "dtype": "bf16"} in act["entries"]

    entries = (gen / "activation_entries.cu").read_text()
    fam = matrix.families["activation"]
    lines = [ln for ln in entries.splitlines() if ln.startswith("AK_ENTRY(")]
    assert len(lines) == len(fam.ops) * len(fam.dtypes)
    assert "AK_ENTRY(ak_gelu_tanh_bf16, gelu_tanh, __nv_bfloat16)" in lines
    assert '#include "activation.cuh"' in entries
    assert '#include "activation_params.h"' in entries

    header = (gen / "activation_params.h").read_text()
    assert "struct ak_activation_params {" in header
    assert "  void* out;" in header and "  int64_t rows;" in header
    assert 'static_assert(sizeof(ak_activation_params) == 64, "layout drift");' in header
    assert "static_assert(offsetof(ak_activation_params, out_row_stride) == 40" in header


def test_mixed_operand_entries(matrix: Matrix, tmp_path: Path) -> None:
    """op_dtypes "<a>x<b>" (scaled_mm e4m3 x e5m2): entries named by the pair, built only into
    images that hold both dtypes and the variant's features, instantiated through an alias of
    ak_mixed_t (the template's comma would split the entry macro's arguments)."""
    plan = make_plan(matrix, TK, archs="80;89;90a", families="gemm")
    fp = plan.families["gemm"]
    mixed = {e.symbol: e for e in fp.entries() if "x" in e.dtype}
    assert mixed["ak_scaled_mm_fp8_e4m3xfp8_e5m2_mma_128x128"].images == ("sm_89", "sm_90a")
    assert mixed["ak_scaled_mm_fp8_e5m2xfp8_e4m3_wg_64x128_kk"].images == ("sm_90a",)
    assert not any(s.endswith("_kn") for s in mixed)  # 8-bit wgmma: K-major only
    write_plan(plan, tmp_path, KERNELS_DIR)
    src = (tmp_path / "generated" / "gemm_entries.cu").read_text()
    alias = "using ak_dtype_fp8_e4m3xfp8_e5m2 = ak_mixed_t<__nv_fp8_e4m3, __nv_fp8_e5m2>;"
    assert alias in src
    assert (
        "AK_ENTRY_MMA_SYNC(ak_scaled_mm_fp8_e4m3xfp8_e5m2_mma_64x64, scaled_mm, "
        "ak_dtype_fp8_e4m3xfp8_e5m2, ak_gemm_v_mma_64x64)"
    ) in src


def _age(paths: list[Path]) -> None:
    """Push mtimes an hour into the past, so a rewrite is visible whatever the fs granularity."""
    for p in paths:
        st = p.stat()
        os.utime(p, ns=(st.st_atime_ns - 3600 * 10**9, st.st_mtime_ns - 3600 * 10**9))


def test_rewrite_keeps_mtimes_of_unchanged_files(real_doc: dict[str, Any], tmp_path: Path) -> None:
    m = load_matrix(MATRIX_PATH)
    write_plan(make_plan(m, TK), tmp_path, KERNELS_DIR)
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert len(files) == 2 + 2 * len(m.families)
    _age(files)
    before = {p: p.stat().st_mtime_ns for p in files}

    write_plan(make_plan(load_matrix(MATRIX_PATH), TK), tmp_path, KERNELS_DIR)
    assert {p: p.stat().st_mtime_ns for p in files} == before  # nothing rewritten

    # touch one family (gated gets one op fewer): only its generated files change
    doc = copy.deepcopy(real_doc)
    doc["families"]["gated"]["ops"] = doc["families"]["gated"]["ops"][:-1]
    write_plan(make_plan(parse_matrix(doc), TK), tmp_path, KERNELS_DIR)
    after = {p: p.stat().st_mtime_ns for p in files}
    gen = tmp_path / "generated"
    changed = {p.relative_to(tmp_path).as_posix() for p in files if after[p] != before[p]}
    assert changed == {"generated/gated_entries.cu", "plan.json", "plan.cmake"}
    assert after[gen / "activation_entries.cu"] == before[gen / "activation_entries.cu"]
    assert after[gen / "activation_params.h"] == before[gen / "activation_params.h"]
    assert after[gen / "gated_params.h"] == before[gen / "gated_params.h"]


# --- tools/build_plan.py ---------------------------------------------------------------------


def _build_plan_tool(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = clean_env(**env)
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "build_plan.py"),
            "--matrix",
            str(MATRIX_PATH),
            "--toolkit",
            "13.0.88",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
        check=False,
    )


def test_build_plan_tool_reads_environment(tmp_path: Path) -> None:
    r = _build_plan_tool(tmp_path, AOTKERNELS_ARCHS="sm_86", AOTKERNELS_FAMILIES="gated")
    assert r.returncode == 0, r.stderr
    assert "aotkernels plan: gated:" in r.stdout and "activation" not in r.stdout
    data = json.loads((tmp_path / "plan.json").read_text())
    assert list(data["families"]) == ["gated"]
    assert data["families"]["gated"]["targets"] == ["sm_86"]
    assert data["archs"] == "sm_86" and data["families_filter"] == "gated"


def test_build_plan_tool_fails_on_bad_setting(tmp_path: Path) -> None:
    r = _build_plan_tool(tmp_path, AOTKERNELS_ARCHS="80;sm_77")
    assert r.returncode == 1
    assert "aotkernels build plan: error: AOTKERNELS_ARCHS: 'sm_77'" in r.stderr
    assert not (tmp_path / "plan.json").exists()


# --- families with variants: per-image entries, guards, config structs, TMA parameters ------


def test_gemm_entries_are_placed_by_target_features(matrix: Matrix) -> None:
    fp = make_plan(matrix, (13, 0)).families["gemm"]
    entries = {e.symbol: e for e in fp.entries()}
    assert entries["ak_matmul_bf16_wg_128x256_kn"].images == ("sm_90a",)
    assert entries["ak_matmul_bf16_tc_128x256_kn"].images == ("sm_100a",)
    # bf16 mma.sync needs Ampere; fp8 needs Ada: neither is in the sm_75 image.
    assert "sm_75" not in entries["ak_matmul_bf16_mma_128x128"].images
    assert entries["ak_matmul_f16_mma_64x64"].images[:2] == ("sm_75", "sm_80")
    fp8 = entries["ak_scaled_mm_fp8_e4m3_mma_64x64"].images
    assert fp8 == ("sm_89", "sm_90a", "sm_100a", "sm_120a")
    assert "compute_80" in entries["ak_scaled_mm_int8_mma_64x64"].images


def test_gemm_entries_source_guards_each_entry(matrix: Matrix, tmp_path: Path) -> None:
    plan = make_plan(matrix, (13, 0), families="gemm")
    write_plan(plan, tmp_path, ROOT / "kernels")
    src = (tmp_path / "generated" / "gemm_entries.cu").read_text()
    wg = (
        "#if (__CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL))\n"
        "AK_ENTRY_WGMMA(ak_matmul_bf16_wg_128x256_kn, matmul, __nv_bfloat16, "
        "ak_gemm_v_wg_128x256_kn)\n#endif"
    )
    assert wg in src
    # Clustered variants instantiate through the path's cluster macro.
    assert "AK_ENTRY_WGMMA_CLUSTER(ak_matmul_bf16_wg_128x256c2_kk, matmul, __nv_bfloat16, " in src
    # An entry every image holds is not guarded.
    unguarded = "AK_ENTRY_MMA_SYNC(ak_matmul_f16_mma_64x64, matmul, __half, ak_gemm_v_mma_64x64)"
    assert f"\n{unguarded}\n" in src
    header = (tmp_path / "generated" / "gemm_params.h").read_text()
    # CUDA 12's cuda.h aligns CUtensorMap to 64 bytes, 13's to 128: the struct says 128.
    assert "#include <cuda.h>" in header and "  alignas(128) CUtensorMap tmap_a;" in header
    assert "struct ak_gemm_v_wg_128x256_mn {" in header
    assert "static constexpr bool a_mmajor = true;" in header
    plan_json = json.loads((tmp_path / "plan.json").read_text())["families"]["gemm"]
    assert plan_json["variants"]["wg_64x128"]["path"] == "wgmma"
    e = next(e for e in plan_json["entries"] if e["symbol"] == "ak_matmul_f16_wg_64x128_kk")
    assert e == {"symbol": "ak_matmul_f16_wg_64x128_kk", "op": "matmul", "dtype": "f16",
                 "variant": "wg_64x128", "layout": "kk", "images": ["sm_90a"]}  # fmt: skip


def test_image_conditions_need_no_macro_newer_than_cuda_12_0() -> None:
    """`a` passes are told apart by __CUDA_ARCH_FEAT_SM<cc>_ALL (nvcc >= 12.0), not by
    __CUDA_ARCH_SPECIFIC__, which nvcc 12.4 does not define (the guards then dropped every
    wgmma and fp8 entry of the sm_90a image and let the generic ones in)."""
    from aotkernels._build.plan import _image_condition

    a = _image_condition("sm_90a")
    assert a == "(__CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL))"
    generic = _image_condition("sm_90")
    assert "!defined(__CUDA_ARCH_FEAT_SM90_ALL)" in generic
    assert "!defined(__CUDA_ARCH_FAMILY_SPECIFIC__)" in generic
    assert _image_condition("compute_90") == generic
    f = _image_condition("sm_100f")
    assert "defined(__CUDA_ARCH_FAMILY_SPECIFIC__)" in f
    assert "!defined(__CUDA_ARCH_FEAT_SM100_ALL)" in f
    assert all("__CUDA_ARCH_SPECIFIC__" not in c for c in (a, generic, f))


def test_cuda_12_4_plan_leaves_out_blackwell_and_says_so(matrix: Matrix) -> None:
    """Targets and PTX newer than the toolkit are skipped with the reason, never silently."""
    plan = make_plan(matrix, (12, 4))
    act = plan.families["activation"]
    assert [t.name for t in act.targets] == ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90"]
    assert act.ptx == ("compute_75",)
    assert set(act.skipped) == {
        ("sm_100", "needs CUDA 12.8"),
        ("sm_120", "needs CUDA 12.8"),
        ("compute_120", "needs CUDA 12.8"),
    }
    assert "skipped sm_100 (needs CUDA 12.8), sm_120 (needs CUDA 12.8), compute_120 (needs " in (
        summary_line(act)
    )
    gemm = plan.families["gemm"]
    assert "sm_90a" in [t.name for t in gemm.targets] and gemm.ptx == ("compute_80",)
    assert set(gemm.skipped) == {("sm_100a", "needs CUDA 12.8"), ("sm_120a", "needs CUDA 12.8")}
    full = make_plan(matrix, (12, 8)).families["activation"]
    assert full.ptx == ("compute_75", "compute_120") and full.skipped == ()


def test_arch_filter_drops_entries_without_an_image(matrix: Matrix) -> None:
    fp = make_plan(matrix, (13, 0), archs="80").families["gemm"]
    symbols = {e.symbol for e in fp.entries()}
    assert "ak_matmul_bf16_mma_128x128" in symbols
    assert not any("fp8" in s or "_wg_" in s or "_tc_" in s for s in symbols)


def test_tmap_param_layout() -> None:
    fmt, size, offsets = param_layout([("p", "ptr"), ("t", "tmap"), ("n", "i32")])
    assert dict(offsets) == {"p": 0, "t": 128, "n": 256}
    assert size == 384 and struct.calcsize(fmt) == 384


def test_constants_reach_the_header_and_the_plan(matrix: Matrix, tmp_path: Path) -> None:
    """The matrix's constants are the one source of the kernels' and the op layer's values:
    each family's generated header spells them in C++, plan.json (hence the manifest) carries
    them as the matrix declares them."""
    plan = make_plan(matrix, TK, archs="90a;89", families="gemm;quant")
    write_plan(plan, tmp_path, KERNELS_DIR)
    gemm = (tmp_path / "generated" / "gemm_params.h").read_text()
    assert "namespace ak::gemm {" in gemm and "}  // namespace ak::gemm" in gemm
    flags = "kAMMajor = 1, kBKMajor = 2, kBias = 4, kSplitReduce = 8, kTmaStore = 16, "
    flags += "kFastAccum = 32"
    assert f"enum Flags : int {{ {flags} }};" in gemm
    assert (
        "namespace ak::norms {\nenum Flags : int { kHasWeight = 1, kHasBias = 2, kGemma = 4 };"
        in gemm
    )
    assert "enum OutDtype : int { kOutF32 = 0, kOutF16 = 1, kOutBf16 = 2, kOutS32 = 3 };" in gemm
    assert "constexpr int kScaleBlockK = 128;" in gemm
    # Constants several families share go into every family's header.
    assert "namespace ak::rowwise {\nconstexpr int kMaxThreads = 1024;\n}" in gemm
    quant = (tmp_path / "generated" / "quant_params.h").read_text()
    assert "constexpr float kMinAmax = 1e-10f;" in quant
    assert "constexpr float kFp8MaxE5m2 = 57344.0f;" in quant
    assert "enum Mode : int { kStatic = 0, kPerRow = 1," in quant

    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["constants"] == {
        "rowwise": {"max_threads": 1024},
        "norms": {"flags": {"has_weight": 1, "has_bias": 2, "gemma": 4}},
    }
    q = data["families"]["quant"]
    assert q["constants"]["mode"]["final"] == 5 and q["constants"]["min_amax"] == 1e-10
    assert q["constants"] == dict(matrix.families["quant"].constants)
    g = data["families"]["gemm"]
    assert g["dtypes"] == ["f16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8"]
    assert g["op_dtypes"]["matmul"] == ["f16", "bf16"]
    assert g["op_dtypes"]["scaled_mm"][-1] == "fp8_e5m2xfp8_e4m3"
