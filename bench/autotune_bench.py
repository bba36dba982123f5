"""Autotuning cost: tilus against Triton's autotuner, first process and second process.

    PYTHONPATH=build/python python bench/autotune_bench.py [--size 4096]

Both tune the same 16-config space of an f16 matmul (tiles 64x64, 64x128, 128x128, 128x256;
4 or 8 warps; 2 or 3 stages; k-tile 32). Each runs in fresh processes twice with fresh cache
directories: the first process tunes (tilus: parallel compile + timing, results persisted;
Triton: with TRITON_CACHE_AUTOTUNING=1), the second starts from the persisted results. The
figure is the time from the first call to its result (synchronized), measured inside the
process; process start-up (Python, torch, CUDA context) is printed separately.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SPACE = [(bm, bn, w, s) for (bm, bn) in [(64, 64), (64, 128), (128, 128), (128, 256)] for w in (4, 8) for s in (2, 3)]


def child_tilus(size):
    sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
    t_start = time.perf_counter()
    import torch
    import tilus
    from matmul_autotune import AutotunedMatmul
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    AutotunedMatmul()(size, size, size, a, b, c)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ok = torch.allclose(c.float(), (a.float() @ b.float()), atol=0.5, rtol=1e-2)
    entries = tilus.autotune_report(file=open(os.devnull, "w"))
    winner = entries[0].winner if entries else None
    print(json.dumps({"first_s": first, "setup_s": t0 - t_start, "ok": bool(ok), "winner": winner}))


def child_triton(size):
    t_start = time.perf_counter()
    import torch
    import triton
    import triton.language as tl

    configs = [triton.Config({"BM": bm, "BN": bn, "BK": 32}, num_warps=w, num_stages=s) for bm, bn, w, s in SPACE]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
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

    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    grid = lambda meta: (triton.cdiv(size, meta["BM"]), triton.cdiv(size, meta["BN"]))  # noqa: E731
    kernel[grid](a, b, c, size, size, size)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    ok = torch.allclose(c.float(), (a.float() @ b.float()), atol=0.5, rtol=1e-2)
    print(json.dumps({"first_s": first, "setup_s": t0 - t_start, "ok": bool(ok),
                      "winner": str(kernel.best_config) if hasattr(kernel, "best_config") else None}))


def run(which, size, env):
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", which, "--size", str(size)], capture_output=True,
                         text=True, env=env)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        sys.exit(f"{which} child failed:\n{out.stdout}\n{out.stderr[-3000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["process_s"] = wall
    return r


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--child")
    args = p.parse_args()
    if args.child == "tilus":
        return child_tilus(args.size)
    if args.child == "triton":
        return child_triton(args.size)
    rows = []
    with tempfile.TemporaryDirectory() as tdir, tempfile.TemporaryDirectory() as tr_dir:
        env = dict(os.environ, TILUS_CACHE_DIR=tdir)
        for n in ("first", "second"):
            rows.append((f"tilus, {n} process", run("tilus", args.size, env)))
        env = dict(os.environ, TRITON_CACHE_DIR=tr_dir, TRITON_CACHE_AUTOTUNING="1")
        for n in ("first", "second"):
            rows.append((f"Triton, {n} process", run("triton", args.size, env)))
    print(f"autotuning a {len(SPACE)}-config f16 matmul space, {args.size}^3: time to the first result")
    print(f"{'':24s} {'first call (s)':>15s} {'process (s)':>12s}  correct  winner")
    for name, r in rows:
        print(f"{name:24s} {r['first_s']:15.3f} {r['process_s']:12.2f}  {str(r['ok']):7s}  {r['winner']}")


if __name__ == "__main__":
    main()
