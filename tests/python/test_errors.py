"""Bad input gives a tilus error naming the user's file and line (and the shapes/dtypes
involved), never a crash or a C++ stack trace: one test per kind of mistake."""
import inspect
import re

import numpy as np
import pytest

import tilus
from tilus import float16, float32, int32

from conftest import HAS_CPU


def line_of(marker):
    src = inspect.getsource(inspect.getmodule(line_of)).splitlines()
    for i, text in enumerate(src, 1):
        if marker in text and "line_of(" not in text:
            return i
    raise AssertionError(marker)


def expect_error(script, marker, *fragments, exc=tilus.CompileError, args=None):
    with pytest.raises(exc) as info:
        if args is None:
            tilus.trace(script)
        else:
            script(*args)
    msg = str(info.value)
    assert f"test_errors.py:{line_of(marker)}" in msg, msg
    for f in fragments:
        assert re.search(f, msg), (f, msg)
    assert "Traceback" not in msg and ".cpp" not in msg, msg


class Base(tilus.Script):
    def prologue(self, n):
        self.attrs.blocks = [1]
        self.attrs.warps = 4


class ShapeMismatch(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        a = self.register_tensor(dtype=float32, shape=[16, 32], init=0.0)
        b = self.register_tensor(dtype=float32, shape=[8, 32], init=0.0)
        c = a + b  # E-SHAPE


class DotShapes(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        a = self.register_tensor(dtype=float16, shape=[16, 32], init=0.0)
        b = self.register_tensor(dtype=float16, shape=[16, 32], init=0.0)
        self.dot(a, b)  # E-DOT


class OffsetsArity(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        g = self.global_view(x, shape=[n, n])
        self.load_global(g, offsets=[0], shape=[4, 4])  # E-OFFSETS


class StoreDtype(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        g = self.global_view(x, shape=[n])
        s = self.shared_tensor(dtype=float16, shape=[32])
        self.store_shared(s, self.register_tensor(dtype=float32, shape=[32], init=0.0))  # E-STORE-DTYPE


class CopyAsyncToRegisters(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        g = self.global_view(x, shape=[n])
        r = self.register_tensor(dtype=float32, shape=[32], init=0.0)
        self.copy_async(g, r, offsets=[0])  # E-COPY-ASYNC


class BadEvict(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        g = self.global_view(x, shape=[n])
        s = self.shared_tensor(dtype=float32, shape=[32])
        self.copy_async(g, s, offsets=[0], evict="evict_sometimes")  # E-EVICT


class UnknownAnnotation(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        g = self.global_view(x, shape=[n])
        s = self.shared_tensor(dtype=float32, shape=[32])
        self.copy(g[0:32], s, annotations={"use_magic": "1"})  # E-ANNOTATION


class SharedShapeNotStatic(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        self.shared_tensor(dtype=float32, shape=[n])  # E-SHARED-SHAPE


class WarpsNotInt(tilus.Script):
    def __call__(self, n: int32, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = n  # E-WARPS


class UnknownAttr(tilus.Script):
    def __call__(self, n: int32, x: ~float32):
        self.attrs.threads = 128  # E-ATTR


class TensorAsCondition(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        r = self.register_tensor(dtype=float32, shape=[4], init=0.0)
        if r > 0:  # E-TENSOR-COND
            pass


class SymbolicAnd(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        if n > 0 and n < 10:  # E-AND
            pass


class TranscendentalOfInts(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        self.exp(self.register_tensor(dtype=int32, shape=[4], init=1))  # E-EXP


class ReduceBadDim(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        self.sum(self.register_tensor(dtype=float32, shape=[4, 4], init=1.0), dim=2)  # E-REDUCE


class FloatRange(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        for i in range(0.5):  # E-RANGE
            pass


class MissingAnnotation(tilus.Script):
    def __call__(self, n, x: ~float32):  # E-NOANNOT
        pass


class WrongBinaryDtype(Base):
    def __call__(self, n: int32, x: ~float32):
        self.prologue(n)
        a = self.register_tensor(dtype=float32, shape=[4], init=0.0)
        b = self.register_tensor(dtype=int32, shape=[4], init=0)
        a << b  # E-SHIFT


CASES = [
    (ShapeMismatch, "E-SHAPE", r"\[16, 32\]", r"\[8, 32\]"),
    (DotShapes, "E-DOT", "dot"),
    (OffsetsArity, "E-OFFSETS", "load_global", "offsets"),
    (StoreDtype, "E-STORE-DTYPE", "store_shared", "float16", "float32"),
    (CopyAsyncToRegisters, "E-COPY-ASYNC", "copy_async", "shared tensor"),
    (BadEvict, "E-EVICT", "evict_sometimes"),
    (UnknownAnnotation, "E-ANNOTATION", "use_magic"),
    (SharedShapeNotStatic, "E-SHARED-SHAPE", "Python ints"),
    (WarpsNotInt, "E-WARPS", "warps"),
    (UnknownAttr, "E-ATTR", "threads"),
    (TensorAsCondition, "E-TENSOR-COND", "condition"),
    (TranscendentalOfInts, "E-EXP", "exp", "int32"),
    (ReduceBadDim, "E-REDUCE", "sum"),
    (FloatRange, "E-RANGE", "range"),
    (WrongBinaryDtype, "E-SHIFT", "float32"),
]


@pytest.mark.parametrize("cls,marker,frags", [(c, m, f) for c, m, *f in CASES], ids=[c[1] for c in CASES])
def test_trace_errors_name_the_users_line(cls, marker, frags):
    expect_error(cls(), marker, *frags)


def test_python_and_on_symbolic_values():
    with pytest.raises(tilus.CompileError, match="only known when the kernel runs"):
        tilus.trace(SymbolicAnd())


def test_missing_annotation():
    expect_error(MissingAnnotation(), "E-NOANNOT", "parameter 'n' needs an annotation")


class Ok(tilus.Script):
    def __call__(self, n: int32, x: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 32)]
        self.attrs.warps = 1
        g = self.global_view(x, shape=[n])
        self.store_global(g, self.load_global(g, offsets=[self.blockIdx.x * 32], shape=[32]) + 1.0,
                          offsets=[self.blockIdx.x * 32])


@pytest.mark.skipif(not HAS_CPU, reason="no CPU backend")
def test_launch_errors_name_the_parameter():
    k = Ok()
    with pytest.raises(tilus.ArgumentError, match="takes 2 arguments"):
        k(4)
    with pytest.raises(tilus.ArgumentError, match=r"'x'.*points to float64 data, the kernel reads float32"):
        k(4, np.zeros(4))
    with pytest.raises(tilus.ArgumentError, match=r"'n'.*expected an int"):
        k(4.5, np.zeros(4, dtype=np.float32))
    with pytest.raises(tilus.ArgumentError, match=r"'x'.*expected a tensor"):
        k(4, [1.0, 2.0])
    with pytest.raises(tilus.ArgumentError, match="has no parameter 'y'"):
        k(4, y=np.zeros(4, dtype=np.float32))
    with pytest.raises(tilus.ArgumentError, match=r"out of the range of int32"):
        k(1 << 40, np.zeros(4, dtype=np.float32))


def test_a_script_file_edited_after_import_is_an_error_not_another_function(tmp_path, monkeypatch):
    """tracing reads a Script's source from its file: edited after the import (lines added above
    the class), the lines there are another function. That is a clear error, not a trace of the
    wrong code (it was a TypeError naming whatever function the lines held)."""
    import importlib
    import sys
    body = ("import tilus\nfrom tilus import float32, int32\n\n"
            "def helper(a, b):\n    return a + b\n\n\n"
            "class Edited(tilus.Script):\n"
            "    def __call__(self, n: int32, x: ~float32):\n"
            "        self.attrs.blocks = [1]\n        self.attrs.warps = 1\n"
            "        t = self.load_global(self.global_view(x, shape=[n]), offsets=[0], shape=[32])\n"
            "        self.store_global(self.global_view(x, shape=[n]), t, offsets=[0])\n")
    f = tmp_path / "edited_script_mod.py"
    f.write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("edited_script_mod")
    try:
        f.write_text(body.replace("def helper(a, b):", "\n\n\n\ndef helper(a, b):"))
        with pytest.raises(tilus.CompileError, match=r"edited_script_mod\.py:\d+: the source of Edited.__call__ there is "
                                                      r"not the code Python loaded \(found `def helper\(a, b\)`\)"):
            tilus.trace(mod.Edited())
    finally:
        sys.modules.pop("edited_script_mod", None)
