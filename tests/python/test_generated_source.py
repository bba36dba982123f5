"""The CUDA source the emitter writes: NVRTC compiles the examples' kernels without a warning (a
compile error's log shows only what is wrong), and a `copy` into a register tensor writes that
tensor's own registers, so a copy under a branch is seen after it."""
import inspect
import os
import sys

import numpy as np
import pytest

import tilus
from tilus import _C, float32, int32

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
needs_nvrtc = pytest.mark.skipif(not _C.nvrtc_available(), reason="needs NVRTC")


def cuda_source(script, arch="sm_90a"):
    """The kernel's name and CUDA source, every run-time parameter specialized as 16-divisible and
    16-byte aligned (as bench/compile_time.py compiles the examples)."""
    program = tilus.trace(script)
    runtime = [p for p in inspect.signature(type(script).__call__).parameters.values()
               if p.name != "self" and p.annotation not in (int, float, bool, str)]
    program.specialize({i: 16 for i in range(len(runtime))})
    return program.kernel_name, _C.compile_cuda_source(program, arch)


@needs_nvrtc
@pytest.mark.parametrize("module, name", [("tma_copy", "TmaCopy"), ("hopper_matmul_v3", "HopperMatmulV3"),
                                          ("conv2d_wgmma", "Conv2dWgmmaPersistent"), ("matmul_v3", "MatmulV3"),
                                          ("flash_decoding", "FlashDecoding")])
def test_the_examples_compile_without_nvrtc_warnings(module, name):
    # Views read only through TMA tensor maps and thread groups whose bodies never use their own
    # thread index used to leave unused variables: NVRTC's warning #177 in every such compile.
    sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
    try:
        script = getattr(__import__(module), name)()
    finally:
        sys.path.pop(0)
    kernel, source = cuda_source(script)
    got = _C.nvrtc_compile(source, kernel, "sm_90a")
    assert "warning" not in got["log"], got["log"]
    assert got["cubin"]


class CopyUnderBranch(tilus.Script):
    """y = x where n > 5, else zeros: the copy into r happens inside the branch, r is read after."""

    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        r = self.register_tensor(dtype=float32, shape=[64], init=0.0)
        if n > 5:
            self.copy(self.global_view(x, shape=[64]), r)
        self.store_global(self.global_view(y, shape=[64]), r, offsets=[0])


@needs_nvrtc
def test_a_copy_into_a_register_tensor_writes_its_registers():
    kernel, source = cuda_source(CopyUnderBranch(), "sm_80")
    body = source[source.index("if ((n > 5))"):]
    body = body[:body.index("}")]
    assert "__align__" not in body, "the copy declared a new register array inside the branch:\n" + body
    assert _C.nvrtc_compile(source, kernel, "sm_80")["cubin"]


@pytest.mark.parametrize("n", [1, 9])
def test_a_copy_under_a_branch_is_seen_after_it(arrays, n):
    x = arrays.rand([64])
    y = arrays.empty([64])
    CopyUnderBranch()(n, x, y)
    want = arrays.host(x) if n > 5 else np.zeros(64, np.float32)
    np.testing.assert_array_equal(arrays.host(y), want)


class WgmmaInBothBranches(tilus.Script):
    """A wgmma accumulator declared in a branch's then part, another one outside used in its else part."""

    def __call__(self, n: int32, a: ~tilus.float16, b: ~tilus.float16, c: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=tilus.float16, shape=[64, 64])
        sb = self.shared_tensor(dtype=tilus.float16, shape=[64, 64])
        self.copy(self.global_view(a, shape=[64, 64]), sa)
        self.copy(self.global_view(b, shape=[64, 64]), sb)
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        if n > 5:
            narrow = self.register_tensor(dtype=float32, shape=[64, 32], init=0.0)
            self.wgmma.fence()
            self.wgmma.mma(sa, self.slice_shared(sb, [0, 0], [0, 1], [32, 64]).transpose(), narrow)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.store_global(self.global_view(c, shape=[64, 64]), narrow, offsets=[0, 0])
        else:
            self.wgmma.fence()
            self.wgmma.mma(sa, sb.transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.store_global(self.global_view(c, shape=[64, 64]), acc, offsets=[0, 0])


@needs_nvrtc
def test_an_else_part_fences_only_the_accumulators_it_sees():
    # The else part is a C++ block of its own: its wgmma fences pinned the then part's accumulator
    # (declared there, so NVRTC: identifier "narrow" is undefined) when the emitter took the two
    # parts for one block (a short first key block of attention, tail=, declares its own S).
    kernel, source = cuda_source(WgmmaInBothBranches())
    else_part = source[source.index("} else {"):]
    assert "narrow" not in else_part[:else_part.index("store_global")], else_part
    assert _C.nvrtc_compile(source, kernel, "sm_90a")["cubin"]


class FloorByPowersOfTwo(tilus.Script):
    """(n - i) // 4 and (n - i) % 8 for i < 32: negative numerators when n < 31."""

    def __call__(self, n: int32, y: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        r = self.register_tensor(dtype=int32, shape=[32], init=lambda i: (n - i) // 4 * 100 + (n - i) % 8)
        self.store_global(self.global_view(y, shape=[32]), r, offsets=[0])


def test_floor_by_powers_of_two(arrays):
    """Flooring division and modulo of signed integers by a power of two: the CUDA emitter writes
    them as an arithmetic shift and a mask (two's complement's floor), not through
    tilus::floor_div / floor_mod's sign fix-up; negative numerators too."""
    if _C.nvrtc_available():
        _, source = cuda_source(FloorByPowersOfTwo())
        assert "tilus::floor_div" not in source and "tilus::floor_mod" not in source, source
        assert " >> 2)" in source and " & 7)" in source, source
    y = arrays.empty([32], np.int32)
    FloorByPowersOfTwo()(5, y)
    x = 5 - np.arange(32)
    np.testing.assert_array_equal(arrays.host(y), x // 4 * 100 + x % 8)
