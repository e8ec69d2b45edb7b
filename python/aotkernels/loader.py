"""Loading: once per (family, device), thread-safe, context-independent.

The dispatcher's chosen image is cut out of the family's fatbin (``fatbin.extract_image``) and
given to ``cuLibraryLoadData``, so the driver runs exactly that image; kernels are fetched with
``cuLibraryGetKernel``. Each fatbin's sha256 is checked against the manifest before its first
load. ``preload()`` does all of this ahead of time, e.g. before a CUDA-graph capture.

Everything the loader knows of the build comes from manifest.json: the images, the entry
points, the parameter struct (field order, types, offsets, ``struct`` format) and the targets.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import device as _device
from ._paths import KERNELS_DIR
from .errors import AotKernelsError, DriverTooOldError
from .fatbin import FatbinError, extract_image, read_fatbin
from .manifest import ManifestError, load_manifest
from .select import Choice, choose_image, driver_too_old

__all__ = [
    "LoadedFamily",
    "choice_for",
    "constants",
    "dtypes",
    "family_on",
    "manifest",
    "preload",
]


@dataclass
class LoadedFamily:
    """A family's chosen image, loaded on one device, with what launching its kernels needs."""

    name: str
    device: _device.DeviceInfo
    choice: Choice
    library: Any
    blob: bytes  # the image given to cuLibraryLoadData, held for the library's lifetime
    params: struct.Struct
    param_fields: list[tuple[str, str]]  # (name, type) in struct order
    ptr_offsets: list[int]  # byte offsets of the pointer fields, in struct order
    field_offsets: dict[str, int]  # every parameter's byte offset, by name
    kernels: dict[str, int] = field(default_factory=dict)  # symbol -> CUfunction (primary ctx)
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> constants
    binary_version: int = 0  # CU_FUNC_ATTRIBUTE_BINARY_VERSION of the loaded image, e.g. 90
    ptx_version: int = 0  # CU_FUNC_ATTRIBUTE_PTX_VERSION, e.g. 75 for compute_75

    @classmethod
    def from_manifest(
        cls,
        name: str,
        fam: dict[str, Any],
        device: _device.DeviceInfo,
        choice: Choice,
        library: Any = None,
        blob: bytes = b"",
    ) -> LoadedFamily:
        """The family as its manifest record describes it; ``kernels`` is still empty (the
        loader fills it from the driver, tests with simulated handles)."""
        offsets = {str(k): int(v) for k, v in fam["param_offsets"].items()}
        fields = [(str(n), str(t)) for n, t in fam["params"]]
        return cls(
            name,
            device,
            choice,
            library,
            blob,
            struct.Struct(fam["param_format"]),
            fields,
            [offsets[n] for n, t in fields if t == "ptr"],
            offsets,
            variants=dict(fam.get("variants", {})),
        )


_lock = threading.Lock()
_manifest: dict[str, Any] | None = None
_fatbins: dict[str, bytes] = {}
_loaded: dict[tuple[str, int], LoadedFamily] = {}


def manifest() -> dict[str, Any]:
    """The installed build's manifest (read once)."""
    global _manifest
    if _manifest is None:
        try:
            m = load_manifest(KERNELS_DIR)
        except ManifestError as e:
            raise AotKernelsError(str(e)) from None
        _manifest = m
    return _manifest


def _family_manifest(name: str) -> dict[str, Any]:
    fams = manifest()["families"]
    if name not in fams:
        raise NotImplementedError(
            f"family {name!r} is not in this build (built: {', '.join(fams) or 'none'}; "
            "AOTKERNELS_FAMILIES may have left it out)"
        )
    return dict(fams[name])


def constants(scope: str) -> Mapping[str, Any]:
    """The constants the kernels of ``scope`` were built with: a family's
    (``[families.<name>.constants]`` of arch_matrix.toml), or a namespace several families share
    (``[constants.<name>]``, e.g. ``"rowwise"``). Numbers, and groups (enums, flag bits) as
    {member: value}. Needs no device: pure shape rules use them too."""
    shared: Mapping[str, Any] | None = manifest()["constants"].get(scope)
    return shared if shared is not None else _family_manifest(scope)["constants"]


def dtypes(family: str, op: str | None = None) -> tuple[str, ...]:
    """The dtypes ``family`` declares (for ``op``: its own list where the matrix gives one; a
    mixed-operand pair reads ``"<a>x<b>"``), whether or not this build's images hold them all."""
    fam = _family_manifest(family)
    return tuple(fam["op_dtypes"][op] if op is not None else fam["dtypes"])


def force_ptx() -> bool:
    return os.environ.get("CUDA_FORCE_PTX_JIT", "") not in ("", "0")


def _check_driver_floor() -> tuple[int, int]:
    drv = _device.driver_version()
    why = driver_too_old(manifest(), drv)
    if why:
        raise DriverTooOldError(why)
    return drv


