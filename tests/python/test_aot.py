"""tilus.aot: Scripts compiled ahead of time into a C bundle, built here with the system's C
compiler and called through ctypes as a deployed program would call it. Without a GPU the call
must fail cleanly (status 3 and a message); with one it runs on torch tensors. The C++ side
(tests/cpp/test_aot.cpp) covers the expression semantics, the Hopper matmul and two bundles in
one program; examples/aot builds a C++ program against a bundle."""
import ctypes
import os
import shutil
import subprocess

import pytest

import tilus
from tilus import aot, int32
from tilus._C import CompileError

from conftest import HAS_GPU, ROOT
from vector_add import VectorAdd

needs_nvrtc = pytest.mark.skipif(not tilus._C.nvrtc_available(), reason="tilus was built without NVRTC")
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")


class Scale(tilus.Script):
    def __call__(self, n: int32, factor: int, x: ~tilus.float32, alpha: tilus.float32):
        self.attrs.blocks = [tilus.cdiv(n, 128)]
        self.attrs.warps = 4
        g = self.global_view(x, shape=[n])
        o = self.blockIdx.x * 128
        v = self.load_global(g, offsets=[o], shape=[128])
        self.store_global(g, v * (alpha * factor), offsets=[o])


@needs_nvrtc
def test_header_declares_the_kernels_with_their_c_types_and_variants():
    b = aot.Bundle("lib", archs=["sm_80"])
    b.add(VectorAdd())
    b.add(Scale(), name="scale", constants={"factor": 3}, specializations=["all", ("n",), "none"])
    h = b.header()
    assert "tilus_aot_status lib_vector_add(struct CUstream_st* stream, int32_t n, const float* a, const float* b, " \
           "float* c);" in h
    # The constant is compiled in; the float scalar is passed by value; x is written, so not const.
    assert "tilus_aot_status lib_scale(struct CUstream_st* stream, int32_t n, float* x, float alpha);" in h
    scale = h[h.index("lib_scale ("):]
    assert scale.index("sm_80: n % 16 == 0, x % 16 == 0") < scale.index("sm_80: n % 16 == 0\n") < \
        scale.index("sm_80: any")
    assert b.kernels == ["lib_vector_add", "lib_scale"]


@needs_nvrtc
def test_bad_bundles_are_compile_errors():
    b = aot.Bundle("lib", archs=["sm_80"])
    with pytest.raises(CompileError, match="specialization .* names alpha, not an integer or pointer parameter"):
        b.add(Scale(), constants={"factor": 1}, specializations=[("alpha",)])
    with pytest.raises(CompileError, match="compile-time parameter 'factor' has no value"):
        b.add(Scale())
    with pytest.raises(CompileError, match="must be a C identifier"):
        aot.Bundle("my lib")
    @tilus.autotune("block", [256, 1024])
    class TunedAdd(VectorAdd):
        pass

    tuned = TunedAdd()
    with pytest.raises(CompileError, match="is autotuned; a bundle takes one configuration"):
        b.add(tuned)


@needs_nvrtc
def test_size_buckets_share_one_function():
    b = aot.Bundle("lib", archs=["sm_80"])
    b.add(VectorAdd(block=256), name="vadd", when={"n": (None, 4096)}, specializations=["none"])
    b.add(VectorAdd(block=1024), name="vadd", when={"n": (4097, None)}, specializations=["none"])
    b.add(VectorAdd(block=2048), name="vadd", specializations=["none"])  # the last: any size
    assert b.kernels == ["lib_vadd"]
    h = b.header()
    assert h.count("tilus_aot_status lib_vadd(") == 1
    assert " *   sm_80: any arguments when n <= 4096; grid ((n + 255) / 256)\n" \
           " *   sm_80: any arguments when 4097 <= n; grid ((n + 1023) / 1024)\n" \
           " *   sm_80: any arguments; grid ((n + 2047) / 2048) */" in h, h
    src = b.source()
    assert "(long long)n <= 4096LL" in src and "(long long)n >= 4097LL" in src
    assert "size buckets when n <= 4096 when 4097 <= n any size" in src
    with pytest.raises(CompileError, match="already has a function lib_vadd for any sizes"):
        b.add(VectorAdd(), name="vadd", when={"n": (1, 2)})
    b.add(VectorAdd(), name="other", when={"n": (1, 2)})
    with pytest.raises(CompileError, match="every size bucket of a function takes the same C arguments"):
        b.add(Scale(), name="other", constants={"factor": 2})
    with pytest.raises(CompileError, match="when= names 'a', not an integer parameter"):
        b.add(VectorAdd(), name="third", when={"a": (1, 2)})
    with pytest.raises(CompileError, match="a range is \\(lo, hi\\)"):
        b.add(VectorAdd(), name="third", when={"n": 5})


def load_bundle(tmp_path, name):
    """The bundle written to tmp_path/name, built as a shared library with warnings as errors."""
    lib = tmp_path / f"lib{name}.so"
    subprocess.run(["cc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o", str(lib),
                    str(tmp_path / name / f"{name}.c"), "-ldl", "-lpthread"], check=True, capture_output=True)
    so = ctypes.CDLL(str(lib))
    getattr(so, f"{name}_last_error").restype = ctypes.c_char_p
    return so


