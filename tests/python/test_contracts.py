"""Issue 19, no silent wrong answers: the argument contract checked at every launch (arrays
that are not what the kernel's global views read are refused with an ArgumentError naming the
kernel and the parameter), copy regions sliced at run-time starts keep their extent (a
mismatch is a CompileError at the user's line), and shared tiles at run-time offsets are
checked (the CPU backend's checked mode; TILUS_DEBUG_BOUNDS on the GPU). numpy arrays on the
CPU backend; the GPU variants (torch) skip without a GPU."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilus
from tilus import float32, int32

from conftest import HAS_CPU, HAS_GPU

needs_cpu = pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no GPU")

HERE = os.path.basename(__file__)


def line_of(marker):
    with open(__file__) as f:
        for i, text in enumerate(f, 1):
            if marker in text and "line_of" not in text:
                return i
    raise AssertionError(marker)


class AddOne(tilus.Script):
    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 64)]
        self.attrs.warps = 2
        o = self.blockIdx.x * 64
        v = self.load_global(self.global_view(x, shape=[n]), offsets=[o], shape=[64])  # X-VIEW
        self.store_global(self.global_view(y, shape=[n]), v + 1.0, offsets=[o])  # Y-STORE


class StridedRows(tilus.Script):
    """y[i, j] = x[i, j] over [m, 8], x read with the row stride sm the caller declares."""

    def __call__(self, m: int32, sm: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(m, 16)]
        self.attrs.warps = 2
        gx = self.global_view(x, shape=[m, 8], strides=[sm, 1])  # STRIDED-VIEW
        v = self.load_global(gx, offsets=[self.blockIdx.x * 16, 0], shape=[16, 8])
        self.store_global(self.global_view(y, shape=[m, 8]), v, offsets=[self.blockIdx.x * 16, 0])


X_PARAM = r"kernel AddOne, argument 1 \('x': float32\*\)"
Y_PARAM = r"kernel AddOne, argument 2 \('y': float32\*\)"


def refused(match, *args, kernel=None):
    with pytest.raises(tilus.ArgumentError, match=match) as e:
        (kernel or AddOne())(*args)
    return str(e.value)


# --- the argument contract on the CPU backend ---------------------------------------------------

@needs_cpu
def test_contiguous_arrays_of_the_right_size_run():
    x = np.arange(256, dtype=np.float32)
    y = np.zeros(200, dtype=np.float32)
    AddOne()(200, x, y)
    assert (y == x[:200] + 1).all()
    AddOne()(100, x[100:], y)  # a contiguous slice starting anywhere is a dense buffer
    assert (y[:100] == x[100:200] + 1).all()
    AddOne()(64, x.reshape(4, 64), y.reshape(10, 20))  # any shape, dense
    assert (y[:64] == x[:64] + 1).all()


@needs_cpu
@pytest.mark.parametrize("name, make, why", [
    ("strided", lambda x: x[::2], r"not C-contiguous: it is a strided view \(shape \[128\], strides \[8\] bytes\)"),
    ("negative", lambda x: x[::-1], r"not C-contiguous: it has a negative stride in dim 0"),
    ("fortran", lambda x: np.asfortranarray(x.reshape(16, 16)), r"not C-contiguous: it is in Fortran"),
    ("broadcast", lambda x: np.broadcast_to(x[:1], (256,)), r"not C-contiguous: it is broadcast \(stride 0 in dim 0\)"),
])
def test_arrays_that_are_not_c_contiguous_are_refused(name, make, why):
    x = np.arange(256, dtype=np.float32)
    msg = refused(X_PARAM + ": the array is " + why, 100, make(x), np.zeros(128, dtype=np.float32))
    assert f"global_view at {__file__}:{line_of('X-VIEW')} (global float32[n])" in msg, msg
    assert "reads it as a dense row-major array" in msg


@needs_cpu
def test_big_endian_data_is_refused():
    x = np.arange(128, dtype=">f4")
    refused(X_PARAM + r": its elements are not in the host's byte order", 100, x, np.zeros(128, dtype=np.float32))
    AddOne()(100, x.astype("=f4"), np.zeros(128, dtype=np.float32))  # the conversion the message suggests


@needs_cpu
def test_a_zero_d_array_where_a_vector_is_read_is_refused():
    msg = refused(X_PARAM + r": the array has 4 bytes \(1 float32 element\)", 100, np.array(1.0, dtype=np.float32),
                  np.zeros(128, dtype=np.float32))
    assert "is [100] for these arguments and reaches 100 elements (400 bytes)" in msg, msg
    AddOne()(1, np.array(1.0, dtype=np.float32), np.zeros(1, dtype=np.float32))  # one element is enough for n = 1


@needs_cpu
def test_read_only_outputs_are_refused_and_read_only_inputs_run():
    x = np.arange(128, dtype=np.float32)
    y = np.zeros(128, dtype=np.float32)
    y.flags.writeable = False
    refused(Y_PARAM + rf": the array is read-only, but the kernel writes it \(store_global at "
            rf"{__file__}:{line_of('Y-STORE')}\)", 100, x, y)
    assert (y == 0).all()
    x.flags.writeable = False  # read only: fine
    out = np.zeros(128, dtype=np.float32)
    AddOne()(100, x, out)
    assert out[99] == 100
    # Read-only memory (a buffer of bytes) as well.
    refused(Y_PARAM + ": the array is read-only", 4, x, np.frombuffer(bytes(16), dtype=np.float32))


@needs_cpu
def test_arrays_smaller_than_the_view_are_refused():
    x = np.arange(128, dtype=np.float32)
    msg = refused(Y_PARAM + r": the array has 400 bytes \(100 float32 elements\), but the kernel's global_view at ",
                  128, x, np.zeros(100, dtype=np.float32))
    assert f"{__file__}:{line_of('Y-STORE')} (global float32[n]) is [128] for these arguments and reaches 128 " \
           "elements (512 bytes)" in msg, msg
    refused(X_PARAM + r": the array has 200 bytes", 128, x[:50], np.zeros(128, dtype=np.float32))


@needs_cpu
def test_declared_strides_take_matching_strided_arrays():
    a = np.arange(40 * 16, dtype=np.float32).reshape(40, 16)
    y = np.zeros((40, 8), dtype=np.float32)
    StridedRows()(40, 16, a[:, :8], y)  # columns 0..7: shape [40, 8], strides [16, 1] elements
    assert (y == a[:, :8]).all()
    StridedRows()(40, 8, np.ascontiguousarray(a[:, :8]), y)  # dense, with its own strides
    assert (y == a[:, :8]).all()
    k = StridedRows()
    params = r"kernel StridedRows, argument 2 \('x': float32\*\)"
    msg = refused(params + r": the array has shape \[40, 8\], strides \[64, 4\] bytes, but the kernel's global_view at ",
                  40, 8, a[:, :8], y, kernel=k)
    assert f"{__file__}:{line_of('STRIDED-VIEW')} (global float32[m, 8]) declares strides [sm, 1] = [8, 1] elements " \
           "for these arguments (dim 0 differs)" in msg, msg
    refused(params + r".*declares strides \[sm, 1\] = \[16, 1\]", 8, 16, a[:8, :8].T, y, kernel=k)  # transposed
    refused(params + r".*is \[41, 8\] for these arguments and dim 0 is 41 > 40", 41, 16, a[:, :8], np.zeros((48, 8),
            dtype=np.float32), kernel=k)
    refused(params + r": the array is not C-contiguous \(it is a strided view.*and has 1 dims, but .* declares 2-dim "
            r"strides \[sm, 1\]", 4, 16, a[:, 0], y, kernel=k)


# --- copy regions sliced at run-time starts -------------------------------------------------------

class Window(tilus.Script):
    """y[0:16] = x[i0:i0 + 16] through a shared tile."""

    def __call__(self, n: int32, i0: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(x, shape=[n])
        s = self.shared_tensor(dtype=float32, shape=[16])
        self.copy(g[i0:i0 + 16], s)
        self.copy(s, self.global_view(y, shape=[n])[0:16])


class ShortSlice(tilus.Script):
    def __call__(self, n: int32, i0: int32, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[16])
        self.copy(self.global_view(x, shape=[n])[i0:i0 + 8], s)  # SHORT-SLICE


class OpenSlice(tilus.Script):
    def __call__(self, n: int32, i0: int32, j0: int32, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[16])
        self.copy(self.global_view(x, shape=[n])[i0:j0], s)  # OPEN-SLICE


def test_a_slice_at_a_run_time_start_keeps_its_extent():
    text = str(tilus.trace(Window()))
    assert "src_offsets=[i0], src_extents=[16], dst=s, dst_offsets=[0], dst_extents=[16]" in text, text


def test_slices_that_do_not_match_the_other_side_are_compile_errors():
    with pytest.raises(tilus.CompileError) as e:
        tilus.trace(ShortSlice())
    msg = str(e.value)
    assert msg.startswith(f"{__file__}:{line_of('SHORT-SLICE')}: "), msg
    assert "copy: src is global float32[n] with extents [8] and dst is shared float32[16] with extents [16]" in msg
    with pytest.raises(tilus.CompileError) as e:
        tilus.trace(OpenSlice())
    msg = str(e.value)
    assert msg.startswith(f"{__file__}:{line_of('OPEN-SLICE')}: "), msg
    assert "copy: extent j0 - i0 of dim 0 of the src region is not a constant and the region stops before its " \
           "tensor's end" in msg, msg
    assert "src global float32[n] (offsets [i0], extents [j0 - i0]) and dst shared float32[16]" in msg, msg


@needs_cpu
def test_a_window_at_a_run_time_start_copies_exactly_its_elements():
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, dtype=np.float32)
    Window()(64, 5, x, y)
    assert (y[:16] == x[5:21]).all() and (y[16:] == 0).all()
    Window()(64, 56, x, y)  # past the tensor's end: zero-filled, as every global read
    assert (y[:8] == x[56:]).all() and (y[8:16] == 0).all()


# --- shared tiles at run-time offsets ----------------------------------------------------------------

class SharedWindow(tilus.Script):
    """y[0:16] = x[0:16] through s[i0:i0 + 16] of a 32-element shared tensor, and s2[i] of a
    [2, 16] one."""

    def __call__(self, n: int32, i0: int32, i: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(x, shape=[n])
        s = self.shared_tensor(dtype=float32, shape=[32])
        self.copy(g[0:16], s[i0:i0 + 16])  # SHARED-WINDOW
        s2 = self.shared_tensor(dtype=float32, shape=[2, 16])
        self.copy(s[i0:i0 + 16], s2[i])  # SHARED-INDEX
        self.store_global(self.global_view(y, shape=[n]), self.load_shared(s2[i]), offsets=[0])


@needs_cpu
def test_shared_overruns_are_reported_in_checked_mode(monkeypatch):
    monkeypatch.setenv("TILUS_CPU_CHECK", "1")
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, dtype=np.float32)
    k = SharedWindow()
    for i0, i in ((0, 0), (16, 1), (9, 1)):
        k(64, i0, i, x, y)
        assert (y[:16] == x[:16]).all()
    with pytest.raises(tilus.CpuCheckError) as e:
        k(64, 20, 0, x, y)
    assert f"{__file__}:{line_of('SHARED-WINDOW')}: copy: out-of-bounds access of shared float32[32] at shared " \
           "index [20]: dim 0 takes [20, 36), outside the tensor's [0, 32)" in str(e.value), str(e.value)
    with pytest.raises(tilus.CpuCheckError) as e:
        k(64, 0, 2, x, y)
    assert f"{__file__}:{line_of('SHARED-INDEX')}: copy: out-of-bounds access of shared float32[2, 16] at shared " \
           "index [2, 0]: dim 0 takes [2, 3), outside the tensor's [0, 2)" in str(e.value), str(e.value)
    with pytest.raises(tilus.CpuCheckError, match="at shared index \\[-1\\]"):
        k(64, -1, 0, x, y)


@needs_cpu
def test_shared_overruns_are_reported_without_checked_mode_too():
    # The CPU backend checks shared tiles at run-time offsets in every mode (one comparison per
    # tile access): an overrun is an error, not a corrupted heap. In a child process, so that the
    # old behaviour (a write past the block's buffer) cannot take the test run down with it.
    code = textwrap.dedent(f"""
        import os, sys
        os.environ.pop("TILUS_CPU_CHECK", None)
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import numpy as np, tilus
        from test_contracts import SharedWindow
        x, y = np.arange(64, dtype=np.float32), np.zeros(64, dtype=np.float32)
        k = SharedWindow()
        k(64, 9, 1, x, y)
        assert (y[:16] == x[:16]).all()
        for i0, i in ((20, 0), (0, 2), (-1, 0), (1 << 20, 0)):
            try:
                k(64, i0, i, x, y)
                print("no error for", i0, i)
            except tilus.CpuCheckError as e:
                print(e)
    """)
    env = {k: v for k, v in os.environ.items() if k != "TILUS_CPU_CHECK"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 4 and "no error" not in r.stdout, r.stdout
    assert f"{__file__}:{line_of('SHARED-WINDOW')}: copy: out-of-bounds access of shared float32[32] at shared " \
           "index [20]: dim 0 takes [20, 36), outside the tensor's [0, 32)" in lines[0], lines[0]
    assert "at shared index [2, 0]: dim 0 takes [2, 3), outside the tensor's [0, 2)" in lines[1], lines[1]
    assert "at shared index [-1]" in lines[2] and "at shared index [1048576]" in lines[3], lines


def test_debug_bounds_emits_device_checks():
    if not tilus._C.nvrtc_available():
        pytest.skip("tilus was built without NVRTC")
    program = tilus.trace(SharedWindow())
    assert "__trap()" not in tilus._C.compile_cuda_source(program, "sm_90a", debug_bounds=False)
    src = tilus._C.compile_cuda_source(program, "sm_90a", debug_bounds=True)
    # s[i0:i0 + 16] in both copies, s2[i] in the second copy and in the load.
    assert src.count("__trap()") == 4, src
    assert f"tilus: {__file__}:{line_of('SHARED-WINDOW')}: copy: out-of-bounds access of shared float32[32] at a " \
           "run-time offset: dim 0 takes [%lld, %lld), outside the tensor's [0, 32)" in src, src


# --- the GPU: torch tensors, the fast path, TILUS_DEBUG_BOUNDS ------------------------------------

@needs_gpu
def test_gpu_arrays_are_checked_on_the_general_and_the_fast_path():
    import torch
    k = AddOne()
    x = torch.arange(256, device="cuda", dtype=torch.float32)
    y = torch.zeros(256, device="cuda")
    k(200, x, y)
    k(200, x, y)  # the fast path
    assert "_tilus_fast" in k.__dict__
    torch.cuda.synchronize()
    assert torch.equal(y[:200], x[:200] + 1)
    # What the fast path cannot prove fine falls back to the general path, which reports.
    refused(X_PARAM + ": the array is not C-contiguous: it is a strided view", 100, x[::2], y, kernel=k)
    refused(X_PARAM + ": the array is not C-contiguous: it is broadcast", 100, x[:1].expand(256), y, kernel=k)
    refused(X_PARAM + ": the array has 400 bytes", 200, x[:100], y, kernel=k)
    refused(Y_PARAM + ": the array has 512 bytes", 200, x, y[:128], kernel=k)
    refused(X_PARAM + ": the array is not C-contiguous: it is in Fortran",
            64, x[:64].reshape(8, 8).t(), y, kernel=k)
    k(200, x, y)  # and the fast path still launches good calls
    torch.cuda.synchronize()
    assert torch.equal(y[:200], x[:200] + 1)
    # Declared strides: matching strided tensors run (and take the fast path); others are refused.
    s = StridedRows()
    a = torch.arange(40 * 16, device="cuda", dtype=torch.float32).reshape(40, 16)
    out = torch.zeros(40, 8, device="cuda")
    for _ in range(2):  # general path, then the fast path
        out.zero_()
        s(40, 16, a[:, :8], out)
        torch.cuda.synchronize()
        assert torch.equal(out, a[:, :8])
    params = r"kernel StridedRows, argument 2 \('x': float32\*\)"
    refused(params + r".*declares strides \[sm, 1\] = \[16, 1\]", 40, 16, a[:, :8].contiguous(), out, kernel=s)
    refused(params + r".*dim 0 is 41 > 40", 41, 16, a[:, :8], torch.zeros(48, 8, device="cuda"), kernel=s)


@needs_gpu
def test_gpu_cuda_array_interface_carries_read_only_and_strides():
    import torch
    x = torch.arange(256, device="cuda", dtype=torch.float32)
    y = torch.zeros(256, device="cuda")

    class Wrapped:
        def __init__(self, t, read_only=False, strides=None):
            cai = dict(t.__cuda_array_interface__)
            cai["data"] = (cai["data"][0], read_only)
            if strides is not None:
                cai["strides"] = strides
            self.__cuda_array_interface__ = cai

    AddOne()(100, Wrapped(x), Wrapped(y))
    refused(Y_PARAM + ": the array is read-only", 100, Wrapped(x), Wrapped(y, read_only=True))
    refused(X_PARAM + ": the array is not C-contiguous", 100, Wrapped(x[:128], strides=(8,)), Wrapped(y))


@needs_gpu
def test_debug_bounds_traps_a_shared_overrun_with_its_line(tmp_path):
    # A trap ends the CUDA context, so the overrun runs in a child process.
    script = tmp_path / "overrun.py"
    script.write_text(textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_contracts import SharedWindow
        x = torch.arange(64, device="cuda", dtype=torch.float32)
        y = torch.zeros(64, device="cuda")
        SharedWindow()(64, 8, 1, x, y)
        torch.cuda.synchronize()
        print("in bounds ok", flush=True)
        SharedWindow()(64, 20, 0, x, y)
        torch.cuda.synchronize()
        print("not trapped", flush=True)
    """))
    env = dict(os.environ, TILUS_DEBUG_BOUNDS="1", TILUS_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    out = r.stdout + r.stderr
    assert "in bounds ok" in out, out
    assert "not trapped" not in out and r.returncode != 0, out
    assert f"tilus: {__file__}:{line_of('SHARED-WINDOW')}: copy: out-of-bounds access of shared float32[32] at a " \
           "run-time offset: dim 0 takes [20, 36), outside the tensor's [0, 32)" in out, out


@pytest.mark.parametrize("stream", ["abc", -1, 1.5, True, object()])
def test_a_stream_that_is_not_a_cuda_stream_is_refused_on_every_backend(stream):
    x, y = np.ones(64, np.float32), np.zeros(64, np.float32)
    with pytest.raises(tilus.ArgumentError, match=r"kernel AddOne: stream= must be a CUDA stream"):
        AddOne()(64, x, y, stream=stream)
    assert (y == 0).all()


@needs_cpu
def test_the_cpu_backend_accepts_and_ignores_a_stream_handle():
    x, y = np.ones(64, np.float32), np.zeros(64, np.float32)
    AddOne()(64, x, y, stream=0)
    assert (y == 2).all()
