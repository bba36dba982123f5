"""Bad input, tried as a new user would: every mistake is a tilus error (CompileError while
tracing, ArgumentError at launch) that names the instruction or construct and, for tracing,
the user's file:line; nothing crashes, hangs or silently computes something else.

The cases are tables, one row a mistake, each row on one line whose text the error must point
at (the row's id is its marker):

* METHOD_CASES: a wrong argument (type, shape, dtype, count) to each Script method, the tensor
  operators and the scalar functions, called from the body of one kernel.
* CONSTRUCT_CASES: kernel bodies Python accepts but a traced kernel cannot run (each its own
  small Script below, the marker a comment on the offending line).
* LAUNCH_CASES: launch-time mistakes (argument counts, types, keywords).

The valid programs that used to be refused, and the discarded-result warning, are at the end
(run on the CPU backend against numpy)."""
import contextlib
import importlib.util
import inspect
import math
import re
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import tilus
from tilus import float16, float32, int8, int32

from conftest import HAS_CPU

needs_cpu = pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
FILE = "test_bad_input.py"
SOURCE = inspect.getsource(sys.modules[__name__]).splitlines()


def line_of(marker):
    """The line of this file where `marker` stands (the first one that is not a line_of call)."""
    for i, text in enumerate(SOURCE, 1):
        if marker in text and "line_of(" not in text:
            return i
    raise AssertionError(f"no line with {marker!r}")


