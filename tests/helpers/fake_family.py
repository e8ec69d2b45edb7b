"""Loaded families on a simulated GPU, described by the loader from the installed manifest.

CPU tests that capture launches (instead of running them) need what the loader would hand the
op layer: the parameter struct, its field offsets, the variants and a kernel handle per entry
of the chosen image. Building it through ``LoadedFamily.from_manifest`` keeps the tests on the
loader's own reading of the manifest rather than a second copy of it.
"""

from __future__ import annotations

import pytest

from aotkernels import loader
from aotkernels.device import DeviceInfo
from aotkernels.select import Choice, parse_version


def fake_family(name: str, target: str, sm_count: int = 132) -> loader.LoadedFamily:
    """Family ``name`` as loaded from its ``target`` image on a simulated device of that
    target's compute capability; kernel handles are distinct fake integers. Skips the test
    when this build has no such image (a build restricted by AOTKERNELS_ARCHS)."""
    man = loader.manifest()
    fam = man["families"].get(name)
    if fam is None:
        pytest.skip(f"this build has no {name} family (AOTKERNELS_FAMILIES)")
    image = next((i for i in fam["images"] if i["target"] == target), None)
    if image is None:
        pytest.skip(f"this build has no {target} image of {name} (AOTKERNELS_ARCHS)")
    dev = DeviceInfo(0, "Fake GPU", parse_version(man["targets"][target]), sm_count, 0xC0)
    loaded = loader.LoadedFamily.from_manifest(name, fam, dev, Choice(name, image, "simulated"))
    loaded.kernels = {
        e["symbol"]: 0x1000 + i
        for i, e in enumerate(fam["entries"])
        if target in e.get("images", [target])
    }
    return loaded
