"""Image choice for simulated devices, against the real installed manifest and small synthetic
ones: exact `a` cubin -> `f` cubin -> same-major generic cubin -> PTX the driver can JIT ->
DriverTooOldError / NoKernelImageError (rules in aotkernels/select.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aotkernels import AotKernelsError, DriverTooOldError, NoKernelImageError
from aotkernels._build.matrix import load_matrix, parse_target_name
from aotkernels.manifest import load_manifest
from aotkernels.select import choose_image, driver_for_ptx_isa, driver_ptx_isa, driver_too_old
from helpers import variant as build_variant

DRIVER_13_0 = (13, 0)


@pytest.fixture(scope="module")
def manifest(installed_kernels: Path) -> dict[str, Any]:
    return load_manifest(installed_kernels)


@pytest.fixture(scope="module")
def known_targets(manifest: dict[str, Any]) -> dict[str, str]:
    return dict(manifest["targets"])


# --- the rules, restated from target names only (an independent oracle) ----------------------


def _ptx_cc(target: str) -> tuple[int, int]:
    n = int(target.removeprefix("compute_"))
    return divmod(n, 10)


def expected_choice(images: list[dict[str, Any]], cc: tuple[int, int], isa: tuple[int, int]) -> str:
    """What the documented rules pick, worked out from target names (not the `cc` fields)."""
    cubins = {}
    for i in images:
        if i["kind"] == "cubin":
            cubins[i["target"]] = parse_target_name(i["target"])
    exact_a = [t for t, (c, v) in cubins.items() if v == "a" and c == cc]
    if exact_a:
        return exact_a[0]
    for variant in ("f", ""):
        same = [
            (c, t)
            for t, (c, v) in cubins.items()
            if v == variant and c[0] == cc[0] and c[1] <= cc[1]
        ]
        if same:
            return max(same)[1]
    ptx = sorted(
        ((_ptx_cc(i["target"]), i["target"], i["ptx_isa"]) for i in images if i["kind"] == "ptx"),
        reverse=True,
    )
    for pcc, target, pisa in ptx:
        major, minor = (int(v) for v in pisa.split("."))
        if pcc <= cc and (major, minor) <= isa:
            return target
    return "error"


SIMULATED = [
    (7, 5),
    (8, 0),
    (8, 6),
    (8, 7),
    (8, 9),
    (9, 0),
    (10, 0),
    (10, 3),
    (11, 0),
    (12, 0),
    (12, 1),
    (13, 0),
]

# For the families that build every generic target with PTX compute_75 and compute_120
# (activation, gated, ...) under a 13.0 driver.
GENERIC_FAMILY_CHOICE = {
    (7, 5): ("sm_75", "cubin"),
    (8, 0): ("sm_80", "cubin"),
    (8, 6): ("sm_86", "cubin"),
    (8, 7): ("sm_86", "cubin"),  # same major, highest minor <= 7
    (8, 9): ("sm_89", "cubin"),
    (9, 0): ("sm_90", "cubin"),
    (10, 0): ("sm_100", "cubin"),
    (10, 3): ("sm_100", "cubin"),
    (11, 0): ("compute_75", "ptx"),  # no 11.x cubin, compute_120 is newer than 11.0
    (12, 0): ("sm_120", "cubin"),
    (12, 1): ("sm_120", "cubin"),
    (13, 0): ("compute_120", "ptx"),
}


@pytest.mark.parametrize("cc", SIMULATED, ids=lambda c: f"{c[0]}.{c[1]}")
def test_real_manifest_follows_the_rules(
    manifest: dict[str, Any], known_targets: dict[str, str], cc: tuple[int, int]
) -> None:
    isa = driver_ptx_isa(DRIVER_13_0)
    for name, fam in manifest["families"].items():
        want = expected_choice(fam["images"], cc, isa)
        if want == "error":
            with pytest.raises(NoKernelImageError):
                choose_image(name, fam, cc, DRIVER_13_0, known_targets=known_targets)
            continue
        choice = choose_image(name, fam, cc, DRIVER_13_0, known_targets=known_targets)
        assert choice.target == want, (name, cc, choice.reason)
        assert choice.family == name
        assert choice.image in fam["images"]


GENERIC_IMAGES = {
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_89",
    "sm_90",
    "sm_100",
    "sm_120",
    "compute_75",
    "compute_120",
}


def _min_toolkit(target: str) -> tuple[int, int]:
    from aotkernels._paths import KERNELS_DIR

    m = load_matrix(KERNELS_DIR.parent / "arch_matrix.toml", check_sources=False)
    return m.targets["sm_" + target.removeprefix("sm_").removeprefix("compute_")].min_toolkit


@pytest.mark.parametrize("cc", SIMULATED, ids=lambda c: f"{c[0]}.{c[1]}")
def test_real_generic_families(manifest: dict[str, Any], cc: tuple[int, int]) -> None:
    if manifest["archs"] is not None:
        pytest.skip(f"restricted build (AOTKERNELS_ARCHS={manifest['archs']})")
    # The generic targets and PTX this build's toolkit can write (CUDA 12.4: no Blackwell).
    generic = {
        t for t in GENERIC_IMAGES if _min_toolkit(t) <= build_variant.version(manifest["toolkit"])
    }
    fams = {
        n: f
        for n, f in manifest["families"].items()
        if build_variant.targets(manifest, n) == generic
    }
    assert {"activation", "gated"} <= set(fams)
    target, kind = GENERIC_FAMILY_CHOICE[cc]
    if target not in generic:  # no cubin (nor newer PTX) for this cc: compute_75's PTX
        target, kind = "compute_75", "ptx"
    for name, fam in fams.items():
        choice = choose_image(name, fam, cc, DRIVER_13_0)
        assert (choice.target, choice.image["kind"]) == (target, kind), (name, choice.reason)
        if kind == "ptx":
            assert choice.reason.startswith(f"PTX {target} JIT-compiled by the driver")
        elif target.removeprefix("sm_") == f"{cc[0]}{cc[1]}":
            assert choice.reason.startswith(f"generic cubin {target}")
        else:
            assert f"runs on {cc[0]}.x >= " in choice.reason


def test_real_manifest_pre_turing_has_no_image(
    manifest: dict[str, Any], known_targets: dict[str, str]
) -> None:
    fam = manifest["families"]["activation"]
    with pytest.raises(NoKernelImageError) as info:
        choose_image(
            "activation",
            fam,
            (7, 0),
            DRIVER_13_0,
            device="device 0 (Tesla V100)",
            known_targets=known_targets,
        )
    msg = str(info.value)
    assert msg.startswith("activation: no kernel image for device 0 (Tesla V100)")
    assert "compute capability 7.0" in msg
    assert "sm_75" in msg and "compute_75" in msg
    assert "add [targets.sm_70] to arch_matrix.toml" in msg
    assert "AOTKERNELS_ARCHS including sm_70" in msg


def test_real_manifest_old_driver(manifest: dict[str, Any]) -> None:
    """A driver too old to JIT the build's PTX (12.4 for CUDA 13's ISA 9.0, 12.3 for 12.4's 8.4)."""
    fam = manifest["families"]["activation"]
    isa = build_variant.ptx_isa(manifest)
    old = build_variant.driver_that_cannot_jit(isa)
    with pytest.raises(DriverTooOldError) as info:
        choose_image("activation", fam, (11, 0), old)
    assert f"CUDA {old[0]}.{old[1]}" in str(info.value)
    assert f"ISA {isa[0]}.{isa[1]}" in str(info.value)
    # cubins do not depend on the driver's JIT
    assert choose_image("activation", fam, (8, 7), old).target == "sm_86"
    assert manifest["ptx_driver_floor"] == "{}.{}".format(*driver_for_ptx_isa(isa))


