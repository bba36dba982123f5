"""Benchmarking helpers.

    ms = tilus.testing.do_bench(lambda: kernel(m, n, k, a, b, c))

``do_bench`` takes the name and parameters of Triton's ``triton.testing.do_bench`` so that
benchmarks move between the two unchanged.
"""
import math
import time

from . import _C

_MODES = ("min", "max", "mean", "median", "all")


def _quantile(sorted_times, q):
    """The q-quantile (0 <= q <= 1) of sorted values, interpolated linearly between ranks."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"do_bench: quantile {q} is not in [0, 1]")
    at = q * (len(sorted_times) - 1)
    lo, hi = math.floor(at), math.ceil(at)
    return sorted_times[lo] + (sorted_times[hi] - sorted_times[lo]) * (at - lo)


def _summary(times, quantiles, return_mode):
    ordered = sorted(times)
    if quantiles is not None:
        out = [_quantile(ordered, q) for q in quantiles]
        return out[0] if len(out) == 1 else out
    if return_mode == "all":
        return list(times)
    if return_mode == "min":
        return ordered[0]
    if return_mode == "max":
        return ordered[-1]
    if return_mode == "median":
        return _quantile(ordered, 0.5)
    return sum(times) / len(times)


def _torch_cuda():
    """torch, when it can time CUDA work with events; else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _clear_grads(grad_to_none):
    if grad_to_none is not None:
        for t in grad_to_none:
            t.grad = None


def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean", *, device=None):
    """The run time of ``fn()`` in milliseconds.

    ``fn`` first runs for about ``warmup`` ms (not measured), then about ``rep`` ms of separate
    calls are each timed. On the GPU (``device="cuda"``) each call is timed with CUDA events on
    torch's current stream after the L2 cache is flushed; on the CPU (``device="cpu"``, the CPU
    backend's kernels return when done) with the wall clock. ``device`` defaults to "cuda" when
    torch sees a GPU and tilus can use it, else "cpu".

    Returns, by ``return_mode``, the "min", "max", "mean" (default) or "median" time, or "all"
    times as a list; with ``quantiles`` (a list of numbers in [0, 1]) the times at those
    quantiles instead (a single number for one quantile). ``grad_to_none`` (a list of tensors)
    has their ``.grad`` reset before every call, as in Triton.
    """
    if return_mode not in _MODES:
        raise ValueError(f"do_bench: return_mode must be one of {', '.join(_MODES)}, got {return_mode!r}")
    if device not in (None, "cuda", "cpu"):
        raise ValueError(f"do_bench: device must be 'cuda' or 'cpu', got {device!r}")
    torch = _torch_cuda() if device != "cpu" and _C.gpu_available() else None
    if device == "cuda" and torch is None:
        raise RuntimeError("do_bench(device='cuda') needs torch with CUDA and a GPU tilus can use")
    if torch is not None:
        times = _bench_cuda(torch, fn, warmup, rep, grad_to_none)
    else:
        times = _bench_wall(fn, warmup, rep, grad_to_none)
    return _summary(times, quantiles, return_mode)


def _counts(estimate_ms, warmup, rep):
    estimate_ms = max(estimate_ms, 1e-6)
    return max(1, int(warmup / estimate_ms)), max(1, int(rep / estimate_ms))


def _bench_wall(fn, warmup, rep, grad_to_none):
    start = time.perf_counter()
    for _ in range(5):
        fn()
    estimate = (time.perf_counter() - start) * 1000.0 / 5
    n_warmup, n_rep = _counts(estimate, warmup, rep)
    for _ in range(n_warmup):
        fn()
    times = []
    for _ in range(n_rep):
        _clear_grads(grad_to_none)
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000.0)
    return times


def _bench_cuda(torch, fn, warmup, rep, grad_to_none):
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")  # larger than any L2
    fn()
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(5):
        cache.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    n_warmup, n_rep = _counts(begin.elapsed_time(end) / 5, warmup, rep)
    for _ in range(n_warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for i in range(n_rep):
        _clear_grads(grad_to_none)
        cache.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]