@contextlib.contextmanager
def deadline(seconds=60):
    """Fails a case that does not finish in time (a hang) instead of blocking the suite."""
    def expire(signum, frame):
        raise TimeoutError(f"did not finish in {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def check_message(msg, fragments, line=None):
    if line is not None:
        assert f"{FILE}:{line}:" in msg, (line, msg)
    for f in fragments:
        assert re.search(f, msg), (f, msg)
    for dump in ("Traceback", ".cpp", "incompatible function arguments", "Unable to cast", "tilus._C.Builder"):
        assert dump not in msg, msg


def expect(run, exc, line, fragments):
    with deadline(), warnings.catch_warnings():
        warnings.simplefilter("ignore", tilus.TilusWarning)
        with pytest.raises(exc) as info:
            run()
    assert type(info.value) is exc, info.value
    check_message(str(info.value), fragments, line)
    return info.value


# --- Script methods ------------------------------------------------------------------------------

class Values:
    """Tensors and scalars of every kind for the method cases (built by a helper: plain Python)."""

    def __init__(self, k, n, x):
        self.n, self.x = n, x
        self.g = k.global_view(x, shape=[n, n])      # global float32[n, n]
        self.g1 = k.global_view(x, shape=[n])        # global float32[n]
        self.s = k.shared_tensor(dtype=float32, shape=[16, 16])
        self.h_s = k.shared_tensor(dtype=float16, shape=[16, 16])
        self.r = k.register_tensor(dtype=float32, shape=[16, 16], init=0.0)
        self.r8 = k.register_tensor(dtype=float32, shape=[8, 16], init=0.0)
        self.h = k.register_tensor(dtype=float16, shape=[16, 16], init=0.0)
        self.i = k.register_tensor(dtype=int32, shape=[16], init=0)
        self.r3 = k.register_tensor(dtype=float32, shape=[2, 4, 8], init=0.0)
        self.b = self.i > 0


class Call(tilus.Script):
    def __init__(self, case):
        super().__init__()
        self.case = case

    def __call__(self, n: int32, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        v = Values(self, n, x)
        self.case(self, v)


E = tilus.CompileError
# (id, case, fragments the message must contain); the id is the marker of the row's line.
METHOD_CASES = [
    ("gv-ptr-list", lambda k, v: k.global_view([1, 2], shape=[4]), ["global_view", "pointer parameter", "list"]),
    ("gv-ptr-int", lambda k, v: k.global_view(3, shape=[4]), ["global_view", "pointer parameter", "int 3"]),
    ("gv-dtype-str", lambda k, v: k.global_view(v.x, dtype="float32", shape=[4]), ["global_view", "data type", "'float32'"]),
    ("gv-shape-float", lambda k, v: k.global_view(v.x, dtype=float32, shape=4.0), ["global_view", "shape", "float 4.0"]),
    ("gv-shape-elem", lambda k, v: k.global_view(v.x, dtype=float32, shape=[2.5]), ["global_view", "shape", "integers", "2.5"]),
    ("gv-strides-str", lambda k, v: k.global_view(v.x, dtype=float32, shape=[4], strides="1"), ["global_view", "strides", "list"]),
    ("gv-no-shape", lambda k, v: k.global_view(v.x), ["global_view", "shape"]),
    ("st-dtype-str", lambda k, v: k.shared_tensor(dtype="float16", shape=[4]), ["shared_tensor", "data type", r"tilus\.float16"]),
    ("st-dtype-np", lambda k, v: k.shared_tensor(dtype=np.float16, shape=[4]), ["shared_tensor", "data type"]),
    ("st-shape-sym", lambda k, v: k.shared_tensor(dtype=float32, shape=[v.n]), ["shared_tensor", "Python ints", "int32"]),
    ("st-shape-neg", lambda k, v: k.shared_tensor(dtype=float32, shape=[-4]), ["shared_tensor", r"\[-4\]", "positive"]),
    ("st-shape-str", lambda k, v: k.shared_tensor(dtype=float32, shape="16"), ["shared_tensor", "shape", "list", "str"]),
    ("st-positional", lambda k, v: k.shared_tensor(float32, [4]), ["shared_tensor", "positional"]),
    ("rt-shape-strs", lambda k, v: k.register_tensor(dtype=float32, shape=["4"]), ["register_tensor", "Python ints", "'4'"]),
    ("rt-shape-float", lambda k, v: k.register_tensor(dtype=float32, shape=4.0), ["register_tensor", "shape", "float 4.0"]),
    ("rt-shape-huge", lambda k, v: k.register_tensor(dtype=float32, shape=[1 << 40]), ["register_tensor", "larger than 2147483647"]),
    ("rt-shape-64bit", lambda k, v: k.register_tensor(dtype=float32, shape=[1 << 64]), ["register_tensor: shape", "64 bits"]),
    ("rt-shape-zero", lambda k, v: k.register_tensor(dtype=float32, shape=[0, 4]), ["register_tensor", r"\[0, 4\]"]),
    ("rt-init-str", lambda k, v: k.register_tensor(dtype=float32, shape=[4], init="0"), ["register_tensor", "init", "str"]),
    ("rt-init-list", lambda k, v: k.register_tensor(dtype=float32, shape=[2], init=[1, 2]), ["register_tensor", "init", "list"]),
    ("rt-dtype-none", lambda k, v: k.register_tensor(dtype=None, shape=[4]), ["register_tensor", "data type", "NoneType"]),
    ("rt-unknown-kw", lambda k, v: k.register_tensor(dtype=float32, shape=[4], layout=None), ["register_tensor", "unexpected keyword", "layout"]),
    ("fs-register", lambda k, v: k.free_shared(v.r), ["free_shared", "shared tensor", r"register float32\[16, 16\]"]),
    ("lg-src-shared", lambda k, v: k.load_global(v.s, offsets=[0, 0], shape=[4, 4]), ["load_global", "global tensor", r"shared float32\[16, 16\]"]),
    ("lg-offsets-str", lambda k, v: k.load_global(v.g, offsets="00", shape=[4, 4]), ["offsets", "list", "str"]),
    ("lg-other-str", lambda k, v: k.load_global(v.g, offsets=[0, 0], shape=[4, 4], other="0"), ["load_global: other", "scalar", "str '0'"]),
    ("lg-other-tensor", lambda k, v: k.load_global(v.g, offsets=[0, 0], shape=[4, 4], other=v.r), ["load_global: other", "scalar", r"register float32\[16, 16\]"]),
    ("gelu-approximate", lambda k, v: k.gelu(v.r, approximate="exact"), ["gelu", "approximate", '"none" or "tanh"', '"exact"']),
    ("gelu-int", lambda k, v: k.gelu(v.i, approximate="tanh"), ["gelu", "floating-point", r"register int32\[16\]"]),
    ("lg-offsets-float", lambda k, v: k.load_global(v.g, offsets=[0.5, 0], shape=[4, 4]), ["offsets", "integers", "0.5"]),
    ("lg-offsets-arity", lambda k, v: k.load_global(v.g, offsets=[0], shape=[4, 4]), ["load_global", "offsets"]),
    ("lg-offset-64bit", lambda k, v: k.load_global(v.g, offsets=[0, 1 << 63], shape=[4, 4]), ["load_global: offsets", "64 bits"]),
    ("lg-no-shape", lambda k, v: k.load_global(v.g, offsets=[0, 0]), ["load_global", "shape= is required"]),
    ("lg-shape-sym", lambda k, v: k.load_global(v.g, offsets=[0, 0], shape=[v.n, 4]), ["shape", "Python ints", "n"]),
    ("lg-dims-range", lambda k, v: k.load_global(v.g, offsets=[0, 0], shape=[4, 4], dims=[0, 5]), ["load_global", "dims"]),
    ("lg-dims-twice", lambda k, v: k.load_global(v.g, offsets=[0, 0], shape=[4, 4], dims=[1, -1]), ["load_global", "appears twice"]),
    ("lg-out-shape", lambda k, v: k.load_global(v.g, offsets=[0, 0], shape=[4, 4], out=v.r), ["load_global", "out=", r"\[4, 4\]", r"\[16, 16\]", "shapes differ"]),
    ("lg-out-shared", lambda k, v: k.load_global(v.g, offsets=[0, 0], shape=[16, 16], out=v.s), ["load_global: out=", "register tensor", "shared"]),
    ("sg-dst-register", lambda k, v: k.store_global(v.r, v.r, offsets=[0, 0]), ["store_global", "global tensor", "register"]),
    ("sg-src-shared", lambda k, v: k.store_global(v.g, v.s, offsets=[0, 0]), ["store_global", "register tensor", "shared"]),
    ("sg-offsets-arity", lambda k, v: k.store_global(v.g, v.r, offsets=[0, 0, 0]), ["store_global", "offsets"]),
    ("sg-no-offsets", lambda k, v: k.store_global(v.g, v.r), ["store_global", "missing", "offsets"]),
    ("ls-src-global", lambda k, v: k.load_shared(v.g), ["load_shared", "shared tensor", "global"]),
    ("ls-out-dtype", lambda k, v: k.load_shared(v.h_s, out=v.r), ["load_shared", "out=", "float16", "float32"]),
    ("ss-dst-register", lambda k, v: k.store_shared(v.r, v.r), ["store_shared", "shared tensor", "register"]),
    ("ss-shape", lambda k, v: k.store_shared(v.s, v.r8), ["store_shared", r"\[8, 16\]", r"\[16, 16\]"]),
    ("ca-evict-int", lambda k, v: k.copy_async(v.g, v.s, offsets=[0, 0], evict=1), ["copy_async", "evict", "str", "int 1"]),
    ("ca-check-str", lambda k, v: k.copy_async(v.g, v.s, offsets=[0, 0], check_bounds="False"), ["copy_async", "check_bounds", "True or False", "'False'"]),
    ("ca-check-int", lambda k, v: k.copy_async(v.g, v.s, offsets=[0, 0], check_bounds=0), ["copy_async", "check_bounds", "True or False"]),
    ("ca-src-register", lambda k, v: k.copy_async(v.r, v.s, offsets=[0, 0]), ["copy_async", "global tensor", "register"]),
    ("ca-dims-twice", lambda k, v: k.copy_async(v.g, v.s, offsets=[0, 0], dims=[0, 0]), ["copy_async", "appears twice"]),
    ("ca-dtype", lambda k, v: k.copy_async(v.g, v.h_s, offsets=[0, 0]), ["copy_async", "float32", "float16"]),
    ("cawg-str", lambda k, v: k.copy_async_wait_group("2"), ["copy_async_wait_group", "a Python int", "'2'"]),
    ("cawg-float", lambda k, v: k.copy_async_wait_group(1.5), ["copy_async_wait_group", "1.5"]),
    ("cawg-missing", lambda k, v: k.copy_async_wait_group(), ["copy_async_wait_group", "missing", "'n'"]),
    ("cacg-extra", lambda k, v: k.copy_async_commit_group(1), ["copy_async_commit_group", "positional argument"]),
    ("cp-src-int", lambda k, v: k.copy(3, v.s), ["copy", "tensor or a tensor region", "int"]),
    ("cp-annotations-list", lambda k, v: k.copy(v.g[0:16, 0:16], v.s, annotations=["x"]), ["copy", "annotations", "dict", "list"]),
    ("cp-width-str", lambda k, v: k.copy(v.g[0:16, 0:16], v.s, coalesced_width="4"), ["copy", "coalesced_width", "'4'"]),
    ("cp-tma-str", lambda k, v: k.copy(v.g[0:16, 0:16], v.s, disable_tma="no"), ["copy", "disable_tma", "True or False"]),
    ("cp-evict-int", lambda k, v: k.copy(v.g[0:16, 0:16], v.s, eviction_policy=2), ["copy", "eviction_policy", "str"]),
    ("cp-layout-str", lambda k, v: k.copy(v.g[0:16, 0:16], v.s, loop_layout="row"), ["copy", "loop_layout", "register layout"]),
    ("cp-dtype", lambda k, v: k.copy(v.g[0:16, 0:16], v.h_s), ["copy", "float32", "float16"]),
    ("cp-slice-step", lambda k, v: k.copy(v.g[0:16:2, 0:16], v.s), ["slices", "step"]),
    ("cp-too-many-idx", lambda k, v: k.copy(v.g[0, 0, 0], v.s), ["3 indices", r"global float32\[n, n\]"]),
    ("ac-annotations-str", lambda k, v: k.async_copy(v.g[0:16, 0:16], v.s, annotations="x"), ["async_copy", "annotations", "dict"]),
    ("ac-unknown-kw", lambda k, v: k.async_copy(v.g[0:16, 0:16], v.s, evict="evict_first"), ["async_copy", "unexpected keyword", "evict"]),
    ("dot-shared", lambda k, v: k.dot(v.h_s, v.h), ["dot", "register tensor", r"shared float16\[16, 16\]"]),
    ("dot-global", lambda k, v: k.dot(v.h, v.g), ["dot", "register tensor", "global"]),
    ("dot-acc-str", lambda k, v: k.dot(v.h, v.h, acc_dtype="float32"), ["dot", "acc_dtype", "data type"]),
    ("dot-c-twice", lambda k, v: k.dot(v.h, v.h, v.r, c=v.r), ["dot", "multiple values", "'c'"]),
    ("dot-c-dtype", lambda k, v: k.dot(v.h, v.h, v.i), ["dot", r"int32\[16\]"]),
    ("dot-one-arg", lambda k, v: k.dot(v.h), ["dot", "missing", "'b'"]),
    ("dot-shapes", lambda k, v: k.dot(v.h, k.cast(v.r8, float16)), ["dot", r"\[16, 16\]", r"\[8, 16\]"]),
    ("cast-str", lambda k, v: k.cast(v.r, "float16"), ["cast", "data type", r"tilus\.float16"]),
    ("cast-shared", lambda k, v: k.cast(v.s, float16), ["cast", "register tensor", "shared"]),
    ("view-dtype-str", lambda k, v: k.view(v.r, dtype="int32"), ["view", "data type"]),
    ("view-layout-str", lambda k, v: k.view(v.r, layout="row"), ["view", "layout", "register layout"]),
    ("view-bits", lambda k, v: k.view(k.register_tensor(dtype=int8, shape=[3], init=0), dtype=int32), ["view", "int8", "int32", "24 bits"]),
    ("reshape-str", lambda k, v: k.reshape(v.r, "16,16"), ["reshape", "shape", "list"]),
    ("reshape-count", lambda k, v: k.reshape(v.r, [15, 16]), ["reshape", r"\[15, 16\]", r"\[16, 16\]"]),
    ("squeeze-str", lambda k, v: k.squeeze(v.r, "0"), ["squeeze", "dim", "list"]),
    ("squeeze-not-one", lambda k, v: k.squeeze(v.r, [0]), ["squeeze", r"\[16, 16\]"]),
    ("unsqueeze-float", lambda k, v: k.unsqueeze(v.r, [0.0]), ["unsqueeze", "Python ints", "0.0"]),
    ("transpose-rank3", lambda k, v: k.transpose(v.r3), ["transpose", r"\[2, 4, 8\]"]),
    ("transpose-shared", lambda k, v: k.transpose(v.s), ["transpose", "register tensor", "shared"]),
    ("repeat-str", lambda k, v: k.repeat(v.r, "2"), ["repeat", "repeats", "list"]),
    ("where-x-str", lambda k, v: k.where(v.b, "1", 0), ["where", "x", "str"]),
    ("where-cond-shared", lambda k, v: k.where(v.s, 1.0, 0.0), ["where", "register tensor", "shared"]),
    ("where-cond-float", lambda k, v: k.where(v.r, 1.0, 0.0), ["where", "float32"]),
    ("clip-lo-str", lambda k, v: k.clip(v.r, "0", 1.0), ["clip", "lo", "str"]),
    ("maximum-str", lambda k, v: k.maximum(v.r, "1"), ["maximum", "register tensors or scalars", "str"]),
    ("minimum-shared", lambda k, v: k.minimum(v.s, 1.0), ["minimum", "register tensors or scalars", "shared"]),
    ("maximum-shapes", lambda k, v: k.maximum(v.r, v.r8), ["max", r"\[16, 16\]", r"\[8, 16\]"]),
    ("sum-dim-str", lambda k, v: k.sum(v.r, dim="1"), ["sum: dims", "str '1'"]),
    ("sum-dim-float", lambda k, v: k.sum(v.r, dim=1.0), ["dims", "float 1.0"]),
    ("sum-dim-both", lambda k, v: k.sum(v.r, dim=1, dims=[0]), ["sum", "dim= or dims="]),
    ("sum-dim-range", lambda k, v: k.sum(v.r, dim=2), ["sum", "dim 2", "out of range", r"register float32\[16, 16\]"]),
    ("sum-dim-neg-range", lambda k, v: k.sum(v.r, dim=-3), ["sum", "dim -3 is out of range", "-1 to -2"]),
    ("scan-op", lambda k, v: k.scan(v.r, dim=1, op="sum"), ["scan: op must be one of add, mul", "got 'sum'"]),
    ("scatter-global-dst", lambda k, v: k.store_global_scatter(v.r, dim=0, indices=v.r, values=v.r),
     ["store_global_scatter: dst", "register float32"]),
    ("scatter-shared-dim", lambda k, v: k.store_shared_scatter(k.shared_tensor(dtype=float32, shape=[16, 16]), dim="0",
                                                              indices=v.r, values=v.r),
     ["store_shared_scatter: dim", "str '0'"]),
    ("scan-op-type", lambda k, v: k.scan(v.r, dim=1, op=1), ["scan: op must be a str", "int 1"]),
    ("scan-dim-str", lambda k, v: k.scan(v.r, dim="1", op="add"), ["scan: dim", "str '1'"]),
    ("scan-xor-float", lambda k, v: k.scan(v.r, dim=0, op="xor"), ["scan", "'xor' needs integer or bool", "float32"]),
    ("cumsum-dim-range", lambda k, v: k.cumsum(v.r, dim=2), ["scan", "dim 2 is out of range", r"float32\[16, 16\]"]),
    ("cumprod-exclusive", lambda k, v: k.cumprod(v.r, dim=0, exclusive="yes"), ["cumprod: exclusive", "str 'yes'"]),
    ("sum-keepdim-str", lambda k, v: k.sum(v.r, dim=1, keepdim="yes"), ["sum", "keepdim", "True or False"]),
    ("max-dims-twice", lambda k, v: k.max(v.r, dims=[1, -1]), ["max", "appears twice"]),
    ("min-shared", lambda k, v: k.min(v.s, dim=0), ["min", "register tensor", "shared"]),
    ("any-positional", lambda k, v: k.any(v.b, 0), ["any", "positional"]),
    ("all-float", lambda k, v: k.all(v.r, dim=0), ["all", "float32"]),
    ("exp-shared", lambda k, v: k.exp(v.s), ["exp", "register tensor", "shared"]),
    ("sqrt-str", lambda k, v: k.sqrt("x"), ["sqrt", "register tensor", "str"]),
    ("sqrt-int", lambda k, v: k.sqrt(v.i), ["sqrt", "int32"]),
    ("abs-two-args", lambda k, v: k.abs(v.r, v.r), ["abs", "positional argument"]),
    ("sync-arg", lambda k, v: k.sync(1), ["sync", "positional argument"]),
    ("printf-fmt-int", lambda k, v: k.printf(3), ["printf", "format", "str"]),
    ("printf-tensor", lambda k, v: k.printf("%f", v.r), ["printf", "scalar", r"register float32\[16, 16\]"]),
    ("assume-tensor", lambda k, v: k.assume(v.b), ["assume", "scalar", "register bool"]),
    ("annotate-none", lambda k, v: k.annotate_layout(v.r, None), ["annotate_layout", "register layout", "NoneType"]),
    ("single-thread-arg", lambda k, v: k.single_thread(0, 1), ["single_thread", "positional argument"]),
    ("single-thread-neg", lambda k, v: k.single_thread(-2), ["single_thread", r"-1 \(any\)", "-2"]),
    ("divmod-tensor", lambda k, v: k.fast_divmod(v.r, 2), ["fast_divmod", "scalar", r"register float32\[16, 16\]"]),
    ("static-assert-tensor", lambda k, v: k.static_assert(v.b, "m"), ["static_assert", "Python bool", "register bool"]),
    ("repeat-interleave-zero", lambda k, v: k.repeat_interleave(v.r, [0, 2]), ["repeat_interleave", ">= 1"]),
    ("flatten-shared", lambda k, v: k.flatten(v.s), ["flatten", "register tensor", "shared"]),
    ("reshape-shared-count", lambda k, v: k.reshape_shared(v.s, [16, 15]),
     ["reshape_shared", r"shared float32\[16, 16\] has 256 elements", r"\[16, 15\] has 240"]),
    ("slice-shared-outside", lambda k, v: k.slice_shared(v.s, [12, 0], [0, 1], [8, 16]),
     ["slice_shared", r"dim 0 takes \[12, 20\)", r"shared float32\[16, 16\]"]),
    ("gt-shape-block", lambda k, v: k.global_tensor(int32, [k.blockIdx.x], requires_clean=True),
     ["global_tensor", r"int32", "only the kernel's parameters", "blockIdx.x"]),
    ("gt-layout", lambda k, v: k.global_tensor(int32, [4], layout="row", requires_clean=False),
     ["global_tensor", "layout", "row-major"]),
    ("gt-clean-missing", lambda k, v: k.global_tensor(int32, [4]), ["global_tensor", "missing", "requires_clean"]),
    ("lock-int", lambda k, v: k.lock_semaphore(3, 1), ["lock_semaphore", "address of an int32", "int32"]),
    ("release-f32", lambda k, v: k.release_semaphore(v.g[0, 0].item_ptr(), 1),
     ["release_semaphore", "address of an int32", r"float32\*"]),
    ("release-value-float", lambda k, v: k.release_semaphore(k.global_tensor(int32, [1], requires_clean=True)[0].item_ptr(), 1.5),
     ["release_semaphore", "value", "integer", "float"]),
    ("randint4x-float-offset", lambda k, v: k.randint4x(1, 2.5), ["randint4x: offset", "register tensor", "float"]),
    ("randint-rounds-str", lambda k, v: k.randint(1, v.i, n_rounds="7"), ["randint4x", "n_rounds", "'7'"]),
    ("rand-seed-tensor", lambda k, v: k.rand(v.r, v.i), ["randint4x: seed", "scalar", r"register float32\[16, 16\]"]),
    ("randn-offset-shared", lambda k, v: k.randn(1, v.s), ["randint4x: offset", "register tensor", "shared"]),
    ("print-tensor-global", lambda k, v: k.print_tensor("g", v.g), ["print_tensor", "register or shared", "global"]),
    ("print-tensor-fmt", lambda k, v: k.print_tensor("r", v.r, fmt="%d %d"), ["print_tensor", "one printf conversion"]),
    ("add-str", lambda k, v: k.add(v.r, "1"), [r"\+", "register tensors or scalars", "str"]),
    ("assign-shapes", lambda k, v: k.assign(v.r, v.r8), ["assign", r"\[16, 16\]", r"\[8, 16\]"]),
    ("warp-str", lambda k, v: k.single_warp("0"), ["single_warp", "a Python int", "'0'"]),
    ("warp-group-float", lambda k, v: k.warp_group(0, 1.5), ["warp_group", "num_warps", "1.5"]),
    ("thread-group-neg", lambda k, v: k.thread_group(-1, 32).__enter__(), ["thread_group", "thread_begin"]),
    ("warp-too-far", lambda k, v: k.single_warp(9).__enter__(), ["single_warp", "do not fit"]),
    ("declare-name-int", lambda k, v: k.declare(3, int32, 0), ["declare", "name", "int 3"]),
    ("declare-dtype-str", lambda k, v: k.declare("c", "int32", 0), ["declare", "data type"]),
    ("declare-init-tensor", lambda k, v: k.declare("c", int32, v.i), ["declare", "init", "scalar", r"register int32\[16\]"]),
    ("range-outside-for", lambda k, v: k.range(4), [r"self\.range", "`for` loop"]),
    ("op-str", lambda k, v: v.r + "a", [r"\+", "register tensors or scalars", "str 'a'"]),
    ("op-shared", lambda k, v: v.r * v.s, [r"\*", "register tensors or scalars", "shared"]),
    ("op-on-shared", lambda k, v: v.s + 1, [r"\+", "arithmetic takes register tensors", "shared", "load_shared"]),
    ("op-on-global", lambda k, v: v.g < 0, ["<", "arithmetic takes register tensors", "global"]),
    ("op-shapes", lambda k, v: v.r + v.r8, ["add", r"\[16, 16\]", r"\[8, 16\]"]),
    ("op-shift-float", lambda k, v: v.r << 1, ["<<", "float32"]),
    ("to-str", lambda k, v: v.r.to("float16"), [r"\.to\(\)", "data type"]),
    ("tensor-bool", lambda k, v: bool(v.r), ["truth value", r"register float32\[16, 16\]"]),
    ("tensor-index", lambda k, v: v.r[0], ["indexing", r"float32\[16, 16\]", "one integer index per dim"]),
    ("expr-plus-str", lambda k, v: v.n + "a", ["TypeError", r"\+", "str"]),
    ("expr-call", lambda k, v: v.n(), ["TypeError", "not callable"]),
    ("cdiv-str", lambda k, v: tilus.cdiv(v.n, "2"), [r"tilus\.cdiv", "scalars", "str '2'"]),
    ("tilus-cast-str", lambda k, v: tilus.cast(v.n, "int64"), [r"tilus\.cast", "data type"]),
    ("tilus-max-tensor", lambda k, v: tilus.max(v.r, 1), [r"tilus\.max", "scalars", "register"]),
    ("static-range-sym", lambda k, v: tilus.static_range(v.n), ["static_range", "Python ints", "n"]),
    ("attr-blocks-str", lambda k, v: setattr(k.attrs, "blocks", "8"), ["attrs.blocks", "list", "str"]),
    ("attr-blocks-zero", lambda k, v: setattr(k.attrs, "blocks", [0]), ["attrs.blocks", "not positive"]),
    ("attr-warps-float", lambda k, v: setattr(k.attrs, "warps", 2.0), ["attrs.warps", "Python int", "float 2.0"]),
    ("attr-warps-big", lambda k, v: setattr(k.attrs, "warps", 99), ["attrs.warps = 99"]),
    ("attr-cluster-str", lambda k, v: setattr(k.attrs, "cluster_blocks", "2"), ["attrs.cluster_blocks", "list"]),
    ("attr-min-blocks-zero", lambda k, v: setattr(k.attrs, "min_blocks", 0), ["attrs.min_blocks = 0", "1 to 32"]),
    ("attr-min-blocks-bool", lambda k, v: setattr(k.attrs, "min_blocks", True), ["attrs.min_blocks", "Python int", "bool"]),
    ("attr-min-blocks-warps", lambda k, v: setattr(k.attrs, "min_blocks", 32),
     ["min_blocks = 32", "more than the 64 warps an SM holds"]),
    ("attr-unknown", lambda k, v: setattr(k.attrs, "threads", 128), ["unknown kernel attribute", "threads"]),
    ("tma-copy-reg-barrier", lambda k, v: k.tma_copy(v.g, v.s, barrier=v.r), ["tma_copy", "barrier", "shared tensor", "register"]),
    ("mbwp-not-barrier", lambda k, v: k.mbarrier_wait_parity(v.s, 0), ["mbarrier.wait", "one mbarrier", "shared"]),
    ("mba-cta-float", lambda k, v: k.mbarrier_arrive(k.mbarrier.alloc([1]), 1.5), ["mbarrier", "cta_id", "integer", "float"]),
    ("mbetx-str", lambda k, v: k.mbarrier_expect_tx(k.mbarrier.alloc([1]), "8"), ["mbarrier_expect_tx", "tx", "scalar", "str"]),
    ("bw-phase-tensor", lambda k, v: k.barrier_wait(k.mbarrier.alloc([1]), v.r), ["mbarrier.wait", "phase", "scalar", "one-element", r"float32\[16, 16\]"]),
    ("ba-global", lambda k, v: k.barrier_arrive(v.g), ["mbarrier.arrive", "shared tensor", "global"]),
    ("noinc-not-barrier", lambda k, v: k.cp_async_barrier_noinc(v.s), ["cp_async_barrier_noinc", "one mbarrier", "shared"]),
    ("tcgen05-arrive-not-barrier", lambda k, v: k.tcgen05_mma_arrive(v.s),
     ["tcgen05_mma_arrive", "mbar must be a shared tensor of uint64 with 1 element"]),
    ("tcgen05-arrive-register", lambda k, v: k.tcgen05_mma_arrive(v.r), ["tcgen05_mma_arrive", "mbar", "expects a shared tensor"]),
    ("wgw-str", lambda k, v: k.warpgroup_wait("0"), ["wgmma.wait_group", "n", "str"]),
    ("wwg-float", lambda k, v: k.wait_wgmma(1.5), ["wgmma.wait_group", "n", "float"]),
    ("wgfo-global", lambda k, v: k.warpgroup_fence_operand(v.g), ["warpgroup_fence_operand", "register tensor", "global"]),
    ("wgmma-global", lambda k, v: k.wgmma.mma(v.g, v.g, v.g), ["wgmma.mma", "a", "shared tensor", "global"]),
    ("im2col-kernel-float", lambda k, v: k.c2d_im2col(v.g, v.s, 0, 0, 3.0, 1, 1, 1), ["c2d_im2col", "kernel", "Python int", "float 3.0"]),
    ("im2col-col-register", lambda k, v: k.c2d_im2col(v.g, v.r, 0, 0, 3, 1, 1, 1), ["c2d_im2col", "col", "shared tensor", "register"]),
    ("sth-barrier-zero", lambda k, v: k.sync_threads(0), ["sync_threads", "barrier_id 0 is not a named barrier"]),
    ("sth-count-only", lambda k, v: k.sync_threads(arrive_count=64), ["sync_threads", "needs a barrier_id"]),
    ("sth-count-odd", lambda k, v: k.sync_threads(1, 100), ["sync_threads", "arrive_count 100", "multiple of 32"]),
    ("sth-id-str", lambda k, v: k.sync_threads("1"), ["sync_threads", "barrier_id", "'1'"]),
    ("nba-barrier-zero", lambda k, v: k.named_barrier_arrive(0, 256), ["named_barrier_arrive", "barrier_id 0 is not a named barrier"]),
    ("nba-count-odd", lambda k, v: k.named_barrier_arrive(1, 100), ["named_barrier_arrive", "arrive_count 100", "multiple of 32"]),
    ("nba-count-str", lambda k, v: k.named_barrier_arrive(1, "256"), ["named_barrier_arrive", "arrive_count", "'256'"]),
    ("sw-mask-str", lambda k, v: k.sync_warp("all"), ["sync_warp", "mask", "str 'all'"]),
    ("sgrid-arg", lambda k, v: k.sync_grid(1), ["sync_grid", "positional argument"]),
    ("sglobal-arg", lambda k, v: k.sync_global(1), ["sync_global", "positional argument"]),
    ("smn-count", lambda k, v: k.set_max_nreg(20, 1), ["inc_max_nreg", "reg_count 20", "multiple of 8 from 24 to 256"]),
    ("smn-inc-str", lambda k, v: k.set_max_nreg(240, "yes"), ["set_max_nreg", "is_inc", "str 'yes'"]),
    ("imn-float", lambda k, v: k.inc_max_nreg(240.0), ["inc_max_nreg", "reg_count", "240.0"]),
    ("dmn-count", lambda k, v: k.dec_max_nreg(300), ["dec_max_nreg", "reg_count 300"]),
    ("lane-ws-str", lambda k, v: k.get_lane_idx("32"), ["get_lane_idx", "warp_size", "'32'"]),
    ("warp-ws-zero", lambda k, v: k.get_warp_idx(0), ["get_warp_idx", "warp_size 0 must be positive"]),
    ("warp-sync-float", lambda k, v: k.get_warp_idx_sync(32.0), ["get_warp_idx_sync", "warp_size", "32.0"]),
    ("wgroup-zero", lambda k, v: k.get_warp_group_idx(32, 0), ["get_warp_group_idx", "warps_per_group 0"]),
    ("elect-neg", lambda k, v: k.shuffle_elect(-1), ["shuffle_elect", "thread_extent -1"]),
    ("shfl-xor-shared", lambda k, v: k.shfl_xor(v.s, 1), ["shfl_xor", "value", r"shared float32\[16, 16\]"]),
    ("shfl-down-lane", lambda k, v: k.shfl_down(v.i, 40), ["shfl_down", "offset 40", "0 to 31", r"register int32\[16\]"]),
    ("shfl-up-float", lambda k, v: k.shfl_up(v.i, 1.5), ["shfl_up", "offset", "1.5"]),
    ("shfl-sync-width", lambda k, v: k.shfl_sync(0xffffffff, v.i, 0, 3), ["shfl_sync", "width 3", "power of two"]),
    ("ldg32-register", lambda k, v: k.ldg32(v.r), ["ldg32", "global tensor", r"register float32\[16, 16\]"]),
    ("ldg64-bytes", lambda k, v: k.ldg64(v.g1[0:4]), ["ldg64", "holds 16 bytes of float32", "moves 8 bytes"]),
    ("ldg128-2d", lambda k, v: k.ldg128(v.g[0:2, 0:2]), ["ldg128", "contiguous", r"global float32\[n, n\]"]),
    ("ldg256-pred-str", lambda k, v: k.ldg256(v.g1[0:8], pred="yes"), ["ldg256", "pred", "str 'yes'"]),
    ("stg32-value-shared", lambda k, v: k.stg32(v.g1[0:1], v.s), ["stg32", "register tensor", "shared"]),
    ("stg64-shape", lambda k, v: k.stg64(v.g1[0:2], v.i), ["stg64", r"register int32\[16\]", "float32"]),
    ("stg128-dst-int", lambda k, v: k.stg128(3, v.i), ["stg128", "global tensor or a region", "int 3"]),
    ("stg256-pred-float", lambda k, v: k.stg256(v.g1[0:8], v.i, pred=1.5), ["stg256", "pred must be a bool", "float32"]),
    ("loop-break-outside", lambda k, v: k.loop_break(), ["loop_break", "outside of a loop"]),
]


@pytest.mark.parametrize("case,fragments", [c[1:] for c in METHOD_CASES], ids=[c[0] for c in METHOD_CASES])
def test_method_misuse(case, fragments, request):
    marker = f'"{request.node.callspec.id}"'
    expect(lambda: tilus.trace(Call(case)), E, line_of(marker), fragments)


UNARY = ["abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "rcp", "sin", "cos", "tanh", "round", "square", "floor", "ceil",
         "erf", "sigmoid", "gelu"]


class MathOfATensor(tilus.Script):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def __call__(self, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(x, shape=[4])
        v = self.load_global(g, offsets=[0], shape=[4])
        if self.fn == "tanh":
            v = math.tanh(v)  # C-MATH-TANH
        else:
            v = math.erfc(v)  # C-MATH-ERFC
        self.store_global(g, v, offsets=[0])


def test_a_math_function_of_a_tensor_names_the_elementwise_method():
    expect(lambda: tilus.trace(MathOfATensor("tanh")), E, line_of("C-MATH-TANH"),
           [r"math.tanh\(\) takes numbers and kernel scalars, not a tensor", r"register float32\[4\]",
            r"self.tanh\(x\) computes it elementwise"])
    expect(lambda: tilus.trace(MathOfATensor("erfc")), E, line_of("C-MATH-ERFC"),
           [r"math.erfc\(\)", "tilus has no elementwise erfc", "self.erf"])


@pytest.mark.parametrize("op", UNARY)
def test_unary_misuse(op):
    case = lambda k, v: getattr(k, op)(v.g)  # U-UNARY
    expect(lambda: tilus.trace(Call(case)), E, line_of("# U-UNARY"), [op, "register tensor", r"global float32\[n, n\]"])


def test_the_method_cases_cover_every_script_method():
    public = {n for n in vars(tilus.Script) if not n.startswith("_") and callable(getattr(tilus.Script, n))}
    called = set(UNARY)
    for _, case, _ in METHOD_CASES:
        called |= set(re.findall(r"\bk\.(\w+)\(", inspect.getsource(case)))
    # These take no argument to get wrong.
    missing = public - called - {"copy_async_wait_all", "fence_proxy_async", "tma_store_arrive", "tma_store_wait",
                                 "warpgroup_arrive", "warpgroup_commit_batch"}
    assert not missing, missing


# --- body constructs ------------------------------------------------------------------------------

class Base(tilus.Script):
    def prologue(self):
        self.attrs.blocks = [1]
        self.attrs.warps = 1


class Yield(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        yield n  # C-YIELD


class YieldFrom(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        yield from [n]  # C-YIELD-FROM


class AsyncBody(Base):
    async def __call__(self, n: int32, out: ~int32):  # C-ASYNC
        self.prologue()


class ReturnValueInLoop(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for i in range(n):
            return i  # C-RETURN-LOOP


class ReturnValueInSymbolicIf(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        if n > 0:
            return 1  # C-RETURN-IF


class ReturnValue(Base):
    def __call__(self, n: int32, out: ~int32):  # C-RETURN-VALUE
        self.prologue()
        return n * 2


class TryInLoop(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for i in range(n):
            try:  # C-TRY-LOOP
                pass
            finally:
                pass


class TryInSymbolicIf(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        if n > 1:
            try:  # C-TRY-IF
                pass
            except ValueError:
                pass


class CaughtInsideLoop(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        try:
            for i in range(n):  # C-CAUGHT
                raise ValueError("leave the loop early")
        except ValueError:
            pass


class ForElse(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for i in range(n):  # C-FOR-ELSE
            pass
        else:
            pass


class WhileElse(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        while n > 3:  # C-WHILE-ELSE
            pass
        else:
            pass


class TupleTarget(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for i, j in range(n):  # C-TUPLE
            pass


class ListComprehension(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        xs = [i * 2 for i in range(n)]  # C-LISTCOMP


class GeneratorSum(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        total = sum(i for i in range(0, n, 2))  # C-GENEXP


class ListOfRange(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        xs = list(range(n))  # C-LIST-RANGE


class IterateScalar(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for i in n:  # C-ITER-EXPR
            pass


class FloatRange(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for i in range(0, n, 0.5):  # C-RANGE-FLOAT
            pass


class RangeFourArgs(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for i in range(0, n, 1, 2):  # C-RANGE-ARGS
            pass


class RangeStepZero(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for i in range(0, n, 0):  # C-RANGE-ZERO
            pass


class RangeTensor(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        r = self.register_tensor(dtype=int32, shape=[4], init=0)
        for i in range(r):  # C-RANGE-TENSOR
            pass


class UnrollStr(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for i in self.range(n, unroll="all"):  # C-UNROLL
            pass


class UnrollZero(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for i in self.range(n, unroll=-2):  # C-UNROLL-NEG
            pass


class OneBranch(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        if n > 3:
            x = n * 2
        g = self.global_view(out, shape=[1])
        self.store_global(g, self.register_tensor(dtype=int32, shape=[1], init=x), offsets=[0])  # C-ONE-BRANCH


class OneBranchOfTwo(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        if n > 3:
            x = n * 2
        else:
            y = n
        z = x + 1  # C-ONE-OF-TWO


class OnlyInLoop(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for i in range(n):
            last = i * 2
        total = last + 1  # C-ONLY-IN-LOOP


class LoopVariableAfter(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for i in range(n):
            pass
        self.register_tensor(dtype=int32, shape=[1], init=i)  # C-LOOPVAR-AFTER


class OnlyInWhile(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        while n > 2:
            w = n
            break
        print(w)  # C-ONLY-IN-WHILE


class TensorOrScalar(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        if n > 0:  # C-TENSOR-OR-SCALAR
            x = self.register_tensor(dtype=int32, shape=[1], init=1)
        else:
            x = n
        print(x)


class DifferentStrings(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        if n > 0:  # C-STRINGS
            mode = "fast"
        else:
            mode = "slow"
        print(mode)


class IntThenFloat(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        if n > 0:  # C-INT-FLOAT
            x = n * 2
        else:
            x = 0.5
        print(x)


class ShapesDiffer(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        if n > 0:  # C-SHAPES-DIFFER
            t = self.register_tensor(dtype=int32, shape=[4], init=1)
        else:
            t = self.register_tensor(dtype=int32, shape=[8], init=2)
        print(t)


class PythonBreakUnderSymbolicIf(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        for s in tilus.static_range(3):
            if n > s:
                continue  # C-PY-CONTINUE


class SymbolicOr(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        if n > 0 or n < -5:  # C-OR
            pass


class TensorWhile(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        r = self.register_tensor(dtype=int32, shape=[4], init=0)
        while r:  # C-TENSOR-WHILE
            pass


class FloatCondition(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        if tilus.cast(n, float32):  # C-FLOAT-COND
            pass


def helper_function_with_if(n):
    # A plain function (not a method of the Script or of a tilus.Class) runs as Python.
    if n > 0:  # C-HELPER-IF
        pass


class SymbolicIfInHelper(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        helper_function_with_if(n)


class NonlocalInBody(Base):
    def __call__(self, n: int32, out: ~int32):
        global COUNTER  # C-GLOBAL
        self.prologue()


class PythonCounterInLoop(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        count = 0
        for i in range(n):
            count += 1  # C-PY-COUNTER


class EndlessWhile(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        k = 0
        while k >= 0:  # C-ENDLESS-WHILE
            k += 1


class EndlessFor(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        import itertools
        for k in itertools.count():  # C-ENDLESS-FOR
            pass


class NoBlocks(tilus.Script):
    def __call__(self, n: int32, out: ~int32):  # C-NO-BLOCKS
        self.attrs.warps = 1


class NoWarps(tilus.Script):
    def __call__(self, n: int32, out: ~int32):  # C-NO-WARPS
        self.attrs.blocks = [1]


class UnknownName(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        self.store_global(gout, n, offsets=[0])  # C-NAME-ERROR


class InitWithSymbolicIf(Base):
    def __call__(self, n: int32, out: ~int32):
        self.prologue()
        self.register_tensor(dtype=int32, shape=[4, 4], init=lambda i, j: i if i > j > 0 else j)  # C-INIT-IF


class BadAnnotation(tilus.Script):
    def __call__(self, n: [int32], out: ~int32):  # C-ANNOTATION
        pass


class StarArgs(tilus.Script):
    def __call__(self, n: int32, *rest: int32):  # C-STAR-ARGS
        pass


class FloatBlocks(tilus.Script):
    def __call__(self, n: int32, out: float32):
        self.attrs.blocks = [out]  # C-SCALAR-FLOAT
        self.attrs.warps = 1


CONSTRUCT_CASES = [
    (Yield, "C-YIELD", ["yield"]),
    (YieldFrom, "C-YIELD-FROM", ["yield"]),
    (AsyncBody, "C-ASYNC", ["not a plain function"]),
    (ReturnValueInLoop, "C-RETURN-LOOP", ["`return` of a value", "range"]),
    (ReturnValueInSymbolicIf, "C-RETURN-IF", ["`return` of a value", "only known when the kernel runs"]),
    (ReturnValue, "C-RETURN-VALUE", ["returned", "returns nothing"]),
    (TryInLoop, "C-TRY-LOOP", ["`try`"]),
    (TryInSymbolicIf, "C-TRY-IF", ["`try`"]),
    (CaughtInsideLoop, "C-CAUGHT", ["for loop", "never closed"]),
    (ForElse, "C-FOR-ELSE", [r"`for \.\.\. else`"]),
    (WhileElse, "C-WHILE-ELSE", [r"`while \.\.\. else`"]),
    (TupleTarget, "C-TUPLE", ["single name", r"\(i, j\)"]),
    (ListComprehension, "C-LISTCOMP", ["range", "`for` statement", "Python ints"]),
    (GeneratorSum, "C-GENEXP", ["range", "`for` statement"]),
    (ListOfRange, "C-LIST-RANGE", ["range", "`for` statement"]),
    (IterateScalar, "C-ITER-EXPR", ["cannot iterate", "range"]),
    (FloatRange, "C-RANGE-FLOAT", ["range", "integers", "0.5"]),
    (RangeFourArgs, "C-RANGE-ARGS", ["range", "1 to 3 arguments"]),
    (RangeStepZero, "C-RANGE-ZERO", ["range", "step", "zero"]),
    (RangeTensor, "C-RANGE-TENSOR", ["range", "integers", "register int32"]),
    (UnrollStr, "C-UNROLL", ["unroll", "'all'"]),
    (UnrollZero, "C-UNROLL-NEG", ["unroll", "positive"]),
    (OneBranch, "C-ONE-BRANCH", ["'x'", "only one branch", "`if` at line"]),
    (OneBranchOfTwo, "C-ONE-OF-TWO", ["'x'", "only one branch"]),
    (OnlyInLoop, "C-ONLY-IN-LOOP", ["'last'", "only inside the `for` loop"]),
    (LoopVariableAfter, "C-LOOPVAR-AFTER", ["'i'", "only inside the `for` loop"]),
    (OnlyInWhile, "C-ONLY-IN-WHILE", ["'w'", "only inside the `while` loop"]),
    (TensorOrScalar, "C-TENSOR-OR-SCALAR", ["'x'", "register int32", "one branch"]),
    (DifferentStrings, "C-STRINGS", ["'mode'", "'fast'", "'slow'"]),
    (IntThenFloat, "C-INT-FLOAT", ["'x'", "int32", "0.5", "cast"]),
    (ShapesDiffer, "C-SHAPES-DIFFER", ["'t'", r"register int32\[4\]", r"register int32\[8\]"]),
    (PythonBreakUnderSymbolicIf, "C-PY-CONTINUE", ["`continue` of a Python loop"]),
    (SymbolicOr, "C-OR", ["only known when the kernel runs", "logical_or"]),
    (TensorWhile, "C-TENSOR-WHILE", ["tensor", "condition"]),
    (FloatCondition, "C-FLOAT-COND", ["condition", "float32"]),
    (SymbolicIfInHelper, "C-HELPER-IF", ["only known when the kernel runs", "helper function"]),
    (NonlocalInBody, "C-GLOBAL", ["`global`"]),
    (PythonCounterInLoop, "C-PY-COUNTER", ["'count'", "self.declare"]),
    (EndlessWhile, "C-ENDLESS-WHILE", ["`while` loop ran", "times while the kernel was traced"]),
    (EndlessFor, "C-ENDLESS-FOR", ["`for` loop ran"]),
    (NoBlocks, "C-NO-BLOCKS", ["attrs.blocks"]),
    (NoWarps, "C-NO-WARPS", ["attrs.warps"]),
    (UnknownName, "C-NAME-ERROR", ["NameError", "gout"]),
    (InitWithSymbolicIf, "C-INIT-IF", ["register_tensor", "only known when the kernel runs", "tilus.select"]),
    (BadAnnotation, "C-ANNOTATION", ["parameter 'n' needs an annotation"]),
    (StarArgs, "C-STAR-ARGS", [r"\*args"]),
    (FloatBlocks, "C-SCALAR-FLOAT", ["blocks", "integers", "float32"]),
]


@pytest.mark.parametrize("cls,marker,fragments", CONSTRUCT_CASES, ids=[c[1] for c in CONSTRUCT_CASES])
def test_body_construct(cls, marker, fragments, monkeypatch):
    monkeypatch.setattr(tilus.transform._Runtime, "max_trace_trips", 2000)  # the endless loops stop soon
    expect(lambda: tilus.trace(cls()), E, line_of(marker), fragments)


class NoBody(tilus.Script):
    pass


def test_trace_and_call_need_a_script_with_a_body():
    for wrong, what in [(Call, "the class Call"), (3, "int 3"), (NoBody(), "NoBody"), (np.zeros(2), "ndarray")]:
        with pytest.raises(tilus.CompileError, match=f"tilus.trace: expects an instance.*{what}"):
            tilus.trace(wrong)
    with pytest.raises(tilus.CompileError, match="NoBody has no kernel body"):
        NoBody()(1)


def test_a_body_without_source_is_an_error():
    ns = {"tilus": tilus, "int32": int32}
    exec("class K(tilus.Script):\n    def __call__(self, n: int32):\n        pass\n", ns)
    with pytest.raises(tilus.CompileError, match="cannot read the source"):
        tilus.trace(ns["K"]())


def test_unresolvable_string_annotation(tmp_path):
    path = tmp_path / "bad_annotation.py"
    path.write_text(textwrap.dedent('''
        from __future__ import annotations
        import tilus
        class K(tilus.Script):
            def __call__(self, n: float99):
                pass
    '''))
    spec = importlib.util.spec_from_file_location("bad_annotation", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(tilus.CompileError, match=r"bad_annotation.py:5: cannot evaluate .*'float99'"):
        tilus.trace(module.K())


# --- launch ---------------------------------------------------------------------------------------

class Add1(tilus.Script):
    def __call__(self, n: int32, x: ~float32, scale: float):
        self.attrs.blocks = [tilus.cdiv(n, 32)]
        self.attrs.warps = 1
        g = self.global_view(x, shape=[n])
        o = self.blockIdx.x * 32
        self.store_global(g, self.load_global(g, offsets=[o], shape=[32]) * scale + 1.0, offsets=[o])


F32 = np.zeros(4, dtype=np.float32)
A = tilus.ArgumentError
LAUNCH_CASES = [
    ("too-few", lambda k: k(4, F32), ["Add1", "takes 3 arguments", "got 2"]),
    ("too-many", lambda k: k(4, F32, 1.0, 5), ["Add1", "takes 3 arguments", "got 4"]),
    ("unknown-kw", lambda k: k(4, F32, 1.0, y=F32), ["Add1", "no parameter 'y'"]),
    ("twice", lambda k: k(4, F32, 1.0, n=4), ["Add1", "'n'", "both by position and by name"]),
    ("missing-kw", lambda k: k(4, scale=1.0), ["Add1", "missing argument", "'x'"]),
    ("too-many-with-kw", lambda k: k(4, F32, 1.0, 2, stream=0), ["Add1", "takes 3 arguments", "got 4"]),
    ("too-many-by-position", lambda k: k(4, F32, 1.0, 2, scale=1.0), ["Add1", "got 4 by position"]),
    ("ptr-dtype", lambda k: k(4, np.zeros(4), 1.0), ["'x'", "float64", "float32"]),
    ("ptr-list", lambda k: k(4, [1.0, 2.0], 1.0), ["'x'", "expected a tensor", "list"]),
    ("ptr-none", lambda k: k(4, None, 1.0), ["'x'", "expected a tensor", "NoneType"]),
    ("ptr-negative-int", lambda k: k(4, -16, 1.0), ["'x'", "a raw address must be a positive 64-bit integer"]),
    ("ptr-float", lambda k: k(4, 1.5, 1.0), ["'x'", "expected a tensor", "or an int address, got float"]),
    ("int-float", lambda k: k(4.5, F32, 1.0), ["'n'", "int"]),
    ("int-str", lambda k: k("4", F32, 1.0), ["'n'", "number", "str"]),
    ("int-none", lambda k: k(None, F32, 1.0), ["'n'", "NoneType"]),
    ("int-overflow", lambda k: k(1 << 40, F32, 1.0), ["'n'", "range of int32"]),
    ("int-negative-overflow", lambda k: k(-(1 << 40), F32, 1.0), ["'n'", "range of int32"]),
    ("const-type", lambda k: k(4, F32, "1.0"), ["'scale'", "compile-time float", "'1.0'"]),
    ("const-bool", lambda k: k(4, F32, None), ["'scale'", "compile-time float"]),
    ("int-beyond-int64", lambda k: k(1 << 63, F32, 1.0), ["kernel Add1, argument 0 \\('n': int32\\)",
                                                          "9223372036854775808 is out of the range of int32"]),
    ("scalar-array", lambda k: k(np.ones(2, np.int32), F32, 1.0),
     ["kernel Add1, argument 0 \\('n': int32\\)", "an array \\(numpy.ndarray of shape \\(2,\\) and dtype int32\\)",
      "annotate it 'n: ~int32'"]),
]


@needs_cpu
@pytest.mark.parametrize("call,fragments", [c[1:] for c in LAUNCH_CASES], ids=[c[0] for c in LAUNCH_CASES])
def test_launch_mistake(call, fragments):
    x = F32.copy()
    expect(lambda: call(Add1()), A, None, fragments)
    assert (F32 == 0).all() and (x == 0).all()  # nothing ran


class NoTilde(tilus.Script):
    """A pointer parameter written without `~`: a float32 scalar."""

    def __call__(self, n: int32, x: float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(x, dtype=float32, shape=[n])  # C-NO-TILDE
        self.store_global(g, self.register_tensor(dtype=float32, shape=[4], init=1.0), offsets=[0])


@needs_cpu
def test_a_pointer_parameter_without_tilde():
    # Called with an array: the launch names the kernel, the parameter and the fix.
    expect(lambda: NoTilde()(4, np.zeros(4, np.float32)), A, None,
           ["kernel NoTilde, argument 1 \\('x': float32\\)", "the parameter is a float32 scalar",
            "numpy.ndarray of shape \\(4,\\) and dtype float32", "annotate it 'x: ~float32'"])
    # Called with a number: global_view (with or without dtype=) says the same at its line.
    expect(lambda: NoTilde()(4, 1.0), E, line_of("C-NO-TILDE"),
           ["global_view: ptr must be a pointer", "x \\(float32\\), a scalar", "annotate it 'x: ~float32'"])


class NegativeView(tilus.Script):
    def __call__(self, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(x, shape=[-8])  # C-NEGATIVE-VIEW
        self.store_global(g, self.register_tensor(dtype=float32, shape=[8], init=1.0), offsets=[0])


def test_a_view_of_negative_extent_is_an_error():
    expect(lambda: tilus.trace(NegativeView()), E, line_of("C-NEGATIVE-VIEW"),
           ["global_view", "negative extent -8 in dim 0", "global float32\\[-8\\]"])


class KeywordOnly(tilus.Script):
    """Keyword-only parameters, runtime and compile-time."""

    def __call__(self, n: int32, *, x: ~float32, scale: float):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(x, shape=[n])
        self.store_global(g, self.load_global(g, offsets=[0], shape=[8]) * scale, offsets=[0])


@needs_cpu
def test_keyword_only_parameters():
    x = np.arange(8, dtype=np.float32)
    KeywordOnly()(8, x=x, scale=2.0)
    np.testing.assert_allclose(x, np.arange(8) * 2.0)
    KeywordOnly()(scale=3.0, x=x, n=8)
    np.testing.assert_allclose(x, np.arange(8) * 6.0)
    assert "mul" in str(tilus.trace(KeywordOnly(), constants={"scale": 2.0}))
    # Python's rule: by position they are an error that names the parameter.
    expect(lambda: KeywordOnly()(8, x, 2.0), A, None, ["kernel KeywordOnly", "'x' is keyword-only", "x=..."])


@needs_cpu
def test_an_int64_beyond_its_range_names_the_kernel_and_the_parameter():
    class Int64Param(tilus.Script):
        def __call__(self, n: tilus.int64, u: tilus.uint64, x: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            g = self.global_view(x, shape=[1])
            self.store_global(g, self.register_tensor(dtype=float32, shape=[1], init=tilus.cast(n, float32)),
                              offsets=[0])

    x = np.zeros(1, np.float32)
    Int64Param()((1 << 63) - 1, 5, x)
    assert x[0] == float((1 << 63) - 1)
    expect(lambda: Int64Param()(1 << 63, 5, x), A, None,
           ["kernel Int64Param, argument 0 \\('n': int64\\)", "9223372036854775808 is out of the range of int64"])
    expect(lambda: Int64Param()(-(1 << 63) - 1, 5, x), A, None, ["'n': int64", "out of the range of int64"])
    expect(lambda: Int64Param()(0, 1 << 63, x), A, None,
           ["kernel Int64Param, argument 1 \\('u': uint64\\)", "2\\*\\*63 or more", "travel as int64"])


def test_there_are_at_least_a_hundred_cases():
    assert len(METHOD_CASES) + len(UNARY) + len(CONSTRUCT_CASES) + len(LAUNCH_CASES) >= 100


# --- no hang: loops whose end is only known at run time ------------------------------------------

class StepLoop(tilus.Script):
    def __call__(self, begin: int32, end: int32, step: int32, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        count = self.declare("count", int32, 0)
        for i in range(begin, end, step):
            count = count + 1
        self.store_global(self.global_view(out, shape=[1]), self.register_tensor(dtype=int32, shape=[1], init=count),
                          offsets=[0])


@needs_cpu
@pytest.mark.parametrize("begin,end,step", [(0, 10, 0), (10, 0, 0), (0, 10, 3), (10, 0, -3), (5, 5, 0)])
def test_a_run_time_step_of_zero_runs_no_iterations(begin, end, step):
    # Run in a child process: a hang there (the bug this guards against) cannot block the suite.
    code = textwrap.dedent(f"""
        import numpy as np, sys
        sys.path.insert(0, {repr(__file__.rsplit('/', 1)[0])})
        from test_bad_input import StepLoop
        out = np.full(1, -1, dtype=np.int32)
        StepLoop()({begin}, {end}, {step}, out)
        print(int(out[0]))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    want = 0 if step == 0 else len(range(begin, end, step))
    assert int(r.stdout.strip()) == want


class HugeTile(tilus.Script):
    def __call__(self, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        a = self.register_tensor(dtype=float32, shape=[8192, 8192], init=1.0)  # C-HUGE-TILE
        self.store_global(self.global_view(x, shape=[4]), self.sum(self.sum(a, dim=1), dim=0, keepdim=True), offsets=[0])


@needs_cpu
def test_a_register_tile_too_large_for_its_threads_is_an_error_not_a_crash():
    expect(lambda: HugeTile()(np.zeros(4, dtype=np.float32)), E, line_of("C-HUGE-TILE"),
           ["register_tensor", r"float32\[8192, 8192\]", "per thread", "local memory"])


# --- warnings: a discarded result -----------------------------------------------------------------

class Discards(tilus.Script):
    def keep(self, t):
        return t + 1  # a helper's result may be discarded: no warning

    def __call__(self, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        a = self.register_tensor(dtype=float16, shape=[16, 16], init=1.0)
        acc = self.register_tensor(dtype=float32, shape=[16, 16], init=0.0)
        g = self.global_view(x, shape=[16, 16])
        self.dot(a, a, acc)  # W-DOT
        acc + 1.0  # W-ADD
        self.exp(acc)  # W-EXP
        acc.to(float16)  # W-TO
        self.load_global(g, offsets=[0, 0], shape=[16, 16], out=acc)  # updates acc: no warning
        self.keep(acc)
        self.store_global(g, acc, offsets=[0, 0])


def test_a_discarded_result_is_a_warning_at_the_users_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tilus.trace(Discards())
    got = [(w.filename.rsplit("/", 1)[-1], w.lineno, str(w.message)) for w in caught
           if issubclass(w.category, tilus.TilusWarning)]
    assert [(f, l) for f, l, _ in got] == [(FILE, line_of(m)) for m in ["W-DOT", "W-ADD", "W-EXP", "W-TO"]]
    assert "self.dot(...)" in got[0][2] and "c = self.dot(a, b, c)" in got[0][2]
    assert "`+`" in got[1][2] and "self.exp(...)" in got[2][2] and "`.to()`" in got[3][2]


# --- valid programs that used to be refused ---------------------------------------------------------

class WhileCounter(tilus.Script):
    """out[0] = sum of i for i < n, out[1] = the final i (a Python-int counter of a symbolic while)."""

    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        total = self.declare("total", int32, 0)
        i = 0
        while i < n:
            total = total + i
            i += 1
        g = self.global_view(out, shape=[2])
        self.store_global(g, self.register_tensor(dtype=int32, shape=[1], init=total), offsets=[0])
        self.store_global(g, self.register_tensor(dtype=int32, shape=[1], init=i), offsets=[1])


@needs_cpu
@pytest.mark.parametrize("n", [0, 1, 7, 100])
def test_while_counter(n):
    out = np.zeros(2, dtype=np.int32)
    with deadline():
        WhileCounter()(n, out)
    assert out.tolist() == [sum(range(n)), max(n, 0)]


class BothBranches(tilus.Script):
    """A scalar, a Python number and a register tensor bound in both branches, used after."""

    def __call__(self, n: int32, x: ~float32, out: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        gx = self.global_view(x, shape=[8])
        if n > 3:
            scale = tilus.cast(n, float32) * 2.0
            offset = 1
            t = self.load_global(gx, offsets=[0], shape=[8])
        elif n > 1:
            scale = 0.5
            offset = 2
            t = self.register_tensor(dtype=float32, shape=[8], init=lambda i: i)
        else:
            scale = 3.0
            offset = 2
            t = self.load_global(gx, offsets=[0], shape=[8]) * -1.0
        self.store_global(self.global_view(out, shape=[8]), t * scale + offset, offsets=[0])


@needs_cpu
@pytest.mark.parametrize("n", [0, 2, 5])
def test_names_bound_in_both_branches_are_usable_after(n):
    x = np.arange(8, dtype=np.float32) + 10
    out = np.zeros(8, dtype=np.float32)
    BothBranches()(n, x, out)
    if n > 3:
        want = x * (n * 2.0) + 1
    elif n > 1:
        want = np.arange(8, dtype=np.float32) * 0.5 + 2
    else:
        want = -x * 3.0 + 2
    np.testing.assert_allclose(out, want)


class Reassigned(tilus.Script):
    """A parameter reassigned in a branch and in a loop, and a Python number reassigned in a
    branch, keep the value of the path taken."""

    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        scale = 1
        if n > 3:
            n = n + 100
            scale = 2
        for i in range(3):
            n = n + 1
        g = self.global_view(out, shape=[2])
        self.store_global(g, self.register_tensor(dtype=int32, shape=[1], init=n), offsets=[0])
        self.store_global(g, self.register_tensor(dtype=int32, shape=[1], init=scale), offsets=[1])


@needs_cpu
@pytest.mark.parametrize("n", [1, 5])
def test_reassigned_parameters_and_python_numbers(n):
    out = np.zeros(2, dtype=np.int32)
    Reassigned()(n, out)
    assert out.tolist() == [(n + 100 if n > 3 else n) + 3, 2 if n > 3 else 1]


class NestedHelpers(tilus.Script):
    def shifted(self, t, by):
        def add(v):  # a nested def in a helper method
            return v + by
        return add(t)

    def __call__(self, n: int32, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(x, shape=[n])

        def load(at):  # a nested def in the kernel body, with a loop and a branch of its own
            t = self.load_global(g, offsets=[at], shape=[4])
            for _ in [0, 1]:
                t = t * 2.0
            return t

        v = self.shifted(load(0), 3.0)
        self.store_global(g, v, offsets=[0])


@needs_cpu
def test_nested_helper_functions():
    x = np.arange(4, dtype=np.float32)
    NestedHelpers()(4, x)
    np.testing.assert_allclose(x, np.arange(4) * 4 + 3)


def make_scale(dtype, factor):
    """A Script made inside a factory: its annotation names the factory's argument."""

    class Scale(tilus.Script):
        def __call__(self, n: int32, x: ~dtype):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            g = self.global_view(x, shape=[n])
            self.store_global(g, self.load_global(g, offsets=[0], shape=[8]) * factor, offsets=[0])

    return Scale


@needs_cpu
def test_a_script_made_in_a_factory():
    x = np.arange(8, dtype=np.float32)
    make_scale(float32, 3.0)()(8, x)
    np.testing.assert_allclose(x, np.arange(8) * 3.0)
    h = np.arange(8, dtype=np.float16)
    make_scale(float16, 2.0)()(8, h)
    np.testing.assert_allclose(h.astype(np.float32), np.arange(8) * 2.0)


@needs_cpu
def test_a_script_made_in_a_factory_with_string_annotations():
    from future_kernels import make_negate
    x = np.arange(8, dtype=np.int32)
    make_negate(int32)()(8, x)
    assert x.tolist() == [-i for i in range(8)]


class NoSuperInit(tilus.Script):
    def __init__(self, block):
        self.block = block  # forgot super().__init__()

    def __call__(self, n: int32, x: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, self.block)]
        self.attrs.warps = 1
        g = self.global_view(x, shape=[n])
        o = self.blockIdx.x * self.block
        self.store_global(g, self.load_global(g, offsets=[o], shape=[self.block]) + 1.0, offsets=[o])


@needs_cpu
def test_a_missing_super_init_still_works():
    x = np.zeros(10, dtype=np.float32)
    NoSuperInit(4)(10, x)
    assert (x == 1).all()


class Parent(tilus.Script):
    def body(self, g):
        self.store_global(g, self.load_global(g, offsets=[0], shape=[4]) + 1.0, offsets=[0])

    def __call__(self, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        self.body(self.global_view(x, shape=[4]))


class Child(Parent):
    def body(self, g):
        super().body(g)  # zero-argument super() in a helper ...
        self.store_global(g, self.load_global(g, offsets=[0], shape=[4]) * 10.0, offsets=[0])

    def __call__(self, x: ~float32):
        super().__call__.__wrapped__(self, x)  # ... and in the kernel body


@needs_cpu
def test_super_in_the_body():
    x = np.ones(4, dtype=np.float32)
    Child()(x)
    assert (x == 20).all()


class NegativeDims(tilus.Script):
    """Python-style negative dims in every method with dim/dims."""

    def __call__(self, x: ~float32, rows: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        gx = self.global_view(x, shape=[4, 8])
        t = self.load_global(gx, offsets=[0, 0], shape=[4, 8], dims=[-2, -1])
        s = self.sum(t, dim=-1, keepdim=True)                      # [4, 1]
        m = self.squeeze(self.max(t, dims=[-1], keepdim=True), -1)  # [4]
        self.store_global(self.global_view(rows, shape=[2, 4]), self.unsqueeze(m, -2), offsets=[1, 0], dims=[-2, -1])
        sh = self.shared_tensor(dtype=float32, shape=[4, 8])
        self.copy_async(gx, sh, offsets=[0, 0], dims=[-2, -1])
        self.copy_async_wait_all()
        self.sync()
        self.store_global(self.global_view(y, shape=[4, 8]), self.load_shared(sh) - s, offsets=[0, 0], dims=[0, -1])


@needs_cpu
def test_negative_dims_count_from_the_end():
    x = np.random.default_rng(0).uniform(-1, 1, (4, 8)).astype(np.float32)
    rows = np.zeros((2, 4), dtype=np.float32)
    y = np.zeros((4, 8), dtype=np.float32)
    NegativeDims()(x, rows, y)
    np.testing.assert_allclose(rows[1], x.max(axis=-1), rtol=1e-6)
    np.testing.assert_allclose(y, x - x.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_tensors_are_named_after_their_variables():
    text = str(tilus.trace(NegativeDims()))
    for line in ["gx = global_view(ptr=x)", "t = load_global(src=gx", "s = sum(x=t", "m = squeeze(",
                 "sh = shared_tensor()"]:
        assert line in text, (line, text)
