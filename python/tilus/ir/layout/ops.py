"""``tilus.ir.layout.ops``: the register layout functions under NVIDIA Tilus's import path
(``local``, ``spatial``, ``column_local``, ``column_spatial``, ``replicated``, ``reduce``,
``concat``, ``permute``, ``reshape``; tilus's own layouts). ``shared_row_major_swizzle`` exists
so that imports of it succeed; calling it is a CompileError (docs/tilus-compatibility.md)."""
from ... import CompileError, replicated
from ...layouts import column_local, column_spatial, concat, local, permute, reduce, reshape, spatial


def _unsupported(name, why):
    def fn(*args, **kw):
        raise CompileError(f"tilus.ir.layout.ops.{name} is not supported by tilus yet ({why}); see "
                           "docs/tilus-compatibility.md")

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Not supported by tilus yet ({why}): calling it is a CompileError."
    return fn


shared_row_major_swizzle = _unsupported("shared_row_major_swizzle", "shared layouts and their swizzles are chosen "
                                                                    "by layout inference")

__all__ = ["column_local", "column_spatial", "concat", "local", "permute", "reduce", "replicated", "reshape",
           "shared_row_major_swizzle", "spatial"]
