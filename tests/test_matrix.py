"""arch_matrix.toml: the real matrix validates, target resolution follows the documented rules,
and every kind of inconsistency is rejected with a message naming the offending entry."""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from aotkernels._build import matrix as matrix_module
from aotkernels._build.matrix import MatrixError, load_matrix, parse_matrix, parse_target_name
from conftest import ROOT

MATRIX_PATH = ROOT / "arch_matrix.toml"
KERNELS_DIR = ROOT / "kernels"
GENERIC = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")


@pytest.fixture(scope="module")
def real_doc() -> dict[str, Any]:
    with MATRIX_PATH.open("rb") as f:
        return tomllib.load(f)


@pytest.fixture
def doc(real_doc: dict[str, Any]) -> dict[str, Any]:
    """A private deep copy of the real TOML document, free to mutate."""
    return copy.deepcopy(real_doc)


def with_family(doc: dict[str, Any], name: str, **changes: Any) -> dict[str, Any]:
    """Add family ``name``: a copy of activation with its own entry pattern, then ``changes``."""
    fam = copy.deepcopy(doc["families"]["activation"])
    fam["entry"] = f"ak_{name}_{{op}}_{{dtype}}"
    for key, value in changes.items():
        if value is None:
            fam.pop(key, None)
        else:
            fam[key] = value
    doc["families"][name] = fam
    return doc


def reject(doc: dict[str, Any], *fragments: str, **kwargs: Any) -> str:
    """parse_matrix(doc) must fail; every fragment must appear in the message."""
    with pytest.raises(MatrixError, match=re.escape(fragments[0])) as info:
        parse_matrix(doc, **kwargs)
    msg = str(info.value)
    for frag in fragments[1:]:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    return msg


# --- the real matrix ---------------------------------------------------------------------------


def test_real_matrix_loads_and_checks_sources() -> None:
    m = load_matrix(MATRIX_PATH)  # also checks every family's sources exist in kernels/
    assert m.source == str(MATRIX_PATH)
    assert {"activation", "gated"} <= set(m.families)
    assert set(GENERIC) <= set(m.targets)
    assert {"sm_90a", "sm_100a", "sm_100f", "sm_120a", "sm_120f"} <= set(m.targets)
    for fam in m.families.values():
        for src in fam.sources:
            assert (KERNELS_DIR / fam.name / src).is_file()


def test_real_targets_cc_variant_and_min_toolkit() -> None:
    m = load_matrix(MATRIX_PATH, check_sources=False)
    t = m.targets
    assert t["sm_75"].cc == (7, 5) and t["sm_75"].variant == "" and t["sm_75"].sm == 75
    assert t["sm_90a"].cc == (9, 0) and t["sm_90a"].variant == "a"
    assert t["sm_100f"].cc == (10, 0) and t["sm_100f"].variant == "f" and t["sm_100f"].sm == 100
    assert t["sm_120"].cc_str == "12.0" and t["sm_120"].sm == 120
    assert t["sm_100f"].min_toolkit == (12, 9)
    assert t["sm_120f"].min_toolkit == (12, 9)
    assert t["sm_80"].min_toolkit == (0, 0)
    for name in ("sm_100", "sm_100a", "sm_120", "sm_120a"):  # Blackwell: nvcc 12.8
        assert t[name].min_toolkit == (12, 8), name
    assert "wgmma" in t["sm_90a"].features and "wgmma" not in t["sm_90"].features
    assert "tcgen05" in t["sm_100f"].features and "tcgen05" not in t["sm_120a"].features


def test_real_dtypes() -> None:
    m = load_matrix(MATRIX_PATH, check_sources=False)
    assert m.dtypes["f32"].targets == frozenset(m.targets)  # targets = "all"
    assert m.dtypes["bf16"].ctype == "__nv_bfloat16" and m.dtypes["bf16"].bytes == 2
    fp8 = m.dtypes["fp8_e4m3"].targets
    assert "sm_89" in fp8 and "sm_120f" in fp8
    assert "sm_80" not in fp8 and "sm_75" not in fp8 and "sm_86" not in fp8


