"""Printing, static assertions, assumptions and layout annotations."""

from typing import Optional, Union

from .. import _C
from .._C import CompileError, Expr
from ..tracing import RegisterTensor, SharedTensor, TensorBase, Unusable, _builder, _describe, _fail, _here, _where
from ._args import _Scalar, _layout, _scalar, _tensor
from .thread import _ThreadGroup


class DebugInstructions:
    """Printing, assertions, assumptions and layout annotations. A mixin of ``tilus.Script``."""

    @staticmethod
    def static_assert(cond: Union[bool, Expr], msg: str = "static_assert failed") -> None:
        """Checks ``cond`` while the kernel is traced: a Python bool (or a constant kernel
        expression); False raises ``AssertionError(msg)``, reported as a CompileError at the line.
        A condition only known when the kernel runs is a CompileError."""
        if isinstance(cond, Expr):
            if not cond.is_const():
                _fail(f"static_assert: the condition must be known while tracing (a Python bool or a constant), "
                      f"got {_describe(cond)}")
            cond = repr(cond) == "true" if cond.dtype.is_bool() else cond.int_value() != 0
        elif isinstance(cond, (TensorBase, Unusable)) or not isinstance(cond, (bool, int)) and \
                type(cond).__name__ != "bool_":
            _fail(f"static_assert: the condition must be a Python bool, got {_describe(cond)}")
        if not cond:
            raise AssertionError(msg)

    def print_tensor(self, msg: str, tensor: Union[RegisterTensor, SharedTensor], fmt: Optional[str] = None, *,
                     cond: _Scalar = True) -> None:
        """Prints ``msg`` and then the elements of a register or shared tensor, one row per line in
        brackets, with the ``printf`` conversion ``fmt`` (NVIDIA Tilus's name and defaults: ``%5d``
        for integers and bool, ``%5.2f`` for 16-bit floats, ``%6.3f`` for other floats). Every block
        prints where ``cond`` holds (our extra: ``cond=self.blockIdx.x == 0`` for one block).

        A composition: a register tensor is staged in a shared tensor of its shape; after a
        barrier the group's first thread prints element by element in IR loops; a barrier ends it.
        On the CPU backend each block prints once, in order of its instructions."""
        loc = _here()
        if not isinstance(msg, str):
            raise CompileError(f"{_where(loc)}print_tensor: msg must be a str, got {_describe(msg)}")
        if not isinstance(tensor, (RegisterTensor, SharedTensor)):
            raise CompileError(f"{_where(loc)}print_tensor: tensor must be a register or shared tensor, got "
                               f"{_describe(tensor)} (load a global tile first)")
        dt = tensor.dtype
        if fmt is None:
            fmt = "%6.3f" if dt.is_float() and dt.bits > 16 else "%5.2f" if dt.is_float() else "%5d"
        elif not isinstance(fmt, str) or fmt.count("%") != 1:
            raise CompileError(f"{_where(loc)}print_tensor: fmt must be one printf conversion such as '%6.3f', got "
                               f"{_describe(fmt)}")
        b = _builder()
        shape = list(tensor.shape)
        staged = isinstance(tensor, RegisterTensor)
        if staged:
            s = b.shared_tensor(dt, shape, loc)
            b.store_shared(s, tensor.t, loc)
        else:
            s = tensor.t
        b.sync(loc)
        b.begin_if(_scalar(cond, "print_tensor: cond", loc), loc)
        with _ThreadGroup("single_thread", 0, 1, loc):
            b.printf(msg.replace("%", "%%") + "\n", [], loc)
            index = []
            for d, extent in enumerate(shape):
                if d == len(shape) - 1:
                    b.printf("[", [], loc)
                index.append(b.begin_for(f"print_i{d}", 0, extent, 1, 0, loc))
            value = b.item(b.load_shared(b.index_shared(s, index, loc), loc), loc)
            b.printf(fmt + " ", [value], loc)
            for d in reversed(range(len(shape))):
                b.end_for()
                if d == len(shape) - 1:
                    b.printf("]\n", [], loc)
            if not shape:
                value = b.item(b.load_shared(s, loc), loc)
                b.printf(fmt + "\n", [value], loc)
        b.end_if()
        b.sync(loc)
        if staged:
            b.free_shared(s, loc)

    def printf(self, fmt: str, *args: _Scalar) -> None:
        """Device ``printf`` of scalars; the number of ``%`` conversions must match the arguments.

        On the CPU backend it prints once per block.
        """
        loc = _here()
        if not isinstance(fmt, str):
            raise CompileError(f"{_where(loc)}printf: the format must be a str, got {_describe(fmt)}")
        _builder().printf(fmt, [_scalar(a, "printf: arguments", loc) for a in args], loc)

    def assume(self, cond: _Scalar) -> None:
        """States a fact the compiler may use: ``cond``, a bool scalar expression, holds here."""
        loc = _here()
        _builder().assume(_scalar(cond, "assume: the condition", loc), loc)

    def annotate_layout(self, tensor: Union[RegisterTensor, SharedTensor],
                        layout: Union[_C.RegisterLayout, _C.SharedLayout]) -> None:
        """Fixes the layout of ``tensor``: a register layout (``tilus.spatial([8, 4])``, ...) of a
        register tensor, or a shared layout (``tilus.SharedLayout``,
        ``tilus.ir.layout.ops.shared_row_major_swizzle``, ``self.cuda.shared_layout``) of a
        ``shared_tensor`` allocation.

        Layout inference takes it as an anchor (docs/passes.md).
        """
        loc = _here()
        if isinstance(tensor, SharedTensor):
            if not isinstance(layout, _C.SharedLayout):
                _fail(f"annotate_layout: a shared tensor takes a shared layout (tilus.SharedLayout, "
                      f"shared_row_major_swizzle(...), self.cuda.shared_layout(...)), got {_describe(layout)}")
            _builder().annotate_shared_layout(tensor.t, layout, loc)
            return
        _builder().annotate_layout(_tensor(tensor, "annotate_layout", loc),
                                   _layout(layout, "annotate_layout: layout", loc, optional=False), loc)
