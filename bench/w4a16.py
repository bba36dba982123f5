"""W4A16 matmul at LLM sizes: tilus (examples/python/matmul_a16wx.py, int4 weights with group-wise
f16 scales) against f16 cuBLAS (torch.matmul on the dequantized weights) and a Triton W4A16
kernel, measured in one run on one GPU.

    PYTHONPATH=build/python python bench/w4a16.py [--sizes 1,4,16,128,4096] [--nk 8192]

Each time is the median of CUDA-event timings, each launch after an L2 flush (bench/run.py's
median_ms); tilus, cuBLAS and Triton are timed in turn over three rounds, the median of each one's
rounds (bench/run.py's interleaved_ms: the GPU's clocks follow its recent load). Bandwidth counts the bytes every kernel must read at least once (int4 weights, their
scales, the activations) and writes (the output), against the H100's 3.35 TB/s. The first line
times a plain Triton kernel that only reads the int4 weights (the best of 1 to 8 blocks per SM):
the floor of small m, measured the same way (the flush leaves dirty lines in L2 that a kernel's
reads write back).
"""
import argparse
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
from run import interleaved_ms, median_ms  # noqa: E402

import tilus  # noqa: E402
from matmul_a16wx import QuantizedMatmul  # noqa: E402

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

PEAK_GBS = 3350.0