# --- synthetic manifests ---------------------------------------------------------------------


def img(target: str, isa: str = "9.0") -> dict[str, Any]:
    if target.startswith("compute_"):
        cc = _ptx_cc(target)
        return {
            "kind": "ptx",
            "target": target,
            "arch": cc[0] * 10 + cc[1],
            "variant": "",
            "cc": f"{cc[0]}.{cc[1]}",
            "ptx_isa": isa,
        }
    (major, minor), variant = parse_target_name(target)
    return {
        "kind": "cubin",
        "target": target,
        "arch": major * 10 + minor,
        "variant": variant,
        "cc": f"{major}.{minor}",
        "ptx_isa": None,
    }


def fam(*targets: str, isa: str = "9.0") -> dict[str, Any]:
    return {"images": [img(t, isa) for t in targets]}


def pick(
    f: dict[str, Any], cc: tuple[int, int], driver: tuple[int, int] = DRIVER_13_0, **kw: Any
) -> str:
    return choose_image("fam", f, cc, driver, **kw).target


def refused(f: dict[str, Any], *ccs: tuple[int, int]) -> None:
    """No image of ``f`` runs on any of ``ccs``."""
    for cc in ccs:
        with pytest.raises(NoKernelImageError):
            pick(f, cc)


def test_a_cubin_only_on_its_exact_cc() -> None:
    f = fam("sm_90a")
    assert pick(f, (9, 0)) == "sm_90a"
    refused(f, (9, 1), (10, 0), (12, 0))
    f = fam("sm_90a", "sm_90")
    assert pick(f, (9, 0)) == "sm_90a"
    assert pick(f, (9, 1)) == "sm_90"  # a hypothetical later 9.x runs the generic cubin