@needs_nvrtc
@needs_cc
def test_bundle_builds_and_runs(tmp_path):
    b = aot.Bundle("pylib", archs=["sm_90a", "sm_80"])
    b.add(VectorAdd(), name="vector_add")
    paths = b.write(tmp_path / "pylib")
    assert sorted(os.path.basename(p) for p in paths) == ["CMakeLists.txt", "pylib.c", "pylib.h",
                                                         "tilus_aot_runtime.h", "tilus_cu_types.h"]
    so = load_bundle(tmp_path, "pylib")
    fn = so.pylib_vector_add
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    if not HAS_GPU:
        x = ctypes.c_float(0)
        assert fn(None, 1, ctypes.byref(x), ctypes.byref(x), ctypes.byref(x)) == 3
        assert b"pylib_vector_add: no GPU" in so.pylib_last_error()
        return
    import torch
    for n in (4096, 1001):
        a, c = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
        bb = torch.randn(n, device="cuda")
        stream = torch.cuda.current_stream().cuda_stream
        assert fn(stream, n, a.data_ptr(), bb.data_ptr(), c.data_ptr()) == 0, so.pylib_last_error()
        torch.cuda.synchronize()
        assert torch.equal(c, a + bb)
    # The checks ask the driver for the allocation behind each pointer: 100 floats fit a 400-byte
    # allocation, 101 do not, nor do 100 from 40 bytes into it.
    cuda = ctypes.CDLL("libcuda.so.1")
    p = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(400)) == 0
    try:
        assert fn(None, 100, p.value, p.value, p.value) == 0, so.pylib_last_error()
        assert fn(None, 101, p.value, p.value, p.value) == 1
        assert b"argument 'a': the kernel reaches 404 bytes" in so.pylib_last_error(), so.pylib_last_error()
        assert fn(None, 100, p.value + 40, p.value, p.value) == 1
        assert b"allocation has 360 bytes from there" in so.pylib_last_error(), so.pylib_last_error()
        so.pylib_set_checks(0)
        assert fn(None, 1, p.value + 40, p.value, p.value) == 0  # checks off: only null pointers are refused
        assert fn(None, 1, None, p.value, p.value) == 1
        so.pylib_set_checks(1)
        torch.cuda.synchronize()
    finally:
        cuda.cuMemFree_v2(ctypes.c_uint64(p.value))


@needs_nvrtc
@needs_cc
@pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake")
def test_the_aot_example_builds(tmp_path):
    """examples/aot/run.sh: the bundle, then the C++ program with CMake (run on the GPU machine;
    here only built, against the CUDA toolkit's driver API stub)."""
    env = dict(os.environ, AOT_BUILD_ONLY="1" if not HAS_GPU else "0")
    r = subprocess.run([os.path.join(ROOT, "examples", "aot", "run.sh"), str(tmp_path / "aot")], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "built " in r.stdout
    if HAS_GPU:
        assert "all results correct" in r.stdout, r.stdout


@needs_nvrtc
@needs_cc
def test_a_bundle_with_tma_im2col_builds_and_checks_its_assumption(tmp_path):
    from conv2d import reference
    from conv2d_wgmma import Conv2dWgmma
    b = aot.Bundle("convlib", archs=["sm_90a"])
    # TMA needs C a multiple of 16 (16-byte image rows) and aligned pointers; any N, H, W and F.
    b.add(Conv2dWgmma(), name="conv", specializations=(["c", "img", "weight", "out"],))
    b.write(tmp_path / "convlib")
    src = (tmp_path / "convlib" / "convlib.c").read_text()
    assert "const int im2col[] = {-1, -1, 1};" in src and "does not hold for these arguments" in src
    so = load_bundle(tmp_path, "convlib")
    fn = so.convlib_conv
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_int32] * 5 + [ctypes.c_void_p] * 3
    if not HAS_GPU:
        x = ctypes.c_uint16(0)
        assert fn(None, 1, 3, 3, 64, 16, ctypes.byref(x), ctypes.byref(x), ctypes.byref(x)) == 3
        return
    import numpy as np
    import torch
    n, h, w, f = 2, 13, 11, 48
    for c, status in ((64, 0), (48, 1)):  # 48: C % 64 == 0 does not hold
        img = torch.randn(n, h, w, c, device="cuda", dtype=torch.float16)
        wt = torch.randn(f, 3, 3, c, device="cuda", dtype=torch.float16)
        out = torch.zeros(n, h, w, f, device="cuda", dtype=torch.float16)
        got = fn(torch.cuda.current_stream().cuda_stream, n, h, w, c, f, img.data_ptr(), wt.data_ptr(), out.data_ptr())
        assert got == status, so.convlib_last_error()
        if status:
            assert b"does not hold for these arguments" in so.convlib_last_error()
            continue
        torch.cuda.synchronize()
        want = reference(img.cpu().numpy(), wt.cpu().numpy(), 1, 1, 1)
        np.testing.assert_allclose(out.float().cpu().numpy(), want, rtol=2e-2, atol=3e-2)