def test_families_without_targets_or_requires_get_every_generic_target(
    real_doc: dict[str, Any],
) -> None:
    m = parse_matrix(real_doc)
    generic_in_matrix = tuple(n for n, t in m.targets.items() if t.variant == "")
    assert generic_in_matrix == GENERIC
    for name in ("activation", "gated"):
        spec = real_doc["families"][name]
        assert "targets" not in spec and "requires" not in spec
        fam = m.families[name]
        assert fam.targets == GENERIC, name
        assert fam.requires == ()
        assert fam.ptx == ("compute_75", "compute_120")


def test_symbols_follow_entry_pattern(real_doc: dict[str, Any]) -> None:
    m = parse_matrix(real_doc)
    fam = m.families["activation"]
    assert fam.entry == "ak_{op}_{dtype}"
    assert fam.symbol("silu", "bf16") == "ak_silu_bf16"
    assert m.families["gated"].symbol("silu_and_mul", "f16") == "ak_silu_and_mul_f16"


@pytest.mark.parametrize(
    ("requires", "expected"),
    [
        (["wgmma"], ("sm_90a",)),
        (["wgmma", "setmaxnreg"], ("sm_90a",)),
        # sm_100a and sm_100f both qualify for 10.0: f is the more portable one.
        (["tcgen05"], ("sm_100f",)),
        (["block_scaled_mma"], ("sm_100f", "sm_120f")),
        # generic targets qualify: no a/f variant is taken
        (["tma", "clusters"], ("sm_90", "sm_100", "sm_120")),
        (["fp8_cvt"], ("sm_89", "sm_90", "sm_100", "sm_120")),
        (["cp_async"], ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")),
        (["ldmatrix"], GENERIC),
    ],
)
def test_requires_resolves_most_portable_target_per_cc(
    doc: dict[str, Any], requires: list[str], expected: tuple[str, ...]
) -> None:
    with_family(doc, "special", requires=requires, dtypes=["f32"])
    fam = parse_matrix(doc).families["special"]
    assert fam.targets == expected
    assert fam.requires == tuple(requires)


def test_requires_falls_back_to_a_when_no_f_target(doc: dict[str, Any]) -> None:
    del doc["targets"]["sm_100f"]
    for dt in doc["dtypes"].values():
        if isinstance(dt["targets"], list) and "sm_100f" in dt["targets"]:
            dt["targets"].remove("sm_100f")
    with_family(doc, "tc", requires=["tcgen05"], dtypes=["f32"])
    assert parse_matrix(doc).families["tc"].targets == ("sm_100a",)


def test_explicit_targets_are_kept_as_given(doc: dict[str, Any]) -> None:
    with_family(doc, "pick", targets=["sm_80", "sm_90a", "sm_120f"])
    fam = parse_matrix(doc).families["pick"]
    assert set(fam.targets) == {"sm_80", "sm_90a", "sm_120f"}
    assert fam.requires == ()


def test_fp8_family_on_fp8_targets_is_valid(doc: dict[str, Any]) -> None:
    with_family(doc, "fp8", requires=["fp8_cvt"], dtypes=["fp8_e4m3", "fp8_e5m2", "bf16"])
    assert parse_matrix(doc).families["fp8"].dtypes == ("fp8_e4m3", "fp8_e5m2", "bf16")


def test_to_json_shape(real_doc: dict[str, Any]) -> None:
    data = parse_matrix(real_doc).to_json()
    names = [t["name"] for t in data["targets"]]
    assert names[0] == "sm_75" and "sm_100f" in names
    sm90a = next(t for t in data["targets"] if t["name"] == "sm_90a")
    assert sm90a["cc"] == "9.0" and sm90a["variant"] == "a" and "wgmma" in sm90a["features"]
    act = data["families"]["activation"]
    assert act["ops"][:5] == ["relu", "gelu", "gelu_tanh", "silu", "sigmoid"]
    assert act["ops"][5:] == [f"{op}_backward" for op in act["ops"][:5]]
    assert act["dtypes"] == ["f32", "f16", "bf16"]
    assert act["targets"] == list(GENERIC)
    assert act["ptx"] == ["compute_75", "compute_120"]


def test_parse_target_name() -> None:
    assert parse_target_name("sm_75") == ((7, 5), "")
    assert parse_target_name("sm_90a") == ((9, 0), "a")
    assert parse_target_name("sm_100f") == ((10, 0), "f")
    assert parse_target_name("sm_121") == ((12, 1), "")
    for bad in ("sm_9", "compute_90", "sm_90x", "SM_90", "sm90"):
        with pytest.raises(MatrixError, match=re.escape(repr(bad))):
            parse_target_name(bad)


# --- broken matrices ---------------------------------------------------------------------------


def test_error_names_the_source(doc: dict[str, Any]) -> None:
    doc["families"]["activation"]["dtypes"] = ["f64"]
    with pytest.raises(MatrixError, match=r"^my/matrix\.toml: families\.activation\.dtypes"):
        parse_matrix(doc, source="my/matrix.toml")


def test_wrong_schema(doc: dict[str, Any]) -> None:
    doc["schema"] = 2
    reject(doc, "schema: expected 1, got 2")
    del doc["schema"]
    reject(doc, "schema: expected 1, got None")


def test_missing_tables(doc: dict[str, Any]) -> None:
    for table in ("features", "targets", "dtypes", "families"):
        broken = copy.deepcopy(doc)
        del broken[table]
        reject(broken, f"missing or empty table [{table}]")


def test_unknown_target_in_family(doc: dict[str, Any]) -> None:
    doc["families"]["gated"]["targets"] = ["sm_80", "sm_91"]
    reject(doc, "families.gated.targets: unknown target 'sm_91'")


def test_empty_target_list_in_family(doc: dict[str, Any]) -> None:
    doc["families"]["gated"]["targets"] = []
    reject(doc, "families.gated.targets: empty")


def test_targets_and_requires_together(doc: dict[str, Any]) -> None:
    doc["families"]["gated"]["targets"] = ["sm_90a"]
    doc["families"]["gated"]["requires"] = ["wgmma"]
    reject(doc, "families.gated: give either 'targets' or 'requires', not both")


def test_requires_no_target_provides(doc: dict[str, Any]) -> None:
    with_family(doc, "impossible", requires=["wgmma", "tcgen05"])
    reject(doc, "families.impossible.requires: no target provides all of", "wgmma", "tcgen05")


def test_unknown_dtype_in_family(doc: dict[str, Any]) -> None:
    doc["families"]["activation"]["dtypes"] = ["f32", "f64"]
    reject(doc, "families.activation.dtypes: unknown dtype 'f64'", "known: f32, f16, bf16")


def test_dtype_on_target_that_lacks_it(doc: dict[str, Any]) -> None:
    with_family(doc, "quant", targets=["sm_80"], dtypes=["f16", "fp8_e4m3"])
    reject(doc, "families.quant: dtype 'fp8_e4m3' is not available on target 'sm_80'")


def test_dtype_on_generic_default_targets_that_lack_it(doc: dict[str, Any]) -> None:
    # no targets/requires: every generic target, sm_75 first, which has no fp8
    doc["families"]["activation"]["dtypes"] = ["f32", "fp8_e5m2"]
    reject(doc, "families.activation: dtype 'fp8_e5m2' is not available on target 'sm_75'")


def test_unknown_target_in_dtype(doc: dict[str, Any]) -> None:
    doc["dtypes"]["fp8_e4m3"]["targets"].append("sm_91")
    reject(doc, "dtypes.fp8_e4m3.targets: unknown target 'sm_91'")


def test_bad_dtype_bytes(doc: dict[str, Any]) -> None:
    doc["dtypes"]["int8"]["bytes"] = 3
    reject(doc, "dtypes.int8.bytes: expected 1, 2, 4 or 8, got 3")


def test_dtype_missing_key(doc: dict[str, Any]) -> None:
    del doc["dtypes"]["f16"]["ctype"]
    reject(doc, "dtypes.f16: missing 'ctype'")


def test_family_without_sources(doc: dict[str, Any]) -> None:
    del doc["families"]["gated"]["sources"]
    reject(doc, "families.gated.sources: a family needs at least one source file")
    doc["families"]["gated"]["sources"] = []
    reject(doc, "families.gated.sources: a family needs at least one source file")


def test_sources_not_a_list_of_strings(doc: dict[str, Any]) -> None:
    doc["families"]["gated"]["sources"] = "gated.cuh"
    reject(doc, "families.gated.sources: expected a list of strings, got 'gated.cuh'")


def test_missing_source_file(doc: dict[str, Any], tmp_path: Path) -> None:
    parse_matrix(doc, kernels_dir=KERNELS_DIR)  # the real sources are there
    doc["families"]["gated"]["sources"] = ["gated.cuh", "gated_extra.cuh"]
    reject(
        doc,
        "families.gated.sources: 'gated_extra.cuh' not found in kernels/gated/",
        kernels_dir=KERNELS_DIR,
    )
    parse_matrix(doc)  # sources are only checked when kernels_dir is given
    reject(doc, "families.activation.sources: 'activation.cuh' not found", kernels_dir=tmp_path)


def test_unknown_feature_in_target(doc: dict[str, Any]) -> None:
    doc["targets"]["sm_86"]["features"].append("warp_magic")
    reject(doc, "targets.sm_86.features: unknown feature 'warp_magic'")


def test_unknown_feature_in_requires(doc: dict[str, Any]) -> None:
    with_family(doc, "magic", requires=["cp_async", "warp_magic"])
    reject(doc, "families.magic.requires: unknown feature 'warp_magic'")


@pytest.mark.parametrize("name", ["sm_9x", "compute_90", "sm_90b", "sm90", "sm_8"])
def test_bad_target_name(doc: dict[str, Any], name: str) -> None:
    doc["targets"][name] = {"cc": "9.0", "features": []}
    reject(doc, f"targets.{name}: target name must look like", repr(name))


def test_cc_mismatch_with_name(doc: dict[str, Any]) -> None:
    doc["targets"]["sm_86"]["cc"] = "8.0"
    reject(doc, "targets.sm_86.cc: expected 8.6 to match the name, got 8.0")


def test_target_without_cc(doc: dict[str, Any]) -> None:
    del doc["targets"]["sm_89"]["cc"]
    reject(doc, "targets.sm_89: missing 'cc'")


def test_bad_min_toolkit(doc: dict[str, Any]) -> None:
    doc["targets"]["sm_100f"]["min_toolkit"] = "twelve"
    reject(doc, "targets.sm_100f.min_toolkit: expected a version like '12.9', got 'twelve'")


def test_duplicate_ops(doc: dict[str, Any]) -> None:
    doc["families"]["activation"]["ops"] = ["relu", "silu", "relu"]
    reject(doc, "families.activation.ops: duplicate op")


def test_bad_op_name(doc: dict[str, Any]) -> None:
    doc["families"]["activation"]["ops"] = ["relu", "Silu"]
    reject(doc, "families.activation.ops: op names are lower-case identifiers, got 'Silu'")


def test_bad_family_name(doc: dict[str, Any]) -> None:
    doc["families"]["Bad-Name"] = doc["families"]["gated"]
    reject(doc, "families.Bad-Name: family names are lower-case identifiers")


def test_no_ops_or_dtypes(doc: dict[str, Any]) -> None:
    broken = copy.deepcopy(doc)
    broken["families"]["gated"]["ops"] = []
    reject(broken, "families.gated.ops: a family needs at least one op")
    doc["families"]["gated"]["dtypes"] = []
    reject(doc, "families.gated.dtypes: a family needs at least one dtype")


@pytest.mark.parametrize(
    "param",
    [["out", "double"], ["out"], ["out", "ptr", "extra"], ["Out", "ptr"], "out", ["out", 8]],
)
def test_bad_params_type(doc: dict[str, Any], param: Any) -> None:
    doc["families"]["gated"]["params"][0] = param
    types = "('ptr', 'i64', 'i32', 'f32', 'tmap')"
    reject(doc, f"families.gated.params: expected [name, one of {types}]")


def test_params_missing_or_duplicate(doc: dict[str, Any]) -> None:
    broken = copy.deepcopy(doc)
    del broken["families"]["gated"]["params"]
    reject(broken, "families.gated.params: expected a list of [name, type] pairs")
    doc["families"]["gated"]["params"].append(["x", "i32"])
    reject(doc, "families.gated.params: duplicate parameter name")


@pytest.mark.parametrize("entry", ["ak_{dtype}", "ak_gated_{op}", "ak_fixed"])
def test_entry_pattern_needs_op_and_dtype(doc: dict[str, Any], entry: str) -> None:
    doc["families"]["gated"]["entry"] = entry
    reject(doc, "families.gated.entry: must contain {op} and {dtype}", repr(entry))


def test_duplicate_entry_symbols_across_families(doc: dict[str, Any]) -> None:
    doc["families"]["activation2"] = copy.deepcopy(doc["families"]["activation"])
    reject(
        doc,
        "families.activation2: entry point 'ak_relu_f32' also made by families.activation",
    )


def test_duplicate_entry_symbols_through_patterns(doc: dict[str, Any]) -> None:
    # gated's silu_and_mul/f32 and a family with op "silu" and entry "ak_{op}_and_mul_{dtype}"
    with_family(doc, "clash", ops=["silu"], entry="ak_{op}_and_mul_{dtype}")
    reject(doc, "families.clash: entry point 'ak_silu_and_mul_f32' also made by families.gated")


def test_bad_ptx_name(doc: dict[str, Any]) -> None:
    doc["families"]["gated"]["ptx"] = ["compute_75", "sm_120"]
    reject(
        doc, "families.gated.ptx: PTX target must look like compute_<major><minor>, got 'sm_120'"
    )


def test_load_matrix_rejects_invalid_toml(tmp_path: Path) -> None:
    bad = tmp_path / "arch_matrix.toml"
    bad.write_text("schema = 1\n[targets.sm_80\n")
    with pytest.raises(MatrixError, match=re.escape(f"{bad}: not valid TOML")):
        load_matrix(bad)


def test_load_matrix_checks_sources_next_to_the_file(tmp_path: Path) -> None:
    copy_path = tmp_path / "arch_matrix.toml"
    copy_path.write_bytes(MATRIX_PATH.read_bytes())
    with pytest.raises(MatrixError, match=r"families\.activation\.sources: 'activation\.cuh'"):
        load_matrix(copy_path)  # no kernels/ next to the copy
    assert load_matrix(copy_path, check_sources=False).families.keys() == (
        load_matrix(MATRIX_PATH).families.keys()
    )


# --- families with variants (gemm) ---------------------------------------------------------


def test_gemm_entries_follow_op_dtypes_variants_and_layouts(doc: dict[str, Any]) -> None:
    m = parse_matrix(doc)
    fam = m.families["gemm"]
    specs = fam.entry_specs(m.dtypes)
    names = {s.symbol for s in specs}
    assert "ak_matmul_bf16_mma_128x128" in names  # layouts "any": no suffix
    assert "ak_matmul_bf16_wg_128x256_kn" in names and "ak_matmul_bf16_wg_128x256_mn" in names
    assert "ak_scaled_mm_fp8_e4m3_wg_128x256_kk" in names
    assert "ak_scaled_mm_fp8_e4m3_wg_128x256_kn" not in names  # byte_layouts: K-major only
    assert not any(s.op == "matmul" and s.dtype == "int8" for s in specs)  # op_dtypes
    wg = next(s for s in specs if s.symbol == "ak_scaled_mm_fp8_e4m3_wg_64x128_kk")
    assert wg.requires == {"wgmma", "tma", "mma_sync_fp8"}  # variant + dtype_requires
    assert wg.config("gemm") == "ak_gemm_v_wg_64x128_kk"


def test_mixed_operand_dtypes(doc: dict[str, Any]) -> None:
    """op_dtypes may name "<a>x<b>" pairs of the family's dtypes of one size: entries take the
    pair's name and the features both dtypes require."""
    m = parse_matrix(doc)
    specs = m.families["gemm"].entry_specs(m.dtypes)
    mixed = next(s for s in specs if s.symbol == "ak_scaled_mm_fp8_e5m2xfp8_e4m3_mma_64x64")
    assert mixed.dtype == "fp8_e5m2xfp8_e4m3" and mixed.requires == {"mma_sync_fp8"}
    for bad in ("f16xfp8_e4m3", "fp8_e4m3xfp8_e4m3", "fp8_e4m3xf64"):
        broken = copy.deepcopy(doc)
        broken["families"]["gemm"]["op_dtypes"]["scaled_mm"] = ["int8", bad]
        reject(broken, f"families.gemm.op_dtypes.scaled_mm: unknown value {bad!r}")


def test_variant_constants_and_bad_variants(doc: dict[str, Any]) -> None:
    v = parse_matrix(doc).families["gemm"].variants[0]
    assert v.constant("bm") > 0 and v.path == "mma_sync"
    broken = copy.deepcopy(doc)
    broken["families"]["gemm"]["variants"]["mma_64x64"]["bm"] = "64"
    reject(broken, "families.gemm.variants.mma_64x64.bm: expected an integer constant")
    broken = copy.deepcopy(doc)
    broken["families"]["gemm"]["variants"]["mma_64x64"]["layouts"] = ["km"]
    reject(broken, "families.gemm.variants.mma_64x64.layouts: expected one of")
    broken = copy.deepcopy(doc)
    broken["families"]["gemm"]["variants"]["mma_64x64"]["requires"] = ["warp_drive"]
    reject(broken, "families.gemm.variants.mma_64x64.requires: unknown feature 'warp_drive'")
    broken = copy.deepcopy(doc)
    broken["families"]["gemm"]["op_dtypes"]["matmul"] = ["f64"]
    reject(broken, "families.gemm.op_dtypes.matmul: unknown value 'f64'")
    doc["families"]["gemm"]["dtype_requires"]["int4"] = []
    reject(doc, "families.gemm.dtype_requires: unknown key 'int4'")


def test_variant_family_needs_each_dtype_somewhere(doc: dict[str, Any]) -> None:
    # fp8 on sm_75 is fine for a family with variants (entries are filtered per target), but a
    # dtype no target of the family has is still an error.
    doc["families"]["gemm"]["targets"] = ["sm_75", "sm_80"]
    reject(doc, "families.gemm: dtype 'fp8_e4m3' is not available on target 'sm_75'")


# --- constants ----------------------------------------------------------------------------------


def test_real_constants(real_doc: dict[str, Any]) -> None:
    m = parse_matrix(real_doc)
    assert m.shared == {
        "rowwise": {"max_threads": 1024},
        "norms": {"flags": {"has_weight": 1, "has_bias": 2, "gemma": 4}},
    }
    assert "flags" not in m.families["norm"].constants  # the shared [constants.norms] bits
    assert m.families["quant"].constants["e5m2"] == 8
    assert m.families["quant"].constants["fp8_max_e4m3"] == 448.0
    assert m.families["softmax"].constants == {"backward_max_n": 4}
    assert m.families["activation"].constants == {
        "max_threads": 256,
        "unroll": 4,
        "unroll_backward": 2,
    }
    assert m.to_json()["families"]["rope"]["constants"]["threads"] == 256


def test_cpp_names() -> None:
    cpp_name, cpp_type = matrix_module.cpp_name, matrix_module.cpp_type
    assert cpp_name("has_weight") == "kHasWeight" and cpp_name("e5m2") == "kE5m2"
    assert cpp_name("a_m_major") == "kAMMajor" and cpp_type("scale_mode") == "ScaleMode"


@pytest.mark.parametrize(
    ("constants", "message"),
    [
        ([1], "families.norm.constants: expected a table, got [1]"),
        ({"Flags": {"a": 1}}, "families.norm.constants.Flags: constant names are lower-case"),
        ({"unroll": "4"}, "families.norm.constants.unroll: expected a number or a table"),
        ({"unroll": True}, "families.norm.constants.unroll: expected a number or a table"),
        ({"mode": {}}, "families.norm.constants.mode: expected a number or a table"),
        ({"mode": {"a": 1.5}}, "families.norm.constants.mode.a: expected an integer, got 1.5"),
        ({"mode": {"A": 1}}, "families.norm.constants.mode: member names are lower-case"),
        ({"mode": {"a": 0, "b": 0}}, "families.norm.constants.mode: two members share a value"),
        ({"flags": {"a": 1, "b": 3}}, "families.norm.constants.flags.b: a flag is a power of two"),
        ({"flags": {"a": 0}}, "families.norm.constants.flags.a: a flag is a power of two"),
        (
            {"flags": {"bias": 1}, "mode": {"bias": 0}},
            "families.norm.constants: flags.bias and mode.bias are both kBias in C++",
        ),
        (
            {"bias": 4, "flags": {"bias": 1}},
            "families.norm.constants: bias and flags.bias are both kBias in C++",
        ),
    ],
)
def test_bad_constants(doc: dict[str, Any], constants: Any, message: str) -> None:
    doc["families"]["norm"]["constants"] = constants
    reject(doc, message)


def test_bad_shared_constants(doc: dict[str, Any]) -> None:
    doc["constants"] = {"norm": {"x": 1}}
    reject(doc, "constants.norm: expected a lower-case namespace that is no family's name")
    doc["constants"] = {"rowwise": {"max_threads": [1]}}
    reject(doc, "constants.rowwise.max_threads: expected a number or a table")
    doc["constants"] = [1]
    reject(doc, "constants: expected a table of namespaces, got [1]")
