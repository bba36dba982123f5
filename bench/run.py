"""tilus against torch (cuBLAS) and Triton, measured in one run on one GPU.

    python bench/run.py [--build build] [--size 4096] [--elements N] [--only-matmul]

Prints a table of times and ratios (tilus / reference: >1 means tilus is faster for
bandwidth and throughput). The tilus figures come from build/bench/bench_tilus, which this
script runs as a subprocess; torch and Triton are timed here with CUDA events, each launch
after an L2 flush, median of many runs.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # Triton is optional: its rows are then marked missing
    triton = None


def interleaved_ms(fns, rounds=3, repeat=20, queued=False, per_round=None, mixed=False, stamps=None, warm_s=0.0,
                   lead=0):
    """{name: ms} for the callables in `fns`, timed in turn: `rounds` rounds of `repeat` launches
    each (median_ms), in a new random order every round (seeded: the same orders in every run),
    and the median of each one's rounds. A long run heats the GPU and lowers its clocks (an 8192^3
    matmul timed first runs 10-15 % faster than in the steady state that follows), so each gets a
    mix of states. The order is shuffled rather than rotated: a rotation keeps each one behind the
    same predecessor in every round, and on the H200 the kernel timed right after a slow one (SDPA's
    flash backend) read up to 9 % faster than the same kernel elsewhere in the order (two calls of
    2026-11-29). One warm-up round first. `queued`: median_ms's. `per_round`, a dict: each one's
    round medians go there (the spread between rounds: an even count of rounds reports the slower
    middle one). `mixed`: a round is `repeat` passes, each launching every one once in a new random
    order (each after an L2 flush), and each one's figure of the round the median of its launches:
    the callables share the GPU's clock and heat launch by launch instead of one running 20 times
    in a row (not with `queued`). `stamps`, a list: each round's start (time.time()) goes there
    (to set beside a trace of the GPU's clocks). `warm_s`: first the callables in turn for that many
    seconds: an H200 that idled (a shape's setup, a compile) runs its first ~1 s of attention above
    the clock its 700 W limit then holds (1980 MHz falling to 1450-1750: rounds timed in that time
    read up to 15 % fast, and the first kernel timed the fastest). `lead`: median_ms's."""
    names = list(fns)
    for name in names:
        median_ms(fns[name], 3, queued, lead)
    until = time.perf_counter() + warm_s
    while time.perf_counter() < until:
        for name in names:
            fns[name]()
        torch.cuda.synchronize()
    got = {name: [] for name in names}
    order = random.Random(len(names) * 1000 + rounds)
    for _ in range(rounds):
        if stamps is not None:
            stamps.append(time.time())
        if mixed:
            assert not queued, "interleaved_ms: mixed rounds time each launch on its own"
            times = {name: [] for name in names}
            for i in range(repeat):
                for name in order.sample(names, len(names)):
                    times[name].append(_flushed_ms(fns[name], lead))
            for name in names:
                got[name].append(sorted(times[name])[repeat // 2])
            continue
        for name in order.sample(names, len(names)):
            got[name].append(median_ms(fns[name], repeat, queued, lead))
    if per_round is not None:
        per_round.update(got)
    return {name: sorted(t)[len(t) // 2] for name, t in got.items()}


def host_us(fn, calls=50):
    """Microseconds of host time a call of fn takes, the GPU kept busy meanwhile (the calls queue
    behind a sleep of ~9 ms, so none waits): the launch path's own cost, a figure apart from the
    GPU time."""
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(1 << 24)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return t


_SCRUB = []


def _flush():
    """Flush L2 before a launch by reading a 256 MB buffer (one a process, filled once), so that
    L2 is left holding clean lines. A fill would leave it full of dirty lines, whose write-back
    then slows the timed kernel's reads: a plain read of the weights measured 20-23 % slower after
    a fill than after a read on an H200, a W4A16 kernel 5-8 %; the clean flush is what a kernel
    meets behind ordinary kernels, and the honest read floor."""
    if not _SCRUB:
        _SCRUB.append(torch.ones(32 << 20, dtype=torch.int64, device="cuda"))
    _SCRUB[0].sum()


def _flushed_ms(fn, lead=0):
    """Milliseconds of one launch of fn after an L2 flush (a 256 MB read), waited for; `lead`: the
    GPU first sleeps that many cycles (torch.cuda._sleep), the host's head start (median_ms)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if lead:
        torch.cuda._sleep(lead)
    _flush()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def median_ms(fn, repeat=50, queued=False, lead=0):
    """The median of `repeat` launches of fn, each timed with CUDA events after an L2 flush (a
    256 MB read). Each launch waits for the one before it: the events then time fn's host cost too
    wherever it exceeds the flush's GPU time (~70 us on an H200). `queued`: the GPU first sleeps
    while the host queues every launch (and its fill), so that the events time the GPU's work
    alone, as tilus.utils.benchmark_func does (a launch that is called once per decoded token
    runs so, behind the step's other kernels; its host cost is then a figure of its own). `lead`
    (cycles): before each flush the GPU sleeps that long, so that a host cost up to the sleep and
    the flush together is not timed (bench/w4a16.py: QuantizedMatmul's call took 35-48 us of host
    time a launch on the H200, a torch call 30-38, and one in five went past the flush, whose
    launches then timed 1.2-3x their GPU time: mid call of 2026-11-29 14:41)."""
    fn()
    torch.cuda.synchronize()
    if not queued:
        times = sorted(_flushed_ms(fn, lead) for _ in range(repeat))
        return times[len(times) // 2]
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeat)]
    torch.cuda._sleep(150000 * repeat)  # ~90 us a launch at 1.7 GHz: more than its host cost
    for i, (start, end) in enumerate(events):
        _flush()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in events)
    return times[len(times) // 2]


if triton is not None:

    @triton.autotune(
        configs=[
            triton.Config({"BM": 128, "BN": 256, "BK": 64, "G": 8}, num_stages=3, num_warps=8),
            triton.Config({"BM": 128, "BN": 128, "BK": 64, "G": 8}, num_stages=4, num_warps=4),
            triton.Config({"BM": 128, "BN": 128, "BK": 32, "G": 8}, num_stages=4, num_warps=4),
            triton.Config({"BM": 64, "BN": 256, "BK": 32, "G": 8}, num_stages=4, num_warps=4),
            triton.Config({"BM": 128, "BN": 64, "BK": 32, "G": 8}, num_stages=4, num_warps=4),
        ],
        key=["M", "N", "K"],
    )
    @triton.jit
    def triton_matmul_kernel(a, b, c, M, N, K, sbk, sbn, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                             G: tl.constexpr):
        # Grouped tile order so neighbouring programs share rows of a in L2.
        pid = tl.program_id(0)
        tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = pid // (G * tiles_n)
        first_m = group * G
        rows = min(tiles_m - first_m, G)
        tile_m = first_m + (pid % rows)
        tile_n = (pid % (G * tiles_n)) // rows
        rm = tile_m * BM + tl.arange(0, BM)
        rn = tile_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            ka = k0 + rk
            x = tl.load(a + rm[:, None] * K + ka[None, :], mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
            y = tl.load(b + ka[:, None] * sbk + rn[None, :] * sbn, mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(x, y, acc)
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

    def triton_matmul(a, b, c):
        """c = a @ b for a [M, K] row-major and b a [K, N] view with any strides (b.T of an [N, K]
        tensor for the wgmma rows)."""
        M, K = a.shape
        N = b.shape[1]
        grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)
        triton_matmul_kernel[grid](a, b, c, M, N, K, b.stride(0), b.stride(1))


def run_tilus(build, *args, env=None):
    exe = os.path.join(build, "bench", "bench_tilus")
    out = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"bench_tilus {' '.join(map(str, args))} failed:\n{out.stdout}{out.stderr}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def tilus_python(build):
    """The tilus Python package of `build` with the Python examples importable (None without it)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    sys.path[:0] = [os.path.join(build, "python"), os.path.join(root, "examples", "python")]
    try:
        import tilus
        return tilus
    except ImportError as e:
        print(f"tilus Python package not found in {build}/python ({e}): its rows are skipped", flush=True)
        return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"))
    p.add_argument("--size", type=int, default=4096, help="matmul M = N = K")
    p.add_argument("--elements", type=int, default=1 << 26, help="vector add length")
    p.add_argument("--only-matmul", action="store_true",
                   help="only the f16 matmul section (cuBLAS, Triton, tilus with dot as wgmma and as mma.sync)")
    p.add_argument("--only-hopper", action="store_true",
                   help="only the Hopper matmul section (a @ b.T, f16 and bf16, the hopper_matmul examples)")
    p.add_argument("--only-auto", action="store_true",
                   help="only the plain Scripts the compiler pipelines (matmul_auto.py beside cuBLAS, Triton and "
                        "hopper_matmul_v6.py; conv2d_auto.py beside cuDNN)")
    p.add_argument("--hopper-shapes", default="4096x4096x4096,8192x8192x8192,4000x4000x4000,8192x1024x8192",
                   help="the Hopper matmul section's shapes, MxNxK separated by commas (default: %(default)s)")
    args = p.parse_args()
    rows = []  # (benchmark, implementation, figure, ratio text)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  "
          f"triton {triton.__version__ if triton else 'missing'}", flush=True)

    tilus_py = tilus_python(args.build)

    # --- vector add bandwidth -------------------------------------------------------------
    if not (args.only_matmul or args.only_hopper or args.only_auto):
        n = args.elements
        x = torch.randn(n, device="cuda")
        y = torch.randn(n, device="cuda")
        z = torch.empty_like(x)
        copy_ms = median_ms(lambda: z.copy_(x))
        add_ms = median_ms(lambda: torch.add(x, y, out=z))
        copy_gbps = 2 * n * 4 / copy_ms / 1e6
        add_gbps = 3 * n * 4 / add_ms / 1e6
        tilus_va = run_tilus(args.build, "vector_add", n)[0]
        rows.append(("vector add f32", "torch copy_", f"{copy_gbps:.0f} GB/s", ""))
        rows.append(("vector add f32", "torch add", f"{add_gbps:.0f} GB/s", ""))
        rows.append(("vector add f32", "tilus", f"{tilus_va['gbps']:.0f} GB/s",
                     f"{tilus_va['gbps'] / copy_gbps:.2f}x copy, {tilus_va['gbps'] / add_gbps:.2f}x add"))

    # --- TMA (sm_90): a 2-D copy by TMA load + TMA store, and the TMA-fed mma.sync matmul ------
    if not (args.only_matmul or args.only_hopper or args.only_auto):
        if tilus_py is not None and torch.cuda.get_device_capability() >= (9, 0):
            from tma_copy import TmaCopy
            side = 8192
            x2 = torch.randn(side, side, device="cuda")
            y2 = torch.empty_like(x2)
            copy2_ms = median_ms(lambda: y2.copy_(x2))
            tma = TmaCopy()
            tma(side, side, x2, y2)
            assert torch.equal(x2, y2), "tilus TMA copy is wrong"
            tma_ms = median_ms(lambda: tma(side, side, x2, y2))
            gb = 2 * side * side * 4 / 1e6
            rows.append((f"copy f32 {side}^2", "torch copy_", f"{gb / copy2_ms:.0f} GB/s", ""))
            rows.append((f"copy f32 {side}^2", "tilus tma_copy.py", f"{gb / tma_ms:.0f} GB/s",
                         f"{copy2_ms / tma_ms:.2f}x copy_"))

    # --- conv2d (sm_90): examples/python/conv2d.py with TMA im2col and with gathers, against
    if not (args.only_matmul or args.only_hopper):
        # cuDNN through torch on the same NHWC (channels_last) tensors; Triton has no conv2d -----
        if tilus_py is not None and torch.cuda.get_device_capability() >= (9, 0):
            from conv2d import Conv2d
            n, h, w, ch, f = 32, 56, 56, 64, 64
            img = torch.randn(n, h, w, ch, device="cuda", dtype=torch.float16)
            wt = torch.randn(f, 3, 3, ch, device="cuda", dtype=torch.float16)
            out = torch.empty(n, h, w, f, device="cuda", dtype=torch.float16)
            x_nchw, w_nchw = img.permute(0, 3, 1, 2), wt.permute(0, 3, 1, 2)  # channels_last views
            conv = lambda: torch.nn.functional.conv2d(x_nchw, w_nchw, padding=1)
            want = conv().permute(0, 2, 3, 1).float()
            cudnn_ms = median_ms(conv)
            what = f"conv2d f16 {n}x{h}x{w}x{ch}->{f} 3x3"
            flops = 2 * n * h * w * f * 9 * ch
            rows.append((what, "torch (cuDNN, channels_last)", f"{flops / cudnn_ms / 1e9:.0f} TFLOP/s", ""))
            from conv2d_auto import Conv2dAuto
            from conv2d_wgmma import Conv2dWgmma, Conv2dWgmmaPersistent
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            # conv2d_auto.py: the plain implicit GEMM the compiler pipelines (issue 39), in its
            # default (warp-specialized, persistent) and as written (one block per tile).
            kernels = (("tilus conv2d_auto.py (plain Script: pipelined, warp-specialized, persistent)",
                        Conv2dAuto(3, 1, 1, 1)),
                       ("tilus conv2d_auto.py, 128x64x64 tiles, 4 warps", Conv2dAuto(3, 1, 1, 1, block_m=128, warps=4)),
                       ("tilus conv2d_auto.py without warp_specialize / persistent",
                        Conv2dAuto(3, 1, 1, 1, warp_specialize=False, persistent=False)),
                       ("tilus conv2d_wgmma.py, persistent warp-specialized (256x64x64)",
                        Conv2dWgmmaPersistent(3, 1, 1, 1, blocks=sms)))
            if not args.only_auto:
                kernels += (("tilus conv2d_wgmma.py (TMA im2col + wgmma, 4 stages)", Conv2dWgmma(3, 1, 1, 1)),
                            ("tilus conv2d.py, TMA im2col", Conv2d(3, 1, 1, 1, c_multiple=32)),
                            ("tilus conv2d.py, gathers", Conv2d(3, 1, 1, 1)))
            for label, kernel in kernels:
                kernel(n, h, w, ch, f, img, wt, out)
                err = (out.float() - want).abs().max().item()
                assert err < 0.05 * want.abs().max().item(), f"{label} is wrong: max abs err {err}"
                ms = median_ms(lambda: kernel(n, h, w, ch, f, img, wt, out))
                rows.append((what, label, f"{flops / ms / 1e9:.0f} TFLOP/s", f"{cudnn_ms / ms:.2f}x cuDNN"))

    # --- f16 matmul ------------------------------------------------------------------------
    if not (args.only_hopper or args.only_auto):
        s = args.size
        a = torch.randn(s, s, device="cuda", dtype=torch.float16)
        b = torch.randn(s, s, device="cuda", dtype=torch.float16)
        c = torch.empty(s, s, device="cuda", dtype=torch.float16)
        flops = 2 * s ** 3
        cublas_ms = median_ms(lambda: torch.matmul(a, b, out=c), 30)
        rows.append((f"matmul f16 {s}^3", "torch (cuBLAS)", f"{flops / cublas_ms / 1e9:.0f} TFLOP/s", ""))
        triton_ms = None
        if triton is not None:
            triton_matmul(a, b, c)  # autotunes
            ref = torch.matmul(a, b)
            assert torch.allclose(c.float(), ref.float(), atol=1e-1, rtol=1e-2), "Triton matmul is wrong"
            triton_ms = median_ms(lambda: triton_matmul(a, b, c), 30)
            rows.append((f"matmul f16 {s}^3", "Triton", f"{flops / triton_ms / 1e9:.0f} TFLOP/s", ""))
        if tilus_py is not None and torch.cuda.get_device_capability() >= (9, 0):
            from matmul_tma import MatmulTma
            mt = MatmulTma()
            mt(s, s, s, a, b, c)
            assert torch.allclose(c.float(), torch.matmul(a, b).float(), atol=1e-1, rtol=1e-2), "tilus matmul_tma is wrong"
            mt_ms = median_ms(lambda: mt(s, s, s, a, b, c), 30)
            ratio = f"{cublas_ms / mt_ms:.2f}x cuBLAS" + (f", {triton_ms / mt_ms:.2f}x Triton" if triton_ms else "")
            rows.append((f"matmul f16 {s}^3", "tilus matmul_tma.py (TMA loads, dot)", f"{flops / mt_ms / 1e9:.0f} TFLOP/s",
                         ratio))
        # bench_tilus's configs (cp.async + load_shared + dot): on sm_90a the dot runs as wgmma
        # (lower_dots_to_wgmma), and once more as mma.sync (TILUS_DOT_WGMMA=0).
        results = run_tilus(args.build, "matmul", s, s, s)
        if torch.cuda.get_device_capability() == (9, 0):
            for r in results:
                r["config"] += " (dot as wgmma)"
            mma = run_tilus(args.build, "matmul", s, s, s, env=dict(os.environ, TILUS_DOT_WGMMA="0"))
            for r in mma:
                r["config"] += " (mma.sync)"
            results += mma
        if tilus_py is not None:
            # examples/python/matmul_v3.py the same two ways (a class of its own per way: compiled
            # kernels are kept per class, and TILUS_DOT_WGMMA is read when one compiles).
            from matmul_v3 import MatmulV3
            for mode, what in (("auto", "dot as wgmma"), ("0", "mma.sync")):
                os.environ["TILUS_DOT_WGMMA"] = mode
                v3 = type(f"MatmulV3_{mode}", (MatmulV3,), {})()
                c.zero_()
                v3(s, s, s, a, b, c)
                assert torch.allclose(c.float(), torch.matmul(a, b).float(), atol=1e-1, rtol=1e-2), "matmul_v3 is wrong"
                ms = median_ms(lambda: v3(s, s, s, a, b, c), 30)
                results.append({"config": f"matmul_v3.py 128x128x32 3 stages ({what})", "ms": ms, "tflops": flops / ms / 1e9})
            os.environ.pop("TILUS_DOT_WGMMA")
        best = min((r for r in results if "ms" in r), key=lambda r: r["ms"], default=None)
        for r in results:
            label = f"tilus {r['config']}" + (" (best)" if r is best else "")
            if "error" in r:
                rows.append((f"matmul f16 {s}^3", label, "failed", r["error"][:60]))
                continue
            ratio = f"{cublas_ms / r['ms']:.2f}x cuBLAS"
            if triton_ms:
                ratio += f", {triton_ms / r['ms']:.2f}x Triton"
            rows.append((f"matmul f16 {s}^3", label, f"{r['tflops']:.0f} TFLOP/s", ratio))

    # --- Hopper matmul: c = a @ b.T (b stored [n, k], K-major as wgmma reads it) ----------------
    if not args.only_matmul:
        if tilus_py is not None and torch.cuda.get_device_capability() == (9, 0):
            from hopper_matmul_v3 import hopper_matmul_v3
            from hopper_matmul_v5 import hopper_matmul_v5
            from hopper_matmul_v6 import hopper_matmul_v6
            from matmul_auto import matmul_auto
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            # The best of these per shape is reported: (example, its class factory, config).
            configs = [("v3", hopper_matmul_v3, dict(blocks=sms)), ("v3", hopper_matmul_v3, dict(blocks=sms, block_m=256, block_n=128)),
                       ("v5", hopper_matmul_v5, dict(blocks=sms // 2 * 2)), ("v6", hopper_matmul_v6, dict(blocks=sms // 2 * 2))]
            if args.only_auto:
                configs = [c for c in configs if c[0] == "v6"]
            # examples/python/matmul_auto.py, the plain Script the compiler pipelines (issue 39): its
            # own rows per shape, in its default (warp-specialized, persistent 128x256x64, 3 stages,
            # the tile stored through shared memory and TMA stores), with 4 stages (no room for the
            # TMA-store epilogue's tile: stores from registers) and with 6 stages of k = 32.
            autos = [("default", dict()), ("4 stages, stores from registers", dict(stages=4)),
                     ("128x256x32, 6 stages", dict(block_k=32, stages=6))]
            shapes = [tuple(int(x) for x in s.split("x")) for s in args.hopper_shapes.split(",")]
            for name, tdt, dt in (("f16", torch.float16, tilus_py.float16), ("bf16", torch.bfloat16, tilus_py.bfloat16)):
                kernels = [((v, tuple(cfg.items())), make(dt)(**cfg)) for v, make, cfg in configs]
                auto_kernels = [(("auto", label), matmul_auto(dt)(**cfg)) for label, cfg in autos]
                for m, n, k in shapes:
                    what = f"matmul {name} {m}x{n}x{k}, a @ b.T"
                    a = torch.randn(m, k, device="cuda", dtype=tdt)
                    b = torch.randn(n, k, device="cuda", dtype=tdt)
                    c = torch.empty(m, n, device="cuda", dtype=tdt)
                    flops = 2 * m * n * k
                    ref = torch.matmul(a, b.T)
                    fns = {"cuBLAS": lambda: torch.matmul(a, b.T, out=c)}
                    if triton is not None:
                        triton_matmul(a, b.T, c)
                        assert torch.allclose(c.float(), ref.float(), atol=1e-1, rtol=2e-2), "Triton matmul is wrong"
                        fns["Triton"] = lambda: triton_matmul(a, b.T, c)
                    for cfg, kernel in kernels + auto_kernels:
                        c.fill_(float("nan"))
                        kernel(m, n, k, a, b, c)
                        assert torch.allclose(c.float(), ref.float(), atol=1e-1, rtol=2e-2), f"tilus {cfg} is wrong"
                        fns[cfg] = lambda kernel=kernel: kernel(m, n, k, a, b, c)
                    ms_of = interleaved_ms(fns)
                    cublas_ms, triton_ms = ms_of["cuBLAS"], ms_of.get("Triton")
                    rows.append((what, "torch (cuBLAS)", f"{flops / cublas_ms / 1e9:.0f} TFLOP/s", ""))
                    if triton_ms:
                        rows.append((what, "Triton", f"{flops / triton_ms / 1e9:.0f} TFLOP/s", ""))
                    best = min(((ms_of[cfg], cfg) for cfg, _ in kernels), key=lambda x: x[0])
                    ms, (v, cfg) = best
                    ratio = f"{cublas_ms / ms:.2f}x cuBLAS" + (f", {triton_ms / ms:.2f}x Triton" if triton_ms else "")
                    shown = ",".join(f"{k_}={x}" for k_, x in cfg if k_ != "blocks")
                    label = f"tilus hopper_matmul_{v}.py " + (shown or "128x256x64")
                    rows.append((what, label, f"{flops / ms / 1e9:.0f} TFLOP/s", ratio))
                    for cfg, _ in auto_kernels:
                        ms = ms_of[cfg]
                        ratio = f"{cublas_ms / ms:.2f}x cuBLAS" + (f", {triton_ms / ms:.2f}x Triton" if triton_ms else "")
                        rows.append((what, f"tilus matmul_auto.py ({cfg[1]}: plain Script, pipelined by the compiler)",
                                     f"{flops / ms / 1e9:.0f} TFLOP/s", ratio))

    # --- start-up: a new process, cold cache then warm cache -----------------------------------
    if not (args.only_matmul or args.only_hopper or args.only_auto):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TILUS_CACHE_DIR=cache)
            for label in ("cold cache", "cached"):
                t0 = time.perf_counter()
                r = run_tilus(args.build, "startup", 1024, 1024, 1024, env=env)[0]
                wall = (time.perf_counter() - t0) * 1e3
                rows.append(("matmul start-up", f"tilus, {label}", f"{r['first_result_ms']:.0f} ms",
                             f"process {wall:.0f} ms, NVRTC {r['nvrtc_ms']:.0f} ms, from cache: {r['from_cache']}"))

    width = [max(len(str(row[i])) for row in rows) for i in range(4)]
    print()
    for row in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, width)))


if __name__ == "__main__":
    main()
