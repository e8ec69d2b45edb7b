"""The torch front end, generated from the op declarations (``aotkernels.ops._op``).

Every declared op becomes ``torch.ops.aotkernels.<op>``: a schema written from the declaration
(mutated inputs annotated ``Tensor(a!)``), the CUDA implementation (the eager runner), a fake
implementation (the declaration's pure ``shapes`` rule, so ``torch.compile`` and
``dynamic=True`` see the output shapes without running anything), an ``out=`` overload
(``torch.ops.aotkernels.<op>.out``, which mutates ``out``), and autograd: the declared backward,
or, for ops without one, an error as soon as an input requires grad (never a detached result).

This module imports torch, so ``aotkernels`` imports it only once torch itself is imported
(``aotkernels._frontends``); ``import aotkernels`` never imports torch.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from . import arrays as _arrays
from .dtypes import DTYPES
from .ops import _op
from .ops._op import REGISTRY, Args, BackwardCtx, Meta, Op, run

__all__ = ["call", "call_autograd", "compiling", "register", "schema"]

compiling = torch.compiler.is_compiling

_LIB: Any = None
_OPS: dict[str, Any] = {}  # op name -> torch.ops.aotkernels.<op>.default
_OUT_OPS: dict[str, Any] = {}  # op name -> torch.ops.aotkernels.<op>.out

_TO_TORCH = {d.name: getattr(torch, d.long) for d in DTYPES.values()}
_FROM_TORCH = {v: k for k, v in _TO_TORCH.items()}


def _default(kind: str, value: Any) -> str:
    if value is None:
        return "None"
    if kind == "str":
        return f'"{value}"'
    if kind == "int[]?":
        return "[" + ", ".join(str(v) for v in value) + "]"
    return repr(value)


def _signature(op: Op) -> str:
    """The argument list of ``op``'s schema: inputs, then attributes."""
    parts = []
    alias = iter("abcdefgh")
    for t in op.inputs:
        if t.mutated:
            parts.append(f"Tensor({next(alias)}!) {t.name}")
        elif t.optional:
            parts.append(f"Tensor? {t.name}=None")
        else:
            parts.append(f"Tensor {t.name}")
    for a in op.attrs:
        parts.append(f"{_op.ATTR_KINDS[a.kind]} {a.name}={_default(a.kind, a.default)}")
    return ", ".join(parts)


def schema(op: Op) -> str:
    """``op``'s torch schema, e.g. ``rms_norm(Tensor x, Tensor weight, float eps=1e-06) ->
    Tensor``; visible outputs are returned, hidden ones (workspaces) are not."""
    n = len(op.visible)
    ret = "()" if n == 0 else "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"
    return f"{op.name}({_signature(op)}) -> {ret}"