def choice_for(name: str, dev: _device.DeviceInfo) -> Choice:
    drv = _check_driver_floor()
    return choose_image(
        name,
        _family_manifest(name),
        dev.cc,
        drv,
        device=f"device {dev.index} ({dev.name})",
        force_ptx=force_ptx(),
        known_targets=manifest()["targets"],
    )


def _fatbin_bytes(name: str, fam: dict[str, Any]) -> bytes:
    data = _fatbins.get(name)
    if data is None:
        path = KERNELS_DIR / fam["file"]
        try:
            data = path.read_bytes()
        except OSError as e:
            raise AotKernelsError(f"{path}: cannot read the fatbin: {e}") from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != fam["sha256"]:
            raise AotKernelsError(
                f"{path}: sha256 {digest} does not match the manifest's {fam['sha256']} "
                "(the file is damaged or from another build)"
            )
        _fatbins[name] = data
    return data


def _load(name: str, dev: _device.DeviceInfo) -> LoadedFamily:
    cu = _device.cuda_driver()
    fam = _family_manifest(name)
    choice = choice_for(name, dev)
    data = _fatbin_bytes(name, fam)
    try:
        image = next(
            i
            for i in read_fatbin(data)
            if i.target == choice.target and i.kind == choice.image["kind"]
        )
    except (FatbinError, StopIteration):
        raise AotKernelsError(
            f"{KERNELS_DIR / fam['file']}: image {choice.target} listed in the manifest is "
            "not in the fatbin"
        ) from None
    blob = extract_image(data, image)
    err, lib = cu.cuLibraryLoadData(blob, [], [], 0, [], [], 0)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise AotKernelsError(
            f"{KERNELS_DIR / fam['file']}: the driver could not load image {choice.target}: "
            f"{err.name}"
        )
    loaded = LoadedFamily.from_manifest(name, fam, dev, choice, lib, blob)
    attr = cu.CUfunction_attribute
    err, cudev = cu.cuDeviceGet(dev.index)
    # Launch through each kernel's CUfunction in the device's primary context (where every op
    # launches): resolving a context-independent CUkernel costs the driver a lookup per launch.
    (err,) = cu.cuCtxPushCurrent(cu.CUcontext(dev.context))
    if err != cu.CUresult.CUDA_SUCCESS:
        raise AotKernelsError(f"cuCtxPushCurrent failed on device {dev.index}: {err.name}")
    try:
        for entry in fam["entries"]:
            if "images" in entry and choice.target not in entry["images"]:
                continue  # built only into images whose target has its features
            err, kernel = cu.cuLibraryGetKernel(lib, entry["symbol"].encode())
            if err == cu.CUresult.CUDA_SUCCESS:
                err, func = cu.cuKernelGetFunction(kernel)
            smem = int(loaded.variants.get(entry.get("variant", ""), {}).get("smem", 0))
            if err == cu.CUresult.CUDA_SUCCESS and smem > 48 * 1024:
                # Dynamic shared memory beyond 48 KiB must be opted into per kernel.
                (err,) = cu.cuFuncSetAttribute(
                    func, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem
                )
            if err != cu.CUresult.CUDA_SUCCESS:
                raise AotKernelsError(
                    f"{KERNELS_DIR / fam['file']}: entry point {entry['symbol']} not loadable "
                    f"from image {choice.target}: {err.name}"
                )
            loaded.kernels[entry["symbol"]] = int(func)
            if not loaded.binary_version:
                _, loaded.binary_version = cu.cuKernelGetAttribute(
                    attr.CU_FUNC_ATTRIBUTE_BINARY_VERSION, kernel, cudev
                )
                _, loaded.ptx_version = cu.cuKernelGetAttribute(
                    attr.CU_FUNC_ATTRIBUTE_PTX_VERSION, kernel, cudev
                )
    finally:
        cu.cuCtxPopCurrent()
    return loaded


def family_on(name: str, device_index: int) -> LoadedFamily:
    """The loaded family on a device; the first call loads it (once, whatever the threads)."""
    key = (name, device_index)
    loaded = _loaded.get(key)
    if loaded is None:
        dev = _device.device_info(device_index)
        with _lock:
            loaded = _loaded.get(key)
            if loaded is None:
                loaded = _load(name, dev)
                _loaded[key] = loaded
    return loaded


def preload(families: Iterable[str] | str | None = None, device: int | None = None) -> None:
    """Load ``families`` (default: all built) on ``device`` (default: every device) now.

    Call it before capturing a CUDA graph, so the capture never triggers a load.
    """
    if isinstance(families, str):
        families = [families]
    names = list(families) if families is not None else list(manifest()["families"])
    devices = [device] if device is not None else range(_device.device_count())
    for d in devices:
        for name in names:
            family_on(name, d)
