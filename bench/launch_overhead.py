"""Launch overhead from Python: microseconds per launch of a tiny kernel with four tensor
arguments (d = a + b + c over 1024 elements), tilus against Triton and torch.add in one run, and
each call shape of issue 41 (a new instance per call, keyword arguments, stream=, bf16 and float
scalars, NVIDIA Tilus's decode idiom: a new instance of an autotuned class with a bf16 tensor and
Python float constants, cupy and DLPack arrays, the general path).

    PYTHONPATH=build/python python bench/launch_overhead.py [--launches 2000] [--rounds 21]

Each figure is the wall time of a Python loop of launches, synchronized once at the end,
divided by the number of launches; the kernels are compiled and warmed up first, so this is the
per-call cost: argument handling, the specialization lookup and the driver launch. The rows are
timed in rounds taken in turn (A B C ... A B C ..., each round one loop of each row, the order
rotated every round) and each row's figure is the median of its rounds, so a slow spell of the
machine (another process, a clock change) touches every row alike instead of one. One more row,
where a C compiler is present: the same Script from an ahead-of-time bundle (tilus.aot), called
from a C loop in this process (one ctypes call per loop of launches), as a deployed C or C++
program calls it. Each row is printed beside torch.add, Triton and the AOT C loop (its time
over theirs), then the goals of issue 41.
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
from tilus import bfloat16, float32, int32
from tilus import launch as tilus_launch

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


class Add3Bf16(tilus.Script):
    """d = alpha * a + b + c in bf16 with a runtime float scalar."""

    def __call__(self, n: int32, alpha: float32, a: ~bfloat16, b: ~bfloat16, c: ~bfloat16, d: ~bfloat16):
        self.attrs.blocks = [tilus.cdiv(n, 1024)]
        self.attrs.warps = 4
        o = self.blockIdx.x * 1024
        x = self.load_global(self.global_view(a, shape=[n]), offsets=[o], shape=[1024]).to(float32)
        y = self.load_global(self.global_view(b, shape=[n]), offsets=[o], shape=[1024]).to(float32)
        z = self.load_global(self.global_view(c, shape=[n]), offsets=[o], shape=[1024]).to(float32)
        self.store_global(self.global_view(d, shape=[n]), (x * alpha + y + z).to(bfloat16), offsets=[o])


@tilus.autotune("warps", [1])
@tilus.autotune("block", [4])
class GatingIdiom(tilus.Script):
    """The shape of NVIDIA Tilus's decode gating kernel as its example calls it: an autotuned class
    made anew for every call, f32 and bf16 arrays, Python int and float compile-time constants."""

    def __init__(self, warps, block):
        super().__init__()
        self.warps, self.block = warps, block

    def __call__(self, g: ~float32, w: ~float32, a: ~bfloat16, bias: ~float32, batch: int, heads: int,
                 beta: float, threshold: float):
        self.attrs.warps = self.warps
        self.attrs.blocks = (batch, tilus.cdiv(heads, self.block))
        ho = self.blockIdx.y * self.block
        gw = self.global_view(w, shape=[heads])
        gb = self.global_view(bias, shape=[heads])
        ga = self.global_view(a, shape=[batch, heads])
        x = self.load_global(ga, offsets=[self.blockIdx.x, ho], shape=[self.block], dims=[1]).to(float32)
        x = x + self.load_global(gb, offsets=[ho], shape=[self.block])
        soft = self.where(x >= threshold, x, self.log(self.exp(x * beta) + 1.0) * (1.0 / beta))
        out = -self.exp(self.load_global(gw, offsets=[ho], shape=[self.block])) * soft
        self.store_global(self.global_view(g, shape=[batch, heads]), out, offsets=[self.blockIdx.x, ho], dims=[1])


class DLPackOnly:
    """An array known only by the DLPack protocol."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


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


def calls(fn):
    """A loop of `launches` calls of fn (what one round of a row runs)."""
    def loop(launches):
        for _ in range(launches):
            fn()
    return loop


