"""The CPU backend against Triton's interpreter (TRITON_INTERPRET=1), one run, one machine.

    python bench/run_cpu.py [--bench build/bench/bench_cpu] [--size 500]

Both run the same matmul: f16 inputs, f32 accumulation, f16 output, M = N = K = size, on
the CPU. Triton's interpreter is timed on torch CPU tensors for three tile configs (its
fastest is the reference); tilus figures come from bench_cpu (a subprocess). torch's own CPU
matmul (float32) is shown for scale. Prints a table; ratios > 1 mean tilus is faster.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402

try:
    import triton  # noqa: E402
    import triton.language as tl  # noqa: E402
except ImportError:
    triton = None

if triton is not None:

    @triton.jit
    # K is a constexpr: Triton 3.6's interpreter cannot iterate range() over a runtime int.
    def matmul_kernel(a, b, c, M, N, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            ka = k0 + rk
            x = tl.load(a + rm[:, None] * K + ka[None, :], mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.0)
            y = tl.load(b + ka[:, None] * N + rn[None, :], mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(x, y, acc)
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", default=os.path.join(os.path.dirname(__file__), "..", "build", "bench", "bench_cpu"),
                   help="the bench_cpu command (words split like a shell)")
    p.add_argument("--size", type=int, default=500)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    s = args.size
    torch.manual_seed(0)
    a = torch.randn(s, s, dtype=torch.float16)
    b = torch.randn(s, s, dtype=torch.float16)
    c = torch.empty(s, s, dtype=torch.float16)
    ref = (a.double() @ b.double())
    rows = []
    print(f"cpu: {os.cpu_count()} threads  torch {torch.__version__}  triton {triton.__version__ if triton else 'missing'}",
          flush=True)

    t = [0.0] * args.repeat
    af, bf = a.float(), b.float()
    for i in range(args.repeat):
        t0 = time.perf_counter()
        torch.matmul(af, bf)
        t[i] = (time.perf_counter() - t0) * 1e3
    rows.append(("torch matmul f32 (CPU)", median(t), ""))

    triton_ms = None
    if triton is not None:
        for bm, bn, bk in [(32, 32, 32), (64, 64, 32), (128, 128, 32)]:
            grid = (triton.cdiv(s, bm), triton.cdiv(s, bn))
            times = []
            for i in range(args.repeat):
                t0 = time.perf_counter()
                matmul_kernel[grid](a, b, c, s, s, K=s, BM=bm, BN=bn, BK=bk)
                times.append((time.perf_counter() - t0) * 1e3)
            err = (c.double() - ref).abs().max().item()
            ms = median(times)
            rows.append((f"Triton interpreter {bm}x{bn}x{bk}", ms, f"max err {err:.3g}"))
            triton_ms = ms if triton_ms is None else min(triton_ms, ms)

    out = subprocess.run(shlex.split(args.bench) + [str(s)], capture_output=True, text=True)
    results = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not results or "error" in results[0]:
        sys.exit(f"bench_cpu failed:\n{out.stdout}{out.stderr}")
    for r in results:
        ratio = f"{triton_ms / r['ms']:.0f}x Triton interp." if triton_ms else ""
        rows.append((f"tilus CPU {r['kernel']}", r["ms"],
                     f"{ratio}; first call {r['first_ms']:.0f} ms; checked {r['checked_ms']:.1f} ms; "
                     f"max err {r['max_err']:.3g}"))
        if triton_ms:
            rows.append((f"  checked mode", r["checked_ms"], f"{triton_ms / r['checked_ms']:.0f}x Triton interp."))

    print(f"\nmatmul {s}x{s}x{s}, f16 in, f32 accumulate (ms, median of runs)")
    for name, ms, note in rows:
        print(f"{name:34s} {ms:10.2f}  {note}")


if __name__ == "__main__":
    main()
