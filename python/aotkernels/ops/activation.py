"""Elementwise activations: relu, gelu (exact or tanh), silu, sigmoid, and their backward ops.

f32 / f16 / bf16, any rank; computed in f32 and rounded once. Inputs may be strided by rows
(``x[:, :h]``, ``x[::2]``); a non-contiguous last dimension is rejected (``ValueError``).
``<act>_backward(grad, x)`` gives ``grad * act'(x)``; torch autograd through the forward ops
runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import loader as _loader
from ..arrays import ITEMSIZE
from ._backward import (
    elementwise_backward_launch,
    elementwise_backward_shapes,
    grad_of_x,
)
from ._elementwise import (
    APPROXIMATE,
    check_approximate,
    elementwise_config,
    gelu_kernel,
    joint_rows_view,
)
from ._op import (
    Args,
    Attr,
    Launch,
    Op,
    Output,
    OutSpec,
    Tensor,
    check_dtype,
    rows_view,
)

__all__ = [
    "gelu",
    "gelu_backward",
    "relu",
    "relu_backward",
    "sigmoid",
    "sigmoid_backward",
    "silu",
    "silu_backward",
]

FAMILY = "activation"


def _shapes(a: Args) -> tuple[OutSpec, ...]:
    check_approximate(a)
    x = a.need("x")
    check_dtype(a.op, "x", x, _loader.dtypes(FAMILY))
    rows_view(a.op, "x", x)  # layout checks before anything is allocated
    return (OutSpec(x.shape, x.dtype),)


def _launcher(kernel: Callable[[Args], str]) -> Callable[[Args], list[Launch]]:
    def launch(a: Args) -> list[Launch]:
        x = a.need("x")
        rows, cols, x_rs, o_rs = joint_rows_view(a.op, x, a.out("out"))
        if rows * cols == 0:
            return []
        c = _loader.constants(FAMILY)
        cfg = elementwise_config(
            rows, cols, ITEMSIZE[x.dtype], a.sm_count, c["unroll"], c["max_threads"]
        )
        args = {"out": "out", "x": "x", "rows": rows, "cols": cols,
                "x_row_stride": x_rs, "out_row_stride": o_rs}  # fmt: skip
        return [Launch(f"ak_{kernel(a)}_{x.dtype}", cfg.grid, cfg.block, args)]

    return launch


def _unary(name: str, attrs: tuple[Attr, ...] = (), kernel: Any = None) -> Op:
    return Op(
        name=name,
        family=FAMILY,
        inputs=(Tensor("x"),),
        attrs=attrs,
        outputs=(Output("out", inplace_of="x"),),
        shapes=_shapes,
        launch=_launcher(kernel or (lambda a: name)),
        backward=grad_of_x(name),
    )


RELU = _unary("relu")
GELU = _unary("gelu", (APPROXIMATE,), gelu_kernel)
SILU = _unary("silu")
SIGMOID = _unary("sigmoid")


def relu(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``max(x, 0)`` elementwise (NaN propagates)."""
    return RELU(x, out=out, stream=stream)


def gelu(x: Any, approximate: str = "none", *, out: Any = None, stream: Any = None) -> Any:
    """``x * Phi(x)``; ``approximate="tanh"`` uses torch's tanh approximation."""
    return GELU(x, approximate=approximate, out=out, stream=stream)


def silu(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``x * sigmoid(x)`` elementwise."""
    return SILU(x, out=out, stream=stream)


def sigmoid(x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``1 / (1 + exp(-x))`` elementwise."""
    return SIGMOID(x, out=out, stream=stream)


# --- backward ----------------------------------------------------------------------------------


def _backward_op(name: str, attrs: tuple[Attr, ...] = (), kernel: Any = None) -> Op:
    pick = kernel or (lambda a: name)
    return Op(
        name=f"{name}_backward",
        family=FAMILY,
        inputs=(Tensor("grad"), Tensor("x")),
        attrs=attrs,
        outputs=(Output("out", inplace_of="grad"),),
        shapes=elementwise_backward_shapes,
        launch=lambda a: elementwise_backward_launch(a, pick(a)),
    )


RELU_BACKWARD = _backward_op("relu")
GELU_BACKWARD = _backward_op("gelu", (APPROXIMATE,), gelu_kernel)
SILU_BACKWARD = _backward_op("silu")
SIGMOID_BACKWARD = _backward_op("sigmoid")


def relu_backward(grad: Any, x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``grad * (x > 0)``: the gradient of ``relu`` at its input ``x``.

    Where ``x <= 0`` the result is 0 whatever ``grad`` holds (NaN included), and a NaN ``x``
    passes ``grad`` through, as torch's relu backward does.

    Parameters
    ----------
    grad : CUDA array, float32 / float16 / bfloat16
        The gradient of relu's output; x's shape and dtype.
    x : CUDA array
        relu's input. Both may be strided by rows (last dimension contiguous).
    out : CUDA array, optional
        Result buffer of x's shape and dtype; may be grad itself (in place).
    stream : int or stream object, optional (see ``aotkernels.ops``)

    Returns
    -------
    The gradient of x (``out`` when given), f32 math rounded once to x's dtype.
    """
    return RELU_BACKWARD(grad, x, out=out, stream=stream)


def gelu_backward(
    grad: Any, x: Any, approximate: str = "none", *, out: Any = None, stream: Any = None
) -> Any:
    """``grad * (Phi(x) + x * phi(x))``: the gradient of ``gelu`` at ``x`` (phi the normal
    density); ``approximate="tanh"`` differentiates torch's tanh approximation instead.

    Arguments as :func:`relu_backward`.
    """
    return GELU_BACKWARD(grad, x, approximate=approximate, out=out, stream=stream)


def silu_backward(grad: Any, x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``grad * s * (1 + x * (1 - s))`` with ``s = sigmoid(x)``: the gradient of ``silu``.

    Arguments as :func:`relu_backward`.
    """
    return SILU_BACKWARD(grad, x, out=out, stream=stream)


def sigmoid_backward(grad: Any, x: Any, *, out: Any = None, stream: Any = None) -> Any:
    """``grad * s * (1 - s)`` with ``s = sigmoid(x)``, from sigmoid's *input* ``x``.

    Arguments as :func:`relu_backward`.
    """
    return SIGMOID_BACKWARD(grad, x, out=out, stream=stream)
