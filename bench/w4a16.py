"""W4A16 matmul at LLM sizes, one run: tilus (examples/python/matmul_a16wx.py's QuantizedMatmul,
4-bit weights [N, K] with group-wise f16 scales, int4, or uint4 with zero points) against f16
cuBLAS (torch.matmul on the dequantized weights), a Triton W4A16 kernel written here, and the read
floor of the same bytes, at every m of --ms for every weight shape of --shapes.

    PYTHONPATH=build/python python bench/w4a16.py [--ms 1,4,16,64,256,1024,4096]
        [--shapes 8192x8192,28672x8192,8192x28672,3584x18944] [--types int4,uint4] [--rule] [--wide]
        [--deadline SECONDS] [--no-triton] [--f16-split-sums]
        [--extra 'block_m=120 stages=8;tile_group=16'] [--timing block|mixed] [--twin] [--passes P] [--lead CYCLES]

tilus tunes its kernel choice per shape (QuantizedMatmul(tune=True): split-K, tile shape, wgmma or
mma.sync, stages, timed once per shape before the measurement, over the short list of
QuantizedMatmul.candidates, or with --wide over the whole space; --rule uses the fixed rule instead)
and the line says which kernel won and how long its tuning took. --extra adds wgmma configurations of its own
(parameters over the 128 x 256 tile's, integers: 1 and 0 for flags) wherever the wgmma kernel
applies. The Triton kernel's tiles follow a rule per m (triton_config); --no-triton leaves it and
the floor out (their compiles and timings: a quicker sweep of tilus against cuBLAS). A result off
the float32 reference by 1 % of its largest value is marked WRONG and the sweep goes on; --deadline
stops beginning sizes after that many seconds and prints the summary of those measured. Each time is
the median of CUDA-event timings, each launch after an L2 flush (bench/run.py's median_ms), the
flush after the GPU slept --lead cycles (the host's head start: no host time timed; the per-size
line gives tilus's host time a call apart, "host"); tilus, cuBLAS and Triton are timed in turn over three rounds, the median of each one's rounds
(bench/run.py's interleaved_ms: the GPU's clocks follow its recent load), launch by launch (each
pass launches every one once, in a new random order: they share the GPU's clocks and heat; --timing
block times each one's launches of a round in a row: on the H200 cuBLAS's twin then read 0.90-1.00x
of it at m = 1024 and 4096, launch by launch 0.996-1.002x, mid calls of 2026-11-29 11:46 and 12:27),
and --twin times cuBLAS twice, its twin's ratio the noise of the figures; --passes P times every size
P - 1 times more after the sweep, each figure the median of its passes (the summary lists the
passes' tilus times; the passes follow the sweep whatever --deadline). The floor is a plain
Triton kernel that reads the bytes a W4A16 kernel must read at least once (the 4-bit weights, their
scales and zero points, the activations) and writes nothing but one word per block: the best of 1 to
8 blocks per SM, measured the same way (the flush reads 256 MB, so L2 holds clean lines that cost
the reads no write-back). The summary (last: a row per size) gives times and their ratios: cuBLAS /
tilus (> 1: tilus is faster; the goal is >= 1.0) and tilus / floor (1.0 at the floor; at m <= 16
only, where the goal is <= 1.15), a star on each size that misses a goal. --show N lists the N
fastest of each tuning's candidates with their times (6 by default).
"""
import argparse
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
from run import host_us, interleaved_ms, median_ms  # noqa: E402

import tilus  # noqa: E402
from matmul_a16wx import QuantizedMatmul  # noqa: E402

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None