def test_f_cubin_on_its_family() -> None:
    f = fam("sm_100f")
    assert pick(f, (10, 0)) == "sm_100f"
    assert pick(f, (10, 3)) == "sm_100f"
    refused(f, (11, 0), (12, 0), (9, 0))
    f = fam("sm_100f", "sm_103f")
    assert pick(f, (10, 0)) == "sm_100f"
    assert pick(f, (10, 3)) == "sm_103f"  # highest minor <= the device's


def test_preference_a_then_f_then_generic() -> None:
    f = fam("sm_100", "sm_100f", "sm_100a", "compute_100")
    assert pick(f, (10, 0)) == "sm_100a"
    assert pick(f, (10, 3)) == "sm_100f"
    assert pick(fam("sm_100", "sm_100f"), (10, 0)) == "sm_100f"
    assert pick(fam("sm_100a", "sm_100"), (10, 0)) == "sm_100a"
    assert pick(fam("sm_100a", "sm_100"), (10, 3)) == "sm_100"
    # a cubin of the exact cc beats any PTX
    assert pick(fam("compute_120", "sm_120a"), (12, 0)) == "sm_120a"
    reason = choose_image("fam", f, (10, 0), DRIVER_13_0).reason
    assert reason == "exact arch-specific cubin sm_100a"
    reason = choose_image("fam", f, (10, 3), DRIVER_13_0).reason
    assert reason.startswith("family-specific cubin sm_100f")


def test_generic_cubin_same_major_highest_minor() -> None:
    f = fam("sm_80", "sm_86", "sm_89", "sm_90")
    assert pick(f, (8, 0)) == "sm_80"
    assert pick(f, (8, 7)) == "sm_86"
    assert pick(f, (8, 9)) == "sm_89"
    assert pick(f, (9, 0)) == "sm_90"
    refused(fam("sm_86"), (8, 0))  # never a newer minor
    refused(fam("sm_90"), (10, 0))  # never across majors


def test_ptx_highest_cc_not_above_the_device() -> None:
    f = fam("sm_90", "compute_75", "compute_90", "compute_120")
    assert pick(f, (10, 0)) == "compute_90"
    assert pick(f, (13, 0)) == "compute_120"
    assert pick(f, (8, 0)) == "compute_75"
    refused(f, (7, 0))