def _split(
    op: Op, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """Schema-ordered (args, kwargs) -> (arrays, attrs); torch drops trailing defaults."""
    names = [t.name for t in op.inputs] + [a.name for a in op.attrs]
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    arrays = [bound.get(t.name) for t in op.inputs]
    attrs = {a.name: bound[a.name] for a in op.attrs if a.name in bound}
    return arrays, attrs


def _visible(op: Op, outputs: Sequence[Any]) -> Any:
    vis = [r for r, o in zip(outputs, op.outputs, strict=True) if not o.hidden]
    return None if not vis else vis[0] if len(vis) == 1 else tuple(vis)


def _meta(t: Any) -> Meta:
    dtype = _FROM_TORCH.get(t.dtype) or str(t.dtype).removeprefix("torch.")
    return Meta(tuple(t.shape), tuple(t.stride()), dtype, 16)


def _needs_grad(op: Op, arrays: Sequence[Any]) -> str | None:
    if not torch.is_grad_enabled():
        return None
    for t, a in zip(op.inputs, arrays, strict=True):
        if isinstance(a, torch.Tensor) and a.requires_grad:
            return t.name
    return None


def _no_backward(op: Op, arg: str, why: str) -> NotImplementedError:
    return NotImplementedError(
        f"{op.name}: {arg} requires grad, but {why}; call it under torch.no_grad() or pass "
        f"{arg}.detach()"
    )


def _register_one(lib: Any, op: Op) -> None:
    qualname = f"aotkernels::{op.name}"
    lib.define(schema(op))
    single_out = len(op.visible) == 1 and not op.mutates
    if single_out:
        lib.define(f"{op.name}.out({_signature(op)}, *, Tensor(z!) out) -> ()")

    def impl(*args: Any, **kwargs: Any) -> Any:
        arrays, attrs = _split(op, args, kwargs)
        return _visible(op, run(op, arrays, attrs, None, None, below_autograd=True,
                                want_outputs=True))  # fmt: skip

    def impl_out(*args: Any, out: Any, **kwargs: Any) -> None:
        arrays, attrs = _split(op, args, kwargs)
        run(op, arrays, attrs, out, None, below_autograd=True)

    def fake(*args: Any, **kwargs: Any) -> Any:
        arrays, attrs = _split(op, args, kwargs)
        values = _op._bind(op, arrays, attrs)
        metas = {t.name: None if a is None else _meta(a) for t, a in zip(op.inputs, arrays,
                                                                         strict=True)}  # fmt: skip
        lead = next(a for a in arrays if a is not None)
        a = Args(op, metas, dict(zip((x.name for x in op.attrs), values, strict=True)), -1)
        specs = op.shapes(a)
        outs = [lead.new_empty(sp.shape, dtype=_TO_TORCH[sp.dtype]) for sp in specs]
        return _visible(op, outs)

    lib.impl(op.name, impl, "CUDA")
    torch.library.register_fake(qualname, fake, lib=lib)
    if single_out:
        lib.impl(f"{op.name}.out", impl_out, "CUDA")
        torch.library.register_fake(f"{qualname}.out", lambda *a, **k: None, lib=lib)
        lib.impl(f"{op.name}.out", _guard(op, "out=", "out= results have no autograd"),
                 "Autograd")  # fmt: skip
    bwd = op.backward
    if bwd is not None and not op.mutates:
        _register_autograd(lib, op, qualname)
    else:
        why = "it writes its inputs in place" if op.mutates else "it has no backward"
        lib.impl(op.name, _guard(op, "", why), "Autograd")
    _OPS[op.name] = getattr(torch.ops.aotkernels, op.name).default
    if single_out:
        _OUT_OPS[op.name] = getattr(torch.ops.aotkernels, op.name).out


def _guard(op: Op, overload: str, why: str) -> Any:
    """An autograd kernel that refuses inputs requiring grad and otherwise runs the op below
    autograd (so no result is ever silently detached)."""

    def kernel(*args: Any, **kwargs: Any) -> Any:
        arrays, _ = _split(op, args, kwargs)
        arg = _needs_grad(op, arrays)
        if arg is not None:
            raise _no_backward(op, arg, why)
        packet = getattr(torch.ops.aotkernels, op.name)
        target = packet.out if overload else packet.default
        with torch._C._AutoDispatchBelowAutograd():
            return target(*args, **kwargs)

    return kernel


def _register_autograd(lib: Any, op: Op, qualname: str) -> None:
    bwd = op.backward
    assert bwd is not None
    names = [t.name for t in op.inputs] + [a.name for a in op.attrs]
    out_names = [o.name for o in op.visible]

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        bound = dict(zip(names, inputs, strict=False))
        outs = output if isinstance(output, tuple) else (output,)
        bound.update(zip(out_names, outs, strict=True))
        ctx.save_for_backward(*(bound.get(n) for n in bwd.saved))
        ctx.ak_attrs = {a.name: bound.get(a.name, a.default) for a in op.attrs}

    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        saved = dict(zip(bwd.saved, ctx.saved_tensors, strict=True))
        # One flag per argument the call passed: the dispatcher drops trailing defaults.
        passed = ctx.needs_input_grad
        needs = {t.name: i < len(passed) and bool(passed[i]) for i, t in enumerate(op.inputs)}
        got = bwd.fn(BackwardCtx(saved, ctx.ak_attrs, needs), grads)
        per_arg = [got.get(t.name) if needs[t.name] else None for t in op.inputs]
        return tuple(per_arg + [None] * len(op.attrs))[: len(passed)]

    torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=lib)


def register() -> None:
    """Register every declared op with torch (once)."""
    global _LIB
    if _LIB is not None:
        return
    lib = torch.library.Library("aotkernels", "DEF")
    for op in REGISTRY.values():
        _register_one(lib, op)
    _LIB = lib
    _op.set_torch_front(sys.modules[__name__])


def _torch_attrs(op: Op, attrs: Mapping[str, Any]) -> list[Any]:
    vals = []
    for a in op.attrs:
        v = attrs.get(a.name, a.default)
        if a.kind == "dtype?" and v is not None and not isinstance(v, torch.dtype):
            v = _TO_TORCH[_op.parse_dtype(op.name, a.name, v)]
        vals.append(v)
    return vals


def call(op: Op, arrays: Sequence[Any], attrs: Mapping[str, Any], out: Any, stream: Any) -> Any:
    """``op`` as a call of ``torch.ops.aotkernels.<op>`` (inside torch.compile, or to go through
    autograd). Returns what the eager call returns."""
    if stream is not None:
        raise NotImplementedError(
            f"{op.name}: stream= is not supported inside torch.compile or autograd (the op runs "
            "on torch's current stream)"
        )
    full = list(arrays) + [None] * (len(op.inputs) - len(arrays))
    args = full + _torch_attrs(op, attrs)
    if out is not None:
        if op.name not in _OUT_OPS:
            raise TypeError(f"{op.name}: out= is not supported by this op")
        _OUT_OPS[op.name](*args, out=out)
        return out
    res = _OPS[op.name](*args)
    outs = res if isinstance(res, tuple) else (res,)
    by_name = {t.name: a for t, a in zip(op.inputs, full, strict=True)}
    by_name.update({o.name: r for o, r in zip(op.visible, outs, strict=False)})
    vals = tuple(by_name[n] for n in op.returns)
    return vals[0] if len(vals) == 1 else vals


def call_autograd(
    op: Op, arrays: Sequence[Any], values: tuple[Any, ...], out: Any, stream: Any
) -> Any:
    """An eager call whose inputs require grad: through autograd, or a clear refusal."""
    arg = _needs_grad(op, arrays) or "an input"
    if op.mutates:
        raise _no_backward(op, arg, "it writes its inputs in place")
    if out is not None:
        raise _no_backward(op, arg, "out= results have no autograd")
    if op.backward is None:
        raise _no_backward(op, arg, "it has no backward")
    register()
    attrs = dict(zip((a.name for a in op.attrs), values, strict=True))
    if stream is None:
        return call(op, arrays, attrs, None, None)
    with torch.cuda.stream(torch.cuda.ExternalStream(_arrays.stream_handle(stream))):
        return call(op, arrays, attrs, None, None)
