"""Shared helpers of the Python examples: random inputs on the GPU (torch) when one is usable,
else on the host (numpy: the kernels then run on the CPU backend), result checks, timing, and
16-bit floats on the host (numpy has no bfloat16)."""
import os
import sys
import time

import tilus


def on_gpu():
    if os.environ.get("TILUS_TARGET") == "cpu" or not tilus.gpu_available():
        return False
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def arrays(dtype, *shapes, scale=1.0):
    """(module, device, *random arrays) on the GPU with torch, else numpy on the host."""
    if on_gpu():
        import torch
        torch.manual_seed(0)
        dt = getattr(torch, dtype)
        return (torch, "cuda", *[(torch.rand(s, device="cuda") * 2 - 1).mul(scale).to(dt) for s in shapes])
    import numpy as np
    rng = np.random.default_rng(0)
    return (np, "cpu", *[((rng.random(s) * 2 - 1) * scale).astype(dtype) for s in shapes])


def to_numpy(x):
    if hasattr(x, "detach"):
        return x.detach().float().cpu().numpy()
    return x.astype("float64")


def check(name, got, want, atol, rtol):
    import numpy as np
    g, w = to_numpy(got).astype("float64"), to_numpy(want).astype("float64")
    err = np.abs(g - w)
    bad = err > atol + rtol * np.abs(w)
    if bad.any():
        i = np.argwhere(bad)[0]
        sys.exit(f"{name}: FAIL at {tuple(int(x) for x in i)}: got {g[tuple(i)]} want {w[tuple(i)]} "
                 f"(max abs err {err.max():.3g})")
    print(f"{name}: PASS (max abs err {err.max():.3g})")


def timed(fn, device, repeat=20):
    """Median milliseconds of `repeat` calls after a warm-up."""
    fn()
    times = []
    if device == "cuda":
        import torch
        for _ in range(repeat):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
    else:
        for _ in range(min(repeat, 5)):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def matmul_main(name, kernel, sizes=((301, 517, 203),), large=None, b_nk=False):
    """Runs a matmul Script (m, n, k, a, b, c; f16) on ragged sizes against a float64
    reference, then times it at `large` (4096 on the GPU, 512 on the CPU backend). `b_nk`: b is
    stored [n, k] (c = a @ b.T, as the wgmma examples take it)."""
    for m, n, k in sizes:
        xp, device, a, b = arrays("float16", (m, k), (n, k) if b_nk else (k, n))
        c = xp.empty((m, n), dtype=a.dtype) if xp.__name__ == "numpy" else xp.empty((m, n), dtype=a.dtype, device=device)
        kernel(m, n, k, a, b, c)
        bt = to_numpy(b).astype("float64")
        want = to_numpy(a).astype("float64") @ (bt.T if b_nk else bt)
        check(f"{name} {m}x{n}x{k}", c, want, 1e-2, 1e-2)
    if os.environ.get("TILUS_EXAMPLES_QUICK"):  # correctness only (sanitizer runs)
        return
    s = large or (4096 if device == "cuda" else 512)
    xp, device, a, b = arrays("float16", (s, s), (s, s))
    c = xp.empty((s, s), dtype=a.dtype) if xp.__name__ == "numpy" else xp.empty((s, s), dtype=a.dtype, device=device)
    ms = timed(lambda: kernel(s, s, s, a, b, c), device)
    unit, scale = ("TFLOP/s", 1e9) if device == "cuda" else ("GFLOP/s", 1e6)
    print(f"{name}: {s}^3 in {ms:.3f} ms = {2 * s ** 3 / ms / scale:.1f} {unit} on {device}")


def round_to(x, dt):
    """float64 values rounded (to nearest even) to float16, bfloat16 or float32, as float64."""
    import numpy as np
    if dt == tilus.float16:
        return np.asarray(x).astype(np.float16).astype(np.float64)
    if dt == tilus.float32:
        return np.asarray(x).astype(np.float32).astype(np.float64)
    x32 = np.asarray(x, np.float32)
    bits = x32.view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) << 16
    return np.where(np.isnan(x32), np.nan, bits.astype(np.uint32).view(np.float32).astype(np.float64))


