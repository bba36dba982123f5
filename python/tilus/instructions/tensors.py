"""Tensor instructions: global views and tensors, shared and register tensors, views and shape changes."""

from typing import Callable, Optional, Sequence, Union

from .. import _C
from .._C import CompileError, DataType, Expr
from ..tracing import (GlobalTensor, RegisterTensor, SharedTensor, _builder, _declare_kernel_variable, _describe,
                       _dtype, _here, _where)
from ._args import _Int, _Scalar, _bool, _exprs, _ints, _layout, _one_of, _scalar, _tensor


class TensorInstructions:
    """Tensors: global, shared and register tensors, views and shape changes. A mixin of ``tilus.Script``."""

    # --- tensors ---------------------------------------------------------------------------------
    def global_view(self, ptr: Expr, *, dtype: Optional[DataType] = None, shape: Sequence[_Int],
                    strides: Optional[Sequence[_Int]] = None) -> GlobalTensor:
        """A global tensor over the array of a pointer parameter.

        Args:
            ptr: a pointer parameter of the kernel (annotated ``~dtype``).
            dtype: the element type; defaults to the pointer's element type.
            shape: the extents, Python ints or integer kernel scalars (e.g. parameters).
            strides: in elements, one per dim; default: row-major (C-contiguous).

        The views of a pointer parameter are its argument contract, checked at every launch:
        a view without ``strides`` reads a C-contiguous array, one with ``strides`` an array of
        its rank with exactly those strides, and the array must hold every element a view may
        reach (docs/gpu.md, "Argument checks").
        """
        loc = _here()
        if not isinstance(ptr, Expr):
            raise CompileError(f"{_where(loc)}global_view: ptr must be a pointer parameter of the kernel (~dtype), got "
                               f"{_describe(ptr)}")
        if not ptr.dtype.is_pointer():
            name = ptr.name if isinstance(ptr, _C.Var) else "x"
            raise CompileError(f"{_where(loc)}global_view: ptr must be a pointer, got {_describe(ptr)}, a scalar; a "
                               f"parameter that takes an array is a pointer: annotate it '{name}: ~{ptr.dtype!r}'")
        if dtype is None:
            if ptr.dtype.pointee.name == "void":
                raise CompileError(f"{_where(loc)}global_view: {_describe(ptr)} points to untyped memory: give the "
                                   "elements' type with dtype=")
            dtype = ptr.dtype.pointee
        name = ptr.name if isinstance(ptr, _C.Var) else "g"
        return GlobalTensor(_builder().global_view(ptr, _dtype(dtype, "global_view: dtype", loc),
                                                   _exprs(shape, "global_view: shape", loc),
                                                   _exprs(strides, "global_view: strides", loc), loc, name))

    def global_tensor(self, dtype: DataType, shape: Sequence[_Int], *, layout=None,
                      requires_clean: bool) -> GlobalTensor:
        """Global memory the runtime provides at every launch, as a row-major tensor shared by every
        block of the launch (NVIDIA Tilus's ``global_tensor``).

        Args:
            dtype: the element type.
            shape: Python ints or integer expressions of the kernel's parameters (the runtime sizes
                the memory from the arguments before the launch).
            layout: Tilus's global layout; only the default (row-major, ``None``) is supported.
            requires_clean: ``True``: all zeros at the kernel's first launch, and the kernel must
                leave it all zeros (the runtime clears it only when it allocates it; the CPU
                backend reports a launch that leaves it dirty). ``False``: its contents are
                undefined.

        The memory is kept per CUDA stream and grows when a launch needs more (docs/gpu.md,
        "Global tensors"): launches on one stream share it one after the other.
        """
        loc = _here()
        if layout is not None:
            raise CompileError(f"{_where(loc)}global_tensor: only the default row-major layout is supported, got "
                               f"layout={_describe(layout)}")
        return GlobalTensor(_builder().global_tensor(_dtype(dtype, "global_tensor: dtype", loc),
                                                     _exprs(shape, "global_tensor: shape", loc),
                                                     _bool(requires_clean, "global_tensor: requires_clean", loc),
                                                     loc, "g"))

    def shared_tensor(self, *, dtype: DataType, shape: Sequence[int]) -> SharedTensor:
        """A new shared-memory tensor of ``dtype`` and a static ``shape`` (positive Python ints).

        Its layout is row-major, or swizzled by layout inference for conflict-free access
        (docs/passes.md); its memory is planned by the shared-memory planner (see ``free_shared``).
        """
        loc = _here()
        return SharedTensor(_builder().shared_tensor(_dtype(dtype, "shared_tensor: dtype", loc),
                                                     _ints(shape, "shared_tensor: shape", loc), loc))

    def free_shared(self, t: SharedTensor) -> None:
        """Ends the lifetime of the shared tensor ``t``, so that the planner may reuse its memory."""
        loc = _here()
        _builder().free_shared(_tensor(t, "free_shared", loc, SharedTensor), loc)

    def register_tensor(self, *, dtype: DataType, shape: Sequence[int],
                        init: Union[_Scalar, Callable[..., _Scalar], None] = None) -> RegisterTensor:
        """A new register tensor of ``dtype`` and a static ``shape`` (positive Python ints).

        Args:
            init: None (uninitialized), a scalar (every element), or a function of the index
                variables giving each element, e.g. ``lambda i, j: i * 8 + j``.

        A register tensor holds at most 512 KiB per thread (CUDA's local memory per thread).
        """
        loc = _here()
        if init is not None and not callable(init):
            _scalar(init, "register_tensor: init (a scalar or a function of the indices)", loc)
        return RegisterTensor(_builder().register_tensor(_dtype(dtype, "register_tensor: dtype", loc),
                                                         _ints(shape, "register_tensor: shape", loc), init, loc))

    def declare(self, name: str, dtype: DataType, init: _Scalar) -> _C.Var:
        """A mutable scalar kernel variable named ``name`` of ``dtype``, initialized to ``init``.

        Assign to it with ``=`` anywhere in the body (in loops and branches too); names that are
        assigned in a loop or branch become such variables by themselves (docs/python.md).
        """
        loc = _here()
        if not isinstance(name, str) or not name.isidentifier():
            raise CompileError(f"{_where(loc)}declare: name must be an identifier (a str), got {_describe(name)}")
        return _declare_kernel_variable(_builder(), name, _dtype(dtype, "declare: dtype", loc),
                                        _scalar(init, "declare: init", loc), loc)

    # --- compute ---------------------------------------------------------------------------------
    def _into(self, out, t, loc, what):
        """`t` written into `out=` (when given)."""
        if out is None:
            return t
        try:
            _builder().assign_tensor(_tensor(out, f"{what}: out=", loc), t.t, loc)
        except CompileError as e:
            raise CompileError(f"{_where(loc)}{what}: out= {_describe(out)} cannot hold the result {_describe(t)} "
                               f"({str(e).rsplit(': ', 1)[-1]})") from None
        return out

    def cast(self, x: RegisterTensor, dtype: DataType) -> RegisterTensor:
        """The register tensor ``x`` converted elementwise to ``dtype`` (the same as ``x.to(dtype)``)."""
        loc = _here()
        return RegisterTensor(_builder().cast(_tensor(x, "cast", loc), _dtype(dtype, "cast: dtype", loc), loc))

    def view(self, x: RegisterTensor, *, dtype: Optional[DataType] = None,
             layout: Optional[_C.RegisterLayout] = None) -> RegisterTensor:
        """The registers of ``x`` reinterpreted, bit for bit, as ``dtype`` and/or ``layout``.

        A dtype of another width scales the last dim by the bit-width ratio; with ``layout``
        the result has that layout and its shape. The total bits must match.
        """
        loc = _here()
        dtype = None if dtype is None else _dtype(dtype, "view: dtype", loc)
        layout = _layout(layout, "view: layout", loc)
        return RegisterTensor(_builder().view(_tensor(x, "view", loc), dtype, layout, loc))

    def slice_shared(self, tensor: SharedTensor, offsets: Sequence[_Int], slice_dims: Sequence[int],
                     slice_shape: Sequence[int]) -> SharedTensor:
        """The view of the sub-tensor of ``tensor`` of shape ``slice_shape`` at ``offsets`` (one per dim
        of ``tensor``; kernel scalars allowed): view dim k is dim ``slice_dims[k]``, the other dims are
        fixed at their offset. E.g. the half of a [256, 64] tile a block of a cluster loads:
        ``self.slice_shared(s, [rank * 128, 0], [0, 1], [128, 64])``."""
        loc = _here()
        return SharedTensor(_builder().slice_shared(_tensor(tensor, "slice_shared: tensor", loc, SharedTensor),
                                                    _exprs(offsets, "slice_shared: offsets", loc),
                                                    _ints(slice_dims, "slice_shared: slice_dims", loc),
                                                    _ints(slice_shape, "slice_shared: slice_shape", loc), loc))

    def reshape_shared(self, tensor: SharedTensor, shape: Sequence[int]) -> SharedTensor:
        """The bytes of ``tensor``, a ``shared_tensor`` allocation (or a reshape of one), under
        ``shape`` with as many elements, both read row-major (NVIDIA Tilus's ``reshape_shared``): a
        view that shares its memory and swizzle. A slice (``s[i]``) or a tensor annotated with a
        non-row-major layout cannot be reshaped."""
        loc = _here()
        return SharedTensor(_builder().reshape_shared(_tensor(tensor, "reshape_shared: tensor", loc, SharedTensor),
                                                      _ints(shape, "reshape_shared: shape", loc), loc))

    def reshape(self, x: RegisterTensor, shape: Sequence[int]) -> RegisterTensor:
        """``x`` with a new static shape of the same element count (one -1 is inferred)."""
        loc = _here()
        return RegisterTensor(_builder().reshape(_tensor(x, "reshape", loc), _ints(shape, "reshape: shape", loc), loc))

    def squeeze(self, x: RegisterTensor, dim: Union[int, Sequence[int], None] = None, *,
                out: Optional[RegisterTensor] = None, dims: Union[int, Sequence[int], None] = None) -> RegisterTensor:
        """``x`` without its dims ``dim`` (each of extent 1; negative dims count from the end); NVIDIA
        Tilus's ``dim=`` keyword, or positional; ``dims=`` is the same."""
        loc = _here()
        d = _one_of(dim, dims, "squeeze", loc)
        t = RegisterTensor(_builder().squeeze(_tensor(x, "squeeze", loc), _ints(d, "squeeze: dim", loc), loc))
        return self._into(out, t, loc, "squeeze")

    def unsqueeze(self, x: RegisterTensor, dim: Union[int, Sequence[int], None] = None, *,
                  out: Optional[RegisterTensor] = None, dims: Union[int, Sequence[int], None] = None) -> RegisterTensor:
        """``x`` with dims of extent 1 inserted at ``dim`` (dims of the result; negative count from the
        end); NVIDIA Tilus's ``dim=`` keyword, or positional; ``dims=`` is the same."""
        loc = _here()
        d = _one_of(dim, dims, "unsqueeze", loc)
        t = RegisterTensor(_builder().unsqueeze(_tensor(x, "unsqueeze", loc), _ints(d, "unsqueeze: dim", loc), loc))
        return self._into(out, t, loc, "unsqueeze")

    def transpose(self, x: RegisterTensor) -> RegisterTensor:
        """The transpose of the rank-2 register tensor ``x`` (the same as ``x.T``)."""
        loc = _here()
        return RegisterTensor(_builder().transpose(_tensor(x, "transpose", loc), loc))

    def repeat(self, x: RegisterTensor, repeats: Sequence[int]) -> RegisterTensor:
        """``x`` tiled ``repeats`` times along each dim (right-aligned, like ``numpy.tile``)."""
        loc = _here()
        return RegisterTensor(_builder().repeat(_tensor(x, "repeat", loc), _ints(repeats, "repeat: repeats", loc), loc))

    def repeat_interleave(self, x: RegisterTensor, repeats: Sequence[int], *,
                          out: Optional[RegisterTensor] = None) -> RegisterTensor:
        """Each element of ``x`` repeated ``repeats[d]`` times along each dim d, in place (like
        ``torch.repeat_interleave``; ``[1, 2]`` by ``[2]`` is ``[1, 1, 2, 2]``). ``repeats`` is
        right-aligned with the dims (missing leading ones are 1; extra ones add leading dims).
        With ``out``, the result is written into it (returned)."""
        loc = _here()
        t = _tensor(x, "repeat_interleave", loc)
        repeats = _ints(repeats, "repeat_interleave: repeats", loc)
        if any(r < 1 for r in repeats):
            raise CompileError(f"{_where(loc)}repeat_interleave: repeats must be >= 1, got {repeats}")
        shape = list(t.shape)
        if len(repeats) > len(shape):
            shape = [1] * (len(repeats) - len(shape)) + shape
            t = _builder().reshape(t, shape, loc)
        repeats = [1] * (len(shape) - len(repeats)) + repeats
        if all(r == 1 for r in repeats):
            return self._into(out, RegisterTensor(t), loc, "repeat_interleave")
        b = _builder()
        t = b.unsqueeze(t, [2 * d + 1 for d in range(len(shape))], loc)          # [d0, 1, d1, 1, ...]
        t = b.repeat(t, [v for r in repeats for v in (1, r)], loc)              # [d0, r0, d1, r1, ...]
        t = b.reshape(t, [d * r for d, r in zip(shape, repeats)], loc)          # [d0 * r0, d1 * r1, ...]
        return self._into(out, RegisterTensor(t), loc, "repeat_interleave")

    def flatten(self, x: RegisterTensor) -> RegisterTensor:
        """``x`` as a rank-1 tensor of all its elements, row-major (``reshape(x, [-1])``)."""
        loc = _here()
        return RegisterTensor(_builder().reshape(_tensor(x, "flatten", loc), [-1], loc))

    def assign(self, dst: RegisterTensor, src: RegisterTensor) -> None:
        """Writes the register tensor ``src`` into the register tensor ``dst`` (same dtype and shape)."""
        loc = _here()
        d, t = _tensor(dst, "assign: dst", loc), _tensor(src, "assign: src", loc)
        if d.dtype != t.dtype:
            raise CompileError(f"{_where(loc)}assign: dst and src must have one dtype, got {_describe(dst)} and "
                               f"{_describe(src)}")
        _builder().assign_tensor(d, t, loc)