def test_force_ptx_skips_cubins() -> None:
    f = fam("sm_80", "sm_90a", "compute_75")
    assert pick(f, (8, 0)) == "sm_80"
    c = choose_image("fam", f, (9, 0), DRIVER_13_0, force_ptx=True)
    assert c.target == "compute_75" and c.image["kind"] == "ptx"
    assert "CUDA_FORCE_PTX_JIT=1" in c.reason
    with pytest.raises(NoKernelImageError, match="CUDA_FORCE_PTX_JIT=1 is set") as info:
        choose_image("fam", fam("sm_80"), (8, 0), DRIVER_13_0, force_ptx=True)
    # The advice names PTX, not the sm_80 cubin this build already holds.
    assert "a PTX target no newer than compute_80" in str(info.value)
    assert "including sm_80" not in str(info.value)


def test_no_image_message_with_known_target() -> None:
    f = fam("sm_80", "sm_90")
    with pytest.raises(NoKernelImageError) as info:
        choose_image(
            "norm",
            f,
            (12, 0),
            DRIVER_13_0,
            device="device 1 (NVIDIA RTX PRO 6000)",
            known_targets={"sm_80": "8.0", "sm_120": "12.0", "sm_120a": "12.0"},
        )
    msg = str(info.value)
    assert isinstance(info.value, AotKernelsError) and isinstance(info.value, RuntimeError)
    assert msg.startswith("norm: no kernel image for device 1 (NVIDIA RTX PRO 6000)")
    assert "(compute capability 12.0)" in msg
    assert "this build holds sm_80, sm_90" in msg
    assert "rebuild with AOTKERNELS_ARCHS including sm_120 or sm_120a" in msg
    assert "add [targets." not in msg


def test_no_image_message_when_matrix_lacks_the_target() -> None:
    with pytest.raises(NoKernelImageError) as info:
        choose_image(
            "norm",
            fam("sm_100", "compute_120"),
            (11, 0),
            DRIVER_13_0,
            device="device 0 (NVIDIA Thor)",
            known_targets={"sm_100": "10.0"},
        )
    msg = str(info.value)
    assert msg.startswith("norm: no kernel image for device 0 (NVIDIA Thor)")
    assert "(compute capability 11.0)" in msg
    assert "this build holds sm_100, compute_120" in msg
    assert "add [targets.sm_110] to arch_matrix.toml" in msg
    assert "AOTKERNELS_ARCHS including sm_110" in msg


def test_no_image_message_empty_family() -> None:
    with pytest.raises(NoKernelImageError, match="this build holds nothing"):
        choose_image("norm", {"images": []}, (9, 0), DRIVER_13_0)


def test_driver_too_old_for_ptx() -> None:
    f = fam("sm_90", "compute_90", isa="9.0")
    with pytest.raises(DriverTooOldError) as info:
        choose_image("norm", f, (12, 0), (12, 4), device="device 0 (NVIDIA B200)")
    msg = str(info.value)
    assert isinstance(info.value, AotKernelsError)
    assert not isinstance(info.value, NoKernelImageError)
    assert msg.startswith("norm: device 0 (NVIDIA B200) (compute capability 12.0)")
    assert "PTX compute_90 of ISA 9.0" in msg
    assert "driver (CUDA 12.4)" in msg and "up to ISA 8.4" in msg
    assert "update the NVIDIA driver" in msg
    # the same fatbin is fine under a 13.0 driver
    assert pick(f, (12, 0), (13, 0)) == "compute_90"


def test_older_ptx_used_when_newer_isa_is_too_new() -> None:
    f = {"images": [img("compute_75", "8.0"), img("compute_90", "9.0")]}
    assert pick(f, (12, 0), (12, 4)) == "compute_75"
    assert pick(f, (12, 0), (13, 0)) == "compute_90"