if triton is not None:

    @triton.autotune(
        configs=[triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_stages=s, num_warps=w)
                 for bm, bn, bk, s, w in [(16, 64, 128, 4, 4), (16, 128, 128, 4, 4), (32, 64, 128, 4, 4),
                                          (64, 128, 64, 4, 4), (128, 128, 64, 3, 8), (128, 256, 64, 3, 8)]],
        key=["M", "N", "K"],
    )
    @triton.jit
    def w4a16_kernel(a, b, s, c, M, N, K, G: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        # b: [N, K / 2] bytes, two signed 4-bit codes per byte along k (low nibble first);
        # s: [K / G, N] f16.
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            rk = k0 + tl.arange(0, BK)
            rb = k0 // 2 + tl.arange(0, BK // 2)
            x = tl.load(a + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            packed = tl.load(b + rn[:, None] * (K // 2) + rb[None, :], mask=rn[:, None] < N, other=0).to(tl.int32)
            lo = ((packed & 15) ^ 8) - 8
            hi = (((packed >> 4) & 15) ^ 8) - 8
            w = tl.trans(tl.join(lo, hi).reshape(BN, BK)).to(tl.float16)
            scale = tl.load(s + (k0 // G) * N + rn)
            acc += tl.dot(x, w * scale[None, :])
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=rm[:, None] < M)

    @triton.jit
    def stream_kernel(x, out, per, BLOCK: tl.constexpr):
        # Reads `per` int32 words from x[program * per] and keeps one word of them: a plain
        # streaming read, the floor a kernel that must read the same bytes once can hope for.
        pid = tl.program_id(0)
        base = pid.to(tl.int64) * per
        acc = tl.zeros((BLOCK,), tl.int32)
        for i in range(0, per, BLOCK):
            acc ^= tl.load(x + base + i + tl.arange(0, BLOCK))
        tl.store(out + pid, tl.sum(acc))

    def stream_floor_ms(words):
        """The best time of stream_kernel reading `words` int32 words, over grids of 1 to 8
        blocks per SM (timed as every kernel here)."""
        x = torch.zeros(words, device="cuda", dtype=torch.int32)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        best = None
        for per_sm in (1, 2, 4, 8):
            programs = sms * per_sm
            per = -(-words // programs // 2048) * 2048
            y = torch.zeros(programs * per, device="cuda", dtype=torch.int32)  # whole blocks of 2048 words
            y[:words] = x
            out = torch.empty(programs, device="cuda", dtype=torch.int32)
            t = median_ms(lambda: stream_kernel[(programs,)](y, out, per, BLOCK=2048, num_warps=8))
            t *= words / (programs * per)  # the padding read counted off
            best = t if best is None else min(best, t)
        return best

    def triton_w4a16(a, b, s, c, group):
        M, K = a.shape
        N = c.shape[1]
        grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))  # noqa: E731
        w4a16_kernel[grid](a, b, s, c, M, N, K, group)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="1,4,16,128,4096")
    p.add_argument("--nk", type=int, default=8192)
    p.add_argument("--group", type=int, default=128)
    args = p.parse_args()
    n = k = args.nk
    g = args.group
    torch.manual_seed(0)
    codes = torch.randint(-8, 8, (n, k), device="cuda", dtype=torch.int32)  # nn.Linear's [out, in]
    packed = ((codes[:, 0::2] & 15) | ((codes[:, 1::2] & 15) << 4)).to(torch.uint8)
    scales = (torch.rand(k // g, n, device="cuda") * 0.02 + 0.005).half()
    zeros = torch.zeros(k // g, n, device="cuda", dtype=torch.float16)
    w16 = (codes.T.half() * scales.repeat_interleave(g, 0)).half()  # [k, n]
    tq = QuantizedMatmul(tilus.int4, g)
    t0 = time.perf_counter()
    weights = tq.prepare(packed)  # the repacking kernels, compiled on first use
    torch.cuda.synchronize()
    print(f"prepare (both repackings, compiles included): {(time.perf_counter() - t0) * 1e3:.0f} ms", flush=True)
    print(f"W4A16, N = K = {n}, group {g}; torch {torch.__version__}, "
          f"triton {triton.__version__ if triton else 'missing'}", flush=True)
    floor = stream_floor_ms(n * k // 8) if triton is not None else None
    if floor:
        print(f"streaming the {n * k // 2 / 1e6:.1f} MB of int4 weights with a plain Triton read kernel: "
              f"{floor * 1e3:.1f} us ({n * k / 2 / floor / 1e6:.0f} GB/s)", flush=True)
    rows = []
    for m in [int(x) for x in args.sizes.split(",")]:
        a = (torch.rand(m, k, device="cuda") * 2 - 1).half()
        ref = a.float() @ w16.float()
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        work = torch.empty(16, m, n, device="cuda", dtype=torch.float32)
        tq(m, n, k, a, weights, scales, zeros, c, work)
        err = (c.float() - ref).abs().max().item() / ref.abs().max().item()
        assert err < 1e-2, f"tilus W4A16 is wrong at m={m}: relative error {err}"
        fns = {"tilus": lambda: tq(m, n, k, a, weights, scales, zeros, c, work),
               "cuBLAS": lambda: torch.matmul(a, w16)}
        if triton is not None:
            ct = torch.empty_like(c)
            triton_w4a16(a, packed, scales, ct, g)
            assert (ct.float() - ref).abs().max().item() / ref.abs().max().item() < 1e-2, "Triton W4A16 is wrong"
            fns["Triton"] = lambda: triton_w4a16(a, packed, scales, ct, g)
        ms = interleaved_ms(fns, repeat=50)  # in turn: the clocks follow the recent load (bench/run.py)
        t_tilus, t_cublas, t_triton = ms["tilus"], ms["cuBLAS"], ms.get("Triton")
        moved = k * n / 2 + scales.numel() * 2 + a.numel() * 2 + c.numel() * 2
        rows.append((m, t_tilus, t_cublas, t_triton, moved / t_tilus / 1e6))
        tt = f"{t_triton * 1e3:8.1f}" if t_triton else "     n/a"
        print(f"m={m:5d}: tilus {t_tilus * 1e3:8.1f} us  cuBLAS f16 {t_cublas * 1e3:8.1f} us  Triton {tt} us  "
              f"tilus/cuBLAS {t_cublas / t_tilus:5.2f}x  tilus/Triton "
              f"{(t_triton / t_tilus) if t_triton else float('nan'):5.2f}x  "
              f"{moved / t_tilus / 1e6:6.0f} GB/s ({moved / t_tilus / 1e6 / PEAK_GBS:4.0%} of peak)", flush=True)


if __name__ == "__main__":
    main()
