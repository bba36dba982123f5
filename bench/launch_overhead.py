"""Launch overhead from Python: microseconds per launch of a tiny kernel with four tensor
arguments (d = a + b + c over 1024 elements), tilus against Triton and torch.add in one run.

    PYTHONPATH=build/python python bench/launch_overhead.py [--launches 20000]

Each figure is the wall time of a Python loop of launches, synchronized once at the end,
divided by the number of launches (median of 5 loops); the kernels are compiled and warmed up
first, so this is the per-call cost: argument handling, the specialization lookup and the
driver launch. One more row, where a C compiler is present: the same Script from an
ahead-of-time bundle (tilus.aot), called from a C loop in this process (one ctypes call per
loop of launches), as a deployed C or C++ program calls it.
"""
import argparse
import ctypes
import os
import shutil
import subprocess
import tempfile
import time

import torch

import tilus
from tilus import float32, int32

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None


class Add3(tilus.Script):
    def __call__(self, n: int32, a: ~float32, b: ~float32, c: ~float32, d: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 1024)]
        self.attrs.warps = 4
        o = self.blockIdx.x * 1024
        x = self.load_global(self.global_view(a, shape=[n]), offsets=[o], shape=[1024])
        y = self.load_global(self.global_view(b, shape=[n]), offsets=[o], shape=[1024])
        z = self.load_global(self.global_view(c, shape=[n]), offsets=[o], shape=[1024])
        self.store_global(self.global_view(d, shape=[n]), x + y + z, offsets=[o])


if triton is not None:

    @triton.jit
    def add3_kernel(a, b, c, d, n, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = o < n
        tl.store(d + o, tl.load(a + o, mask=m) + tl.load(b + o, mask=m) + tl.load(c + o, mask=m), mask=m)


_LOOP_C = """
#include "bench.h"
/* `launches` calls of the bundle's function; the last status. */
int bench_loop(void* stream, int n, const float* a, const float* b, const float* c, float* d, int launches) {
  tilus_aot_status s = TILUS_AOT_SUCCESS;
  for (int i = 0; i < launches; ++i) s = bench_add3(stream, n, a, b, c, d);
  return (int)s;
}
"""


def aot_loop(workdir):
    """A function (stream, n, a, b, c, d, launches) -> status running Add3 from an AOT bundle in a
    C loop; None without a C compiler or NVRTC."""
    if shutil.which("cc") is None or not tilus._C.nvrtc_available():
        return None
    bundle = tilus.aot.Bundle("bench", archs=[tilus._C.device_info()["arch"]])
    bundle.add(Add3(), name="add3")
    bundle.write(os.path.join(workdir, "bench"))
    with open(os.path.join(workdir, "loop.c"), "w") as f:
        f.write(_LOOP_C)
    lib = os.path.join(workdir, "libbench.so")
    subprocess.run(["cc", "-std=c11", "-O2", "-shared", "-fPIC", "-I", os.path.join(workdir, "bench"), "-o", lib,
                    os.path.join(workdir, "bench", "bench.c"), os.path.join(workdir, "loop.c"), "-ldl", "-lpthread"],
                   check=True)
    so = ctypes.CDLL(lib)
    so.bench_loop.argtypes = [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int]
    so.bench_last_error.restype = ctypes.c_char_p
    return so


def per_launch_us(fn, launches):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(launches):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / launches * 1e6)
    times.sort()
    return times[2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--launches", type=int, default=20000)
    args = p.parse_args()
    n = 1024
    a, b, c, d = (torch.randn(n, device="cuda") for _ in range(4))
    rows = []
    k = Add3()
    k(n, a, b, c, d)
    assert torch.allclose(d, a + b + c)
    rows.append(("tilus", per_launch_us(lambda: k(n, a, b, c, d), args.launches)))
    if triton is not None:
        grid = (triton.cdiv(n, 1024),)
        add3_kernel[grid](a, b, c, d, n, BLOCK=1024)
        assert torch.allclose(d, a + b + c)
        rows.append(("Triton", per_launch_us(lambda: add3_kernel[grid](a, b, c, d, n, BLOCK=1024), args.launches)))
    rows.append(("torch.add (a + b, out=d)", per_launch_us(lambda: torch.add(a, b, out=d), args.launches)))
    with tempfile.TemporaryDirectory(prefix="tilus-launch-") as workdir:
        so = aot_loop(workdir)
        if so is not None:
            stream = torch.cuda.current_stream().cuda_stream
            ptrs = [t.data_ptr() for t in (a, b, c, d)]
            d.zero_()
            assert so.bench_loop(stream, n, *ptrs, 1) == 0, so.bench_last_error()
            torch.cuda.synchronize()
            assert torch.allclose(d, a + b + c)
            # One ctypes call per loop: per_launch_us times `launches` loops of one launch each.
            loop = lambda: so.bench_loop(stream, n, *ptrs, args.launches)  # noqa: E731
            rows.append(("tilus AOT bundle, C loop", per_launch_us(loop, 1) / args.launches))
    print(f"launch overhead, {torch.cuda.get_device_name()}, {args.launches} launches per loop (us per launch)")
    base = dict(rows)
    for name, us in rows:
        ratio = f"{base['Triton'] / us:.1f}x faster than Triton" if "Triton" in base and name == "tilus" else ""
        print(f"{name:26s} {us:8.2f}  {ratio}")


if __name__ == "__main__":
    main()
