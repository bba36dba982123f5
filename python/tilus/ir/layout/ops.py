"""``tilus.ir.layout.ops``: the register layout functions under NVIDIA Tilus's import path
(``local``, ``spatial``, ``column_local``, ``column_spatial``, ``replicated``: tilus's own).
``concat``, ``reduce`` and ``shared_row_major_swizzle`` exist so that imports of them succeed;
calling one is a CompileError (docs/tilus-compatibility.md)."""
from ... import CompileError, column_local, column_spatial, local, replicated, spatial


def _unsupported(name, why):
    def fn(*args, **kw):
        raise CompileError(f"tilus.ir.layout.ops.{name} is not supported by tilus yet ({why}); see "
                           "docs/tilus-compatibility.md")

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Not supported by tilus yet ({why}): calling it is a CompileError."
    return fn


concat = _unsupported("concat", "register layouts are combined with `*` and inferred by the compiler")
reduce = _unsupported("reduce", "reductions infer their layouts; annotate_layout fixes one where needed")
shared_row_major_swizzle = _unsupported("shared_row_major_swizzle", "shared layouts and their swizzles are chosen "
                                                                    "by layout inference")

__all__ = ["column_local", "column_spatial", "concat", "local", "reduce", "replicated", "shared_row_major_swizzle",
           "spatial"]