def rounds_us(loops, launches, rounds, clock=time.perf_counter, sync=None):
    """{name: microseconds per launch} of the loops in `loops` ({name: loop(launches)}), timed in
    rounds taken in turn: each round runs every loop once (the order rotated by one every round),
    `sync` after each; a row's figure is the median of its rounds. One warm-up round first."""
    names = list(loops)
    for name in names:
        loops[name](max(1, launches // 10))
        if sync:
            sync()
    got = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = clock()
            loops[name](launches)
            if sync:
                sync()
            got[name].append((clock() - t0) / launches * 1e6)
    return {name: sorted(t)[len(t) // 2] for name, t in got.items()}


# The rows every other row is shown beside, and the goals of issue 41 (numerator, denominator, goal).
TORCH_ADD, TRITON, AOT = "torch.add (a + b, out=d)", "Triton", "tilus AOT bundle, C loop"
REUSED, GENERAL, IDIOM = ("tilus: reused instance", "tilus: general path (no fast path)",
                          "tilus: Tilus idiom (new autotuned instance, bf16, float constants)")
GOALS = [("Tilus idiom / torch.add", IDIOM, TORCH_ADD, 1.0), ("reused instance / AOT C loop", REUSED, AOT, 1.3),
         ("general path / reused instance", GENERAL, REUSED, 2.0)]


def table(us, title):
    """The rows beside torch.add, Triton and the AOT C loop, then the goals; a list of lines."""
    refs = [(TORCH_ADD, "/torch.add"), (TRITON, "/Triton"), (AOT, "/AOT loop")]
    lines = [title, f"{'call shape':68s} {'us':>8s}" + "".join(f" {label:>10s}" for _, label in refs)]
    for name, t in us.items():
        lines.append(f"{name:68s} {t:8.2f}" + "".join(f" {t / us[ref]:9.2f}x" if ref in us else f" {'-':>10s}"
                                                     for ref, _ in refs))
    for label, num, den, goal in GOALS:
        if num in us and den in us:
            r = us[num] / us[den]
            lines.append(f"goal: {label + f' <= {goal}':62s} {r:8.2f}x  {'met' if r <= goal else 'NOT MET'}")
    return lines


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--launches", type=int, default=2000, help="launches per row and round")
    p.add_argument("--rounds", type=int, default=21)
    args = p.parse_args()
    n = 1024
    L = args.launches
    a, b, c, d = (torch.randn(n, device="cuda") for _ in range(4))
    loops = {}  # name -> loop(launches)
    k = Add3()
    k(n, a, b, c, d)
    assert torch.allclose(d, a + b + c)
    loops[REUSED] = calls(lambda: k(n, a, b, c, d))
    Add3()(n, a, b, c, d)
    loops["tilus: new instance per call"] = calls(lambda: Add3()(n, a, b, c, d))
    loops["tilus: keyword arguments"] = calls(lambda: k(n=n, a=a, b=b, c=c, d=d))
    s = torch.cuda.current_stream()
    loops["tilus: stream="] = calls(lambda: k(n, a, b, c, d, stream=s))
    h = [t.to(torch.bfloat16) for t in (a, b, c, d)]
    kb = Add3Bf16()
    kb(n, 0.5, *h)
    torch.testing.assert_close(h[3].float(), (0.5 * h[0].float() + h[1].float() + h[2].float()), rtol=2e-2, atol=2e-2)
    loops["tilus: bf16 + float scalar"] = calls(lambda: kb(n, 0.5, *h))
    batch, heads = 1, 64
    w = torch.randn(heads, device="cuda") * 0.1
    bias = torch.randn(heads, device="cuda") * 0.1
    ab = torch.randn(batch, heads, device="cuda").to(torch.bfloat16)
    g = torch.empty(batch, heads, device="cuda")
    GatingIdiom()(g, w, ab, bias, batch, heads, 1.0, 20.0)
    x = ab.float() + bias
    torch.testing.assert_close(g, -torch.exp(w) * torch.nn.functional.softplus(x, 1.0, 20.0), rtol=1e-3, atol=1e-3)
    loops[IDIOM] = calls(lambda: GatingIdiom()(g, w, ab, bias, batch, heads, 1.0, 20.0))
    dl = [DLPackOnly(t) for t in (a, b, c, d)]
    k(n, *dl)
    loops["tilus: DLPack arrays"] = calls(lambda: k(n, *dl))
    try:
        import cupy
        cp = [cupy.asarray(t) for t in (a, b, c, d)]
        k(n, *cp)
        loops["tilus: cupy arrays"] = calls(lambda: k(n, *cp))
    except ImportError:
        pass

    def general():  # what a call does without the fast path: Python reads the arguments, the core checks them
        compiled, call = tilus_launch.prepare(k, (n, a, b, c, d), {})
        tilus_launch.run(compiled, call)

    loops[GENERAL] = calls(general)
    if triton is not None:
        grid = (triton.cdiv(n, 1024),)
        add3_kernel[grid](a, b, c, d, n, BLOCK=1024)
        assert torch.allclose(d, a + b + c)
        loops[TRITON] = calls(lambda: add3_kernel[grid](a, b, c, d, n, BLOCK=1024))
    loops[TORCH_ADD] = calls(lambda: torch.add(a, b, out=d))
    with tempfile.TemporaryDirectory(prefix="tilus-launch-") as workdir:
        so = aot_loop(workdir)
        if so is not None:
            stream = torch.cuda.current_stream().cuda_stream
            ptrs = [t.data_ptr() for t in (a, b, c, d)]
            d.zero_()
            assert so.bench_loop(stream, n, *ptrs, 1) == 0, so.bench_last_error()
            torch.cuda.synchronize()
            assert torch.allclose(d, a + b + c)
            loops[AOT] = lambda launches: so.bench_loop(stream, n, *ptrs, launches)  # one ctypes call a loop
        us = rounds_us(loops, L, args.rounds, sync=torch.cuda.synchronize)
    print("\n".join(table(us, f"launch overhead, {torch.cuda.get_device_name()}: us per launch, median of {args.rounds} "
                               f"rounds of {L} launches per row, rows taken in turn")))


if __name__ == "__main__":
    main()