if triton is not None:

    @triton.jit
    def w4a16_kernel(a, b, s, z, c, M, N, K, G: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                     UNSIGNED: tl.constexpr):
        # b: [N, K / 2] bytes, two 4-bit codes per byte along k (low nibble first), signed, or
        # UNSIGNED with zero points z: [K / G, N] f16 (w = (code - z) * s); s: [K / G, N] f16.
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            rk = k0 + tl.arange(0, BK)
            rb = k0 // 2 + tl.arange(0, BK // 2)
            x = tl.load(a + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            packed = tl.load(b + rn[:, None] * (K // 2) + rb[None, :], mask=rn[:, None] < N, other=0).to(tl.int32)
            if UNSIGNED:
                lo = packed & 15
                hi = (packed >> 4) & 15
            else:
                lo = ((packed & 15) ^ 8) - 8
                hi = (((packed >> 4) & 15) ^ 8) - 8
            w = tl.trans(tl.join(lo, hi).reshape(BN, BK)).to(tl.float16)
            scale = tl.load(s + (k0 // G) * N + rn, mask=rn < N, other=0.0)
            if UNSIGNED:
                w = w - tl.load(z + (k0 // G) * N + rn, mask=rn < N, other=0.0)[None, :]
            acc += tl.dot(x, w * scale[None, :])
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))

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

    def stream_floor_ms(words, lead=0):
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
            t = median_ms(lambda: stream_kernel[(programs,)](y, out, per, BLOCK=2048, num_warps=8), lead=lead)
            t *= words / (programs * per)  # the padding read counted off
            best = t if best is None else min(best, t)
        return best

    def triton_config(m):
        """The Triton kernel's tiles at m (BM, BN, BK, stages, warps): a rule, not autotuned (the
        autotuning of six configurations at each of the 56 sizes took longer than the whole sweep
        may); at N = K = 8192 on the H100 these were its fastest at m = 1, 64, 256 and 4096."""
        return ((16, 128, 128, 4, 4) if m <= 16 else (64, 128, 64, 4, 4) if m <= 64 else
                (128, 128, 64, 3, 8) if m <= 256 else (128, 256, 64, 3, 8))

    def triton_w4a16(a, b, s, z, c, group, unsigned):
        M, K = a.shape
        N = c.shape[1]
        bm, bn, bk, stages, warps = triton_config(M)
        w4a16_kernel[(triton.cdiv(M, bm), triton.cdiv(N, bn))](a, b, s, z, c, M, N, K, group, bm, bn, bk, unsigned,
                                                               num_stages=stages, num_warps=warps)


def weights(n, k, g, unsigned):
    """Random 4-bit codes [n, k] packed two per byte along k, f16 scales and zero points [k / g, n]
    and the dequantized f16 weights [k, n] (cuBLAS's operand)."""
    torch.manual_seed(0)
    lo = 0 if unsigned else -8
    codes = torch.randint(lo, lo + 16, (n, k), device="cuda", dtype=torch.int32)  # nn.Linear's [out, in]
    packed = ((codes[:, 0::2] & 15) | ((codes[:, 1::2] & 15) << 4)).to(torch.uint8)
    scales = (torch.rand(k // g, n, device="cuda") * 0.02 + 0.005).half()
    zeros = (torch.randint(0, 16, (k // g, n), device="cuda").half() if unsigned else
             torch.zeros(k // g, n, device="cuda", dtype=torch.float16))
    w16 = ((codes.T.half() - zeros.repeat_interleave(g, 0)) * scales.repeat_interleave(g, 0)).half()  # [k, n]
    return packed, scales, zeros, w16


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ms", "--sizes", dest="ms", default="1,4,16,64,256,1024,4096")
    p.add_argument("--shapes", default="8192x8192,28672x8192,8192x28672,3584x18944", help="N x K of the weights")
    p.add_argument("--types", default="int4,uint4")
    p.add_argument("--group", type=int, default=128)
    p.add_argument("--rule", action="store_true", help="QuantizedMatmul's fixed rule instead of tuning per shape")
    p.add_argument("--wide", action="store_true", help="tune over the whole space (candidates(wide=True))")
    p.add_argument("--no-triton", action="store_true", help="time no Triton kernel nor the read floor")
    p.add_argument("--f16-split-sums", action="store_true",
                   help="let the tuner add split sums into c in f16 (QuantizedMatmul(f16_split_sums=True))")
    p.add_argument("--extra", default="",
                   help="wgmma configurations the tuner also times, ';'-separated, each 'name=value ...' over the "
                        "128 x 256 tile's parameters (e.g. 'block_m=120 stages=8;tile_group=16'; QuantizedMatmul(extra=))")
    p.add_argument("--timing", choices=("block", "mixed"), default="mixed",
                   help="mixed (the default): every one launched once per pass, in a new random order each pass "
                        "(bench/run.py interleaved_ms(mixed=True)); block: each one's 20 launches in a row per round")
    p.add_argument("--twin", action="store_true",
                   help="time cuBLAS twice (its twin's distance from it: the timing's noise)")
    p.add_argument("--deadline", type=float, default=0,
                   help="seconds: the sizes not begun by then are listed as skipped and the summary printed")
    p.add_argument("--show", type=int, default=6, help="the tuning's fastest candidates listed per shape and m")
    p.add_argument("--lead", type=int, default=200000,
                   help="GPU cycles slept before each launch's flush (bench/run.py median_ms): the host's head start, "
                        "so that no host time is timed (0: the flush's ~70 us only)")
    p.add_argument("--passes", type=int, default=1,
                   help="time every size again after the sweep, this many passes in all; each figure the median "
                        "of its passes (a disturbance of the GPU lasting a size's timing then moves one pass only)")
    args = p.parse_args()
    extra = [{name: int(v) for name, v in (x.split("=") for x in cfg.split())} for cfg in args.extra.split(";") if cfg.strip()]
    start = time.perf_counter()
    triton_on = triton is not None and not args.no_triton
    g = args.group
    ms = [int(x) for x in args.ms.split(",")]
    shapes = [tuple(int(v) for v in x.split("x")) for x in args.shapes.split(",")]
    print(f"W4A16, group {g}, on {torch.cuda.get_device_name()}; torch {torch.__version__}, "
          f"triton {triton.__version__ if triton else 'missing'}; tilus "
          f"{'rule' if args.rule else 'tuned per shape' + (' (wide)' if args.wide else '')}", flush=True)
    rows = []
    again = []  # per row: its callables and its timings, one a pass (--passes)
    floors = {}
    shown = set()
    skipped = 0
    for wname in args.types.split(","):
        wtype = getattr(tilus, wname)
        unsigned = not wtype.is_signed()
        tq = QuantizedMatmul(wtype, g, tune=not args.rule, wide=args.wide, f16_split_sums=args.f16_split_sums,
                             extra=extra)
        for n, k in shapes:
            if args.deadline and time.perf_counter() - start > args.deadline:
                skipped += len(ms)
                continue
            packed, scales, zeros, w16 = weights(n, k, g, unsigned)
            t0 = time.perf_counter()
            prepared = tq.prepare(packed)  # the repacking kernels, compiled on first use
            torch.cuda.synchronize()
            copies = {x: w.numel() * w.element_size() for x, w in prepared.items() if x != "plain"}
            print(f"{wname} {n}x{k}: prepare (repackings, compiles included) "
                  f"{(time.perf_counter() - t0) * 1e3:.0f} ms, {sum(copies.values()) / 1e6:.0f} MB in "
                  f"{len(copies)} copies ({', '.join(copies)})", flush=True)
            for m in ms:
                if args.deadline and time.perf_counter() - start > args.deadline:
                    skipped += 1
                    continue
                t0 = time.perf_counter()
                a = (torch.rand(m, k, device="cuda") * 2 - 1).half()
                ref = a.float() @ w16.float()
                c = torch.empty(m, n, device="cuda", dtype=torch.float16)
                work = torch.empty(16, m, n, device="cuda", dtype=torch.float32)
                tq(m, n, k, a, prepared, scales, zeros, c, work)  # tunes at the first call of a shape
                tuned_s = time.perf_counter() - t0
                err = (c.float() - ref).abs().max().item() / ref.abs().max().item()
                wrong = f"  WRONG (relative error {err:.3g})" if err >= 1e-2 else ""
                # (the size's tensors bound now: --passes times them again after the sweep)
                fns = {"tilus": lambda m=m, a=a, c=c, work=work, p=prepared, s=scales, z=zeros, q=tq, n=n, k=k:
                       q(m, n, k, a, p, s, z, c, work),
                       "cuBLAS": lambda a=a, w=w16: torch.matmul(a, w)}
                if args.twin:  # the same cuBLAS call again: how far two timings of one kernel fall apart
                    fns["twin"] = lambda a=a, w=w16: torch.matmul(a, w)
                if triton_on:
                    ct = torch.empty_like(c)
                    triton_w4a16(a, packed, scales, zeros, ct, g, unsigned)
                    terr = (ct.float() - ref).abs().max().item() / ref.abs().max().item()
                    if terr < 1e-2:
                        fns["Triton"] = lambda a=a, b=packed, s=scales, z=zeros, ct=ct, u=unsigned: \
                            triton_w4a16(a, b, s, z, ct, g, u)
                    else:
                        print(f"Triton W4A16 is wrong at m={m}, {n}x{k}: relative error {terr:.3g}", flush=True)
                t = interleaved_ms(fns, repeat=20, mixed=args.timing == "mixed", lead=args.lead)
                host = host_us(fns["tilus"])
                read = k * n // 2 + scales.numel() * 2 * (2 if unsigned else 1) + a.numel() * 2
                if triton_on and m <= 16 and read not in floors:  # the floor's goal is at m <= 16
                    floors[read] = stream_floor_ms(read // 4, args.lead)
                floor = floors.get(read)
                key = tq.tuning_key(m, n, k, prepared, c)
                cfg = tq.tuned.get(key) if not args.rule else tq.config(m, n, k, hopper="wgmma" in prepared)
                kernel = describe(cfg)
                if key in tq.timings and (wname, key) not in shown:  # the tuning's fastest candidates
                    shown.add((wname, key))
                    for t_, c_ in tq.timings[key][:args.show]:
                        print(f"    tuned at m={m}: {t_ * 1e3:8.1f} us  {describe(c_)}", flush=True)
                rows.append((wname, n, k, m, t, floor, kernel, wrong))
                again.append((fns, [t]))
                tt = f"{t['Triton'] * 1e3:8.1f}" if "Triton" in t else "     n/a"
                fl = f"{floor * 1e3:8.1f}" if floor else "     n/a"
                print(f"{wname} {n:5d}x{k:5d} m={m:5d}: tilus {t['tilus'] * 1e3:8.1f} us ({kernel})  cuBLAS f16 "
                      f"{t['cuBLAS'] * 1e3:8.1f} us  Triton {tt} us  floor {fl} us  "
                      f"cuBLAS/tilus {t['cuBLAS'] / t['tilus']:5.2f}x  "
                      f"tilus/floor {(t['tilus'] / floor) if floor else float('nan'):5.2f}x  host {host:.0f} us  "
                      + (f"twin/cuBLAS {t['twin'] / t['cuBLAS']:5.3f}  " if "twin" in t else "") +
                      f"(tuning {tuned_s:.1f} s, at {time.perf_counter() - start:.0f} s){wrong}", flush=True)
    for done in range(1, args.passes):  # the sweep's sizes timed again, each figure the median of its passes
        for fns, times in again:
            times.append(interleaved_ms(fns, repeat=20, mixed=args.timing == "mixed", lead=args.lead))
        print(f"pass {done + 1} of {args.passes} at {time.perf_counter() - start:.0f} s", flush=True)
    for i, (fns, times) in enumerate(again):
        if len(times) > 1:
            w, n, k, m, t, floor, kernel, wrong = rows[i]
            t = {name: sorted(x[name] for x in times)[len(times) // 2] for name in t}
            kernel += "  (passes: tilus " + "/".join(f"{x['tilus'] * 1e3:.1f}" for x in times) + " us)"
            rows[i] = (w, n, k, m, t, floor, kernel, wrong)
    print(f"\nsummary ({time.perf_counter() - start:.0f} s): cuBLAS f16 / tilus (> 1: tilus faster, goal >= 1.0); "
          "tilus / read floor (goal <= 1.15 at m <= 16)")
    print(f"{'type':5s} {'N x K':>11s} {'m':>5s} {'tilus us':>9s} {'cuBLAS us':>9s} {'cuBLAS/tilus':>12s} "
          f"{'tilus/floor':>11s}  kernel")
    met = unjudged = 0
    for w, n, k, m, t, floor, kernel, wrong in rows:
        ratio = t["cuBLAS"] / t["tilus"]
        fr = t["tilus"] / floor if floor else None
        ok = ratio >= 1.0 and (fr is None or fr <= 1.15) and not wrong
        unjudged += m <= 16 and fr is None  # (no floor timed: --no-triton) its floor goal not judged
        met += ok
        print(f"{w:5s} {n:5d}x{k:<5d} {m:5d} {t['tilus'] * 1e3:9.1f} {t['cuBLAS'] * 1e3:9.1f} {ratio:11.2f}x "
              f"{f'{fr:10.2f}x' if fr else '         -'}{'' if ok else ' *'} {kernel}{wrong}"
              + (f"  (twin {t['twin'] / t['cuBLAS']:.3f})" if "twin" in t else ""))
    print(f"{met} of {len(rows)} sizes meet the goals (* marks the others)"
          + (f"; {unjudged} sizes at m <= 16 without a floor (--no-triton): their floor goal not judged"
             if unjudged else "")
          + (f"; {skipped} sizes skipped at the deadline of {args.deadline:.0f} s" if skipped else ""))


def describe(cfg):
    """A configuration in a few words: wgmma tiles, or mma.sync rows and split-K."""
    if cfg is None:
        return "?"
    if cfg.get("hopper"):
        group = f" group {cfg['tile_group']}" if "tile_group" in cfg else ""
        group += " cluster 2" if cfg.get("cluster") == 2 else ""
        group += f" split {cfg['split_k']}" if cfg.get("split_k", 1) > 1 else ""
        group += f" tail split {cfg['tail_split']}" if cfg.get("tail_split", 1) > 1 else ""
        group += f" lead {cfg['lead']}" if cfg.get("lead") else ""
        group += " peek-sums" if cfg.get("peek_sums") else ""
        group += " magic" if cfg.get("magic") else ""
        return f"wgmma {cfg['block_n']}x{cfg['block_m']} stages {cfg['stages']}{group}"
    decode = (" magic" + (" late-scale" if cfg.get("late_scale") else "") + (" tma" if cfg.get("tma") else "")
              if cfg.get("magic") else "")
    loop = " unrolled" if cfg.get("unroll") else ""
    loop += " bounded" if cfg.get("bounded") else ""
    loop += " interleaved" if cfg.get("interleave") else ""
    loop += " k-major" if cfg.get("k_major") else ""
    loop += " two-sums" if cfg.get("two_sums") else ""
    loop += " fixed-sums" if cfg.get("fixed_sums") else ""
    loop += " red-into-c" if cfg.get("split_red") else ""
    loop += f" min-blocks {cfg['min_blocks']}" if cfg.get("min_blocks") else ""
    loop += f" {cfg['warps']}-warps" if cfg.get("warps", 4) != 4 else ""
    loop += " weights-a" if cfg.get("weights_a") else ""
    if cfg.get("blocks"):
        return f"mma {cfg['block_m']}x{cfg['block_n']} stream-K {cfg['blocks']} blocks stages {cfg['stages']}{decode}{loop}"
    return f"mma {cfg['block_m']}x{cfg['block_n']} split {cfg['split_k']} stages {cfg['stages']}{decode}{loop}"


if __name__ == "__main__":
    main()