def host_array(x, dt):
    """float64 values as the host array a kernel reads for dt: float16 or float32, or bfloat16's
    bits (uint16)."""
    import numpy as np
    if dt != tilus.bfloat16:
        return np.asarray(x).astype(np.float16 if dt == tilus.float16 else np.float32)
    return (np.asarray(round_to(x, dt), np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_host_array(x, dt):
    """host_array's inverse (float64); also takes a torch tensor."""
    import numpy as np
    if hasattr(x, "cpu"):
        return x.float().cpu().numpy().astype(np.float64)
    if dt != tilus.bfloat16:
        return np.asarray(x).astype(np.float64)
    x = np.asarray(x)
    x = x.view(np.uint16) if x.dtype == np.int16 else x  # torch has no uint16 on every version
    return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


# --- split kernels whose last block finishes the work (split-K, split-KV) ---------------------

def last_to_arrive(script, counters, offsets, count, slot=None):
    """Counts this block's arrival at counters[offsets] (an int32 global_view, zero before the
    launch) and returns the kernel condition "this block is the last of `count` to arrive". What
    the thread group stored before comes before its arrival (its barrier, then one thread's
    acq_rel atomic at GPU scope: the release), and what the last block loads after (the acquire,
    then the barrier). The last block puts the counter back with reset_arrivals. slot: a shared
    int32 tensor of shape [1] * len(offsets) for the count seen (None: one made here; a kernel
    whose asynchronous copies end just before makes it beforehand, so that it cannot share
    their memory)."""
    int32 = tilus.int32
    script.sync()
    shape = [1] * len(offsets)
    before = script.shared_tensor(dtype=int32, shape=shape) if slot is None else slot
    with script.single_thread():
        one = script.register_tensor(dtype=int32, shape=shape, init=1)
        script.store_shared(before, script.atomic.global_add(counters, one, offsets=offsets, sem="acq_rel"))
    script.sync()
    return script.load_shared(before).item() == count - 1


def reset_arrivals(script, counters, offsets):
    """The last block's counters[offsets] back to zero, ready for the next launch."""
    with script.single_thread():
        script.store_global(counters, script.register_tensor(dtype=tilus.int32, shape=[1] * len(offsets), init=0),
                            offsets=offsets)


class ArrivalCounters:
    """The zeroed int32 counters of last_to_arrive, kept between launches (the last block of each
    set puts its counter back to zero): one launch at a time uses them (a launch on another
    stream while one runs would share them)."""

    def __init__(self):
        self.counters = None

    def __call__(self, like, size):
        """At least `size` counters where `like` lives: torch on its device, or numpy."""
        if self.counters is None or len(self.counters) < size or \
                hasattr(like, "cpu") != hasattr(self.counters, "cpu") or \
                (hasattr(like, "cpu") and self.counters.device != like.device):
            if hasattr(like, "cpu"):  # torch (numpy arrays have a `device` too)
                import torch
                self.counters = torch.zeros(size, dtype=torch.int32, device=like.device)
            else:
                import numpy as np
                self.counters = np.zeros(size, np.int32)
        return self.counters


# --- choosing a configuration by measurement --------------------------------------------------

def compile_all(candidates, call):
    """Compiles the kernel of every configuration (call(cfg) -> (kernel, its arguments)) in
    parallel threads (the compiler runs outside the GIL)."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=max(1, min(len(candidates), os.cpu_count() or 1))) as pool:
        list(pool.map(lambda cfg: (lambda kernel, args: kernel.compiled(*args))(*call(cfg)), candidates))


def timed_configs(candidates, call, repeat=7):
    """[(ms, configuration)] of every configuration of `candidates`, fastest first, on the GPU:
    each launch (call(cfg) -> (kernel, its arguments)) compiled in parallel first, then launched
    once (loading it) and timed `repeat` times after an L2 flush (a 256 MB read, as bench/run.py
    flushes: a fill would leave L2 full of dirty lines whose write-back slows the timed kernel's
    reads, the more so the closer it runs to the memory's rate; CUDA events; the median), in
    rounds that time each configuration once: the GPU's clocks follow its recent load, so one
    configuration's timings all in a row may meet other clocks than the next one's (the H200
    timed one W4A16 candidate 168.7 and 187.5 us in two calls, its rivals within 5 %). Each
    launch's arguments are built before its events and the launch itself queues behind the flush
    (~70 us of GPU time on an H200), so a configuration's host cost below that is not timed."""
    import torch
    compile_all(candidates, call)
    flush = torch.ones(32 << 20, dtype=torch.int64, device="cuda")  # 256 MB: more than L2

    for cfg in candidates:
        kernel, args = call(cfg)
        kernel(*args)  # the first launch loads the compiled kernel
    times = [[] for _ in candidates]
    for _ in range(repeat):
        for j, cfg in enumerate(candidates):
            kernel, args = call(cfg)  # before the events: building the arguments is host time only
            flush.sum()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            kernel(*args)
            end.record()
            end.synchronize()
            times[j].append(start.elapsed_time(end))
    out = [(sorted(t)[len(t) // 2], cfg) for t, cfg in zip(times, candidates)]
    return sorted(out, key=lambda x: x[0])
