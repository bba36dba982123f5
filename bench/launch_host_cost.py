"""The host side of a launch, per call shape, on a machine without a GPU (issue 41).

    PYTHONPATH=build/python python bench/launch_host_cost.py [--launches 2000] [--rounds 21] [--check]

The kernels and call shapes are bench/launch_overhead.py's (a reused instance, a new instance
per call, keyword arguments, stream=, bf16 with a float scalar, NVIDIA Tilus's decode idiom,
DLPack and CUDA-array-interface arrays, the general path, the AOT bundle's C loop), launched
through a CUDA driver that does nothing (bench/null_cuda.c, built here with `cc` and loaded as
libcuda.so.1 before tilus looks for the driver) on arrays that only look like CUDA arrays:
torch tensors of device cuda:0 (real ``torch.Tensor``s, made from DLPack capsules that say CUDA,
whose metadata torch reads as on a GPU machine), objects with a ``__cuda_array_interface__`` or
a DLPack capsule of device CUDA, all over host memory. NVRTC
compiles the kernels as on a GPU machine (sm_90a); nothing runs them. So each figure is what a
call costs before the driver's cuLaunchKernel (a few microseconds on the GPU machine, which
bench/launch_overhead.py adds): argument reading, the contract checks, the specialization
lookup and tilus's part of the launch. The "fast" column counts the calls that took the C++
fast path (its launch counter) against the launches the null driver saw; --check exits 1 when
a call shape meant for the fast path missed it (tests/python/test_launch_host_cost.py runs it
so). Figures: the CPU time of the calling thread (not wall time, which a shared machine's load
stretches), microseconds per call, the median of rounds taken in turn (each round one loop of
every row, as bench/launch_overhead.py times them). They are this machine's host cost only: valid
as ratios between rows measured in the same run, not as the GPU machine's microseconds.

The producers' own cost (building a ``__cuda_array_interface__`` dict, a DLPack capsule) is
measured alone and shown beside their rows.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))


def load_null_driver(workdir):
    """Builds bench/null_cuda.c as libcuda.so.1 and loads it (before tilus's dlopen finds the real
    one: a library already loaded answers dlopen of its soname)."""
    lib = os.path.join(workdir, "libcuda.so.1")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", lib,
                    os.path.join(HERE, "null_cuda.c")], check=True)
    so = ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    so.null_cuda_launches.restype = ctypes.c_ulonglong
    return so


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launches", type=int, default=2000, help="calls per row and round")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--check", action="store_true", help="exit 1 if a call shape missed the fast path")
    args = p.parse_args()
    workdir = tempfile.mkdtemp(prefix="tilus-host-cost-")
    null = load_null_driver(workdir)

    import torch
    # torch's current raw stream without CUDA: a builtin as cheap as torch's (stream = device index 0).
    torch._C._cuda_getCurrentRawStream = int
    torch.cuda.current_stream = lambda device=None: types.SimpleNamespace(cuda_stream=0)
    torch.cuda._lazy_init = lambda: None  # making a tensor of device CUDA initializes nothing (no GPU here)

    import tilus
    if not tilus._C.gpu_available() or not tilus._C.nvrtc_available():
        print("launch_host_cost: needs the null driver loaded and NVRTC:", tilus._C.gpu_unavailable_reason())
        return 2
    sys.path.insert(0, HERE)
    sys.modules.setdefault("triton", None)  # launch_overhead's Triton row is not run here: never load it
    import launch_overhead as lo
    from tilus import launch as tilus_launch

    class DLManagedTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                    ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                    ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64),
                    ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]

    capsule_new = ctypes.pythonapi.PyCapsule_New
    capsule_new.restype = ctypes.py_object
    capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    dl_codes = {torch.float32: (2, 32), torch.bfloat16: (4, 16)}
    keep = []  # the host tensors, shapes and DLPack structures the CUDA tensors below are made of

    def cuda(t):
        """A torch.Tensor of device cuda:0 over the host memory of `t` (made from a DLPack capsule that
        says CUDA; torch reads nothing of the memory and needs no GPU for that): what tilus reads of a
        CUDA tensor, read by torch's own code. No operation may run on it."""
        t = t.contiguous()
        shape = (ctypes.c_int64 * t.dim())(*t.shape)
        code, bits = dl_codes[t.dtype]
        dl = DLManagedTensor(t.data_ptr(), 2, 0, t.dim(), code, bits, 1, shape, None, 0, None, None)
        keep.append((t, shape, dl))
        return torch._C._from_dlpack(capsule_new(ctypes.addressof(dl), b"dltensor", None))

    class CudaArrayInterface:
        """cupy's shape of array: __cuda_array_interface__ is a property building a new dict."""

        def __init__(self, t):
            self.t, self.shape, self.ptr = t, tuple(t.shape), t.data_ptr()

        @property
        def __cuda_array_interface__(self):
            return {"shape": self.shape, "typestr": "<f4", "descr": [("", "<f4")], "data": (self.ptr, False),
                    "strides": None, "version": 3, "stream": 1}

    class DLPackCuda:
        """An array known only by DLPack, of device CUDA 0 (a new capsule at every __dlpack__)."""

        def __init__(self, t):
            self.t = t
            self.shape = (ctypes.c_int64 * t.dim())(*t.shape)
            self.dl = DLManagedTensor(t.data_ptr(), 2, 0, t.dim(), 2, 32, 1, self.shape, None, 0, None, None)
            self.addr = ctypes.addressof(self.dl)

        def __dlpack__(self, stream=None):
            return capsule_new(self.addr, b"dltensor", None)

        def __dlpack_device__(self):
            return (2, 0)

    n, L = 1024, args.launches
    a, b, c, d = (cuda(torch.randn(n)) for _ in range(4))
    h = [cuda(torch.randn(n).to(torch.bfloat16)) for _ in range(4)]
    batch, heads = 1, 64
    g, w, bias = cuda(torch.empty(batch, heads)), cuda(torch.randn(heads)), cuda(torch.randn(heads))
    ab = cuda(torch.randn(batch, heads).to(torch.bfloat16))
    stream = types.SimpleNamespace(cuda_stream=7)  # what stream= reads of a torch.cuda.Stream
    cai = [CudaArrayInterface(t) for t in (a, b, c, d)]
    dl = [DLPackCuda(t) for t in (a, b, c, d)]

    k, kb = lo.Add3(), lo.Add3Bf16()
    k(n, a, b, c, d)  # compiles and registers the fast path's kernels (the arrays' key: aligned, CUDA)
    kb(n, 0.5, *h)
    lo.Add3()(n, a, b, c, d)
    lo.GatingIdiom()(g, w, ab, bias, batch, heads, 1.0, 20.0)

    def general():  # what a call costs without the fast path (bench/launch_overhead.py's row)
        compiled, call = tilus_launch.prepare(k, (n, a, b, c, d), {})
        tilus_launch.run(compiled, call)

    def fast_of(script):
        return script.__dict__.get("_tilus_shared", None) or script.__dict__["_tilus_tuner"].shared

    shapes = [  # (name, call, the Shared whose fast path it takes or None, producer cost or None)
        ("reused instance", lambda: k(n, a, b, c, d), fast_of(k), None),
        ("new instance per call", lambda: lo.Add3()(n, a, b, c, d), fast_of(k), None),
        ("keyword arguments", lambda: k(n=n, a=a, b=b, c=c, d=d), fast_of(k), None),
        ("stream=", lambda: k(n, a, b, c, d, stream=stream), fast_of(k), None),
        ("bf16 + float scalar", lambda: kb(n, 0.5, *h), fast_of(kb), None),
        ("Tilus idiom (new autotuned instance, bf16, float constants)",
         lambda: lo.GatingIdiom()(g, w, ab, bias, batch, heads, 1.0, 20.0),
         fast_of(lo.GatingIdiom()), None),
        ("DLPack arrays", lambda: k(n, *dl), fast_of(k), lambda: [x.__dlpack__() for x in dl]),
        ("__cuda_array_interface__ arrays (cupy's shape)", lambda: k(n, *cai), fast_of(k),
         lambda: [x.__cuda_array_interface__ for x in cai]),
        ("general path (no fast path)", general, None, None),
    ]

    # First each shape alone, counted: the calls its fast path launched against the launches the
    # driver saw (`launches` calls). Then the timing, in rounds taken in turn (launch_overhead.rounds_us).
    counts, missed = {}, []
    for name, fn, shared, producer in shapes:
        before = shared.fast.launches if shared is not None else 0
        driver_before = null.null_cuda_launches()
        for _ in range(L):
            fn()
        seen = null.null_cuda_launches() - driver_before
        fast = (shared.fast.launches - before) if shared is not None else 0
        if seen != L:
            missed.append(f"{name}: the driver saw {seen} launches for {L} calls")
        if shared is not None and fast != seen:
            missed.append(f"{name}: {seen - fast} of {seen} calls missed the fast path")
        counts[name] = f"{fast}/{seen}"
    loops = {name: lo.calls(fn) for name, fn, _, _ in shapes}
    loops.update({"producer: " + name: lo.calls(producer) for name, _, _, producer in shapes if producer})
    so = lo.aot_loop(workdir)
    if so is not None:
        ptrs = [t.data_ptr() for t in (a, b, c, d)]
        assert so.bench_loop(0, n, *ptrs, 1) == 0, so.bench_last_error()
        loops["AOT bundle, C loop"] = lambda launches: so.bench_loop(0, n, *ptrs, launches)
    us = lo.rounds_us(loops, L, args.rounds, clock=time.thread_time)

    print(f"launch host cost (null CUDA driver, CPU us per call, median of {args.rounds} rounds of {L} calls per row, "
          f"rows taken in turn; python {sys.version.split()[0]}, torch {torch.__version__})")
    print(f"{'call shape':62s} {'us':>7s} {'fast':>13s}  producer us")
    for name, fn, shared, producer in shapes:
        extra = f"{us['producer: ' + name]:8.2f}" if producer else ""
        print(f"{name:62s} {us[name]:7.2f} {counts[name]:>13s}  {extra}")
    if so is not None:
        print(f"{'AOT bundle, C loop':62s} {us['AOT bundle, C loop']:7.2f}")
    general, reused = us["general path (no fast path)"], us["reused instance"]
    print(f"{'general path / reused instance (host cost only)':62s} {general / reused:7.2f}x")
    for m in missed:
        print("MISSED:", m)
    return 1 if missed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