@pytest.mark.parametrize(
    ("driver", "isa"),
    [
        ((13, 0), (9, 0)),
        ((13, 1), (9, 1)),
        ((12, 9), (8, 8)),
        ((12, 8), (8, 7)),
        ((12, 4), (8, 4)),
        ((12, 0), (8, 0)),
        ((12, 7), (8, 5)),  # no CUDA 12.7: the newest release below it (12.6 -> 8.5)
        ((11, 8), (7, 8)),
        ((11, 0), (7, 0)),
        ((10, 2), (0, 0)),  # older than the table: no ISA we emit
        ((14, 0), (99, 99)),  # newer than the table: reads everything
    ],
)
def test_driver_ptx_isa(driver: tuple[int, int], isa: tuple[int, int]) -> None:
    assert driver_ptx_isa(driver) == isa


# --- properties: random builds x devices x drivers against the oracle ------------------------

_CUBIN = st.builds(
    lambda major, minor, variant: f"sm_{major}{minor}{variant}",
    st.integers(7, 13),
    st.integers(0, 9),
    st.sampled_from(["", "a", "f"]),
)
_PTX = st.builds(
    lambda major, minor, isa: (f"compute_{major}{minor}", isa),
    st.integers(7, 13),
    st.integers(0, 9),
    st.sampled_from(["7.5", "8.4", "8.7", "9.0", "9.1"]),
)
# Driver CUDA versions from before our floors to after the table's newest entry.
_DRIVER = st.tuples(st.integers(11, 14), st.integers(0, 9))


@settings(max_examples=500, deadline=None)
@given(
    cubins=st.lists(_CUBIN, max_size=6, unique=True),
    ptx=st.lists(_PTX, max_size=3, unique_by=lambda p: p[0]),
    cc=st.tuples(st.integers(7, 13), st.integers(0, 9)),
    driver=_DRIVER,
    force_ptx=st.booleans(),
)
def test_random_builds_follow_the_rules(
    cubins: list[str],
    ptx: list[tuple[str, str]],
    cc: tuple[int, int],
    driver: tuple[int, int],
    force_ptx: bool,
) -> None:
    """Any set of images, any device, any driver: the choice is the oracle's, and every refusal
    is the documented error (DriverTooOldError exactly when some PTX would serve the device
    with a newer driver)."""
    images = [img(t) for t in cubins] + [img(t, isa) for t, isa in ptx]
    oracle_images = [i for i in images if i["kind"] == "ptx"] if force_ptx else images
    want = expected_choice(oracle_images, cc, driver_ptx_isa(driver))
    f = {"images": images}
    if want != "error":
        choice = choose_image("fam", f, cc, driver, force_ptx=force_ptx)
        assert choice.target == want, choice.reason
        return
    could_jit_later = any(i["kind"] == "ptx" and _ptx_cc(i["target"]) <= cc for i in images)
    error = DriverTooOldError if could_jit_later else NoKernelImageError
    with pytest.raises(error) as info:
        choose_image("fam", f, cc, driver, force_ptx=force_ptx)
    assert f"{cc[0]}.{cc[1]}" in str(info.value)


@settings(max_examples=200, deadline=None)
@given(toolkit=st.tuples(st.integers(12, 13), st.integers(0, 9)), driver=_DRIVER)
def test_driver_floor_is_the_toolkits_major(
    toolkit: tuple[int, int], driver: tuple[int, int]
) -> None:
    """A build of toolkit X.Y loads under any driver of CUDA X.0 or later, and the refusal
    names both versions."""
    man = {"toolkit": f"{toolkit[0]}.{toolkit[1]}", "driver_floor": f"{toolkit[0]}.0"}
    why = driver_too_old(man, driver)
    assert (why is None) == (driver >= (toolkit[0], 0))
    if why is not None:
        assert f"CUDA >= {toolkit[0]}.0" in why and f"CUDA {driver[0]}.{driver[1]}" in why
