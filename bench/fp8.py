"""FP8 on the GPU machine, one run: the FP8 matmul (examples/python/matmul_fp8.py) against
torch._scaled_mm (cuBLASLt FP8), and the per-token FP8 quantization kernels
(examples/python/per_token_cast.py, swiglu_per_token_cast.py) against torch and the read+write
floor.

    PYTHONPATH=build/python python bench/fp8.py [--quick] [--only gemm|quant] [--shapes MxNxK,...]
                                                [--block-tiles BMxBN[xP[xS]],...] [--tensor-tiles BN[xSTAGES],...]
                                                [--no-tune] [--tune-tensor] [--tune-block]
                                                [--quant-sizes MxHIDDEN,...] [--cast-tiles BMxGxWxV[c][i],...]

GEMM: e4m3 x e4m3 -> bf16, a [m, k], b [n, k], at 4096^3, 8192^3 and the LLM weight shapes
(N, K) = (8192, 8192), (28672, 8192), (8192, 28672), (3584, 18944) for m in --ms (default 1, 16,
128, 1024, 4096, 8192). Per-tensor scales against torch._scaled_mm with float32 [1] scales (its
default accumulation, and use_fast_accum=True, which sums in the tensor cores as tilus's per-tensor
kernel does); per-row scales against _scaled_mm's row-wise scaling; DeepSeek-V3 block scales
(1 x 128 activations, 128 x 128 weights; against _scaled_mm's own block scaling too, "cuBLAS block",
where this torch and cuBLASLt take it, checked against tilus's result; "tilus block" is
MatmulFp8Block, its tile and products (one, or two in turn) chosen by block_config's rule (the
autotuner's pick among matmul_fp8.BLOCK_TILES with --tune-block: it kept 128 x 256 at 8192^3 in two
H200 runs where 128 x 192 ran 9 % faster in this bench's interleaved timing), and --block-tiles adds MatmulFp8 with
each tile named, as "tilus block BMxBN", "BMxBNxP" with P products or "BMxBNxPxS" with S stages) against the per-tensor
_scaled_mm. The per-tensor and per-row kernels' tile width follows tensor_config's rule
(MatmulFp8Auto; the autotuner's pick among matmul_fp8.TILES with --tune-tensor); --tensor-tiles adds
per-tensor MatmulFp8 with each tile named ("tilus tensor BN" or "BNxSTAGES"). --shapes replaces the shapes
with the ones listed. Each time is the median of CUDA-event timings after an L2 flush, the kernels of one
shape timed in turn over three rounds (bench/run.py's interleaved_ms).

Quantization: bf16 [m, hidden] -> e4m3 codes and float32 scales per 128 elements, against the
same in torch ops and against a Triton kernel that reads and writes the same bytes and computes
nothing (the floor); SwiGLU fused with it ([m, 2 hidden] in) likewise. The tilus kernels' tiles
are tuned at run time among per_token_cast.CAST_CONFIGS (cast_config's rule with --no-tune);
--cast-tiles times more tiles beside them ("tilus BMxGxWxV", each checked against torch first).
"""
import argparse
import os
import sys

import torch

import tilus

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
from run import interleaved_ms  # noqa: E402

from matmul_fp8 import MatmulFp8, MatmulFp8Auto, MatmulFp8Block, block_scales  # noqa: E402
from per_token_cast import PerTokenCast, PerTokenCastTuned, cast_config, cast_kernel, per_token_cast, tuned_config  # noqa: E402
from swiglu_per_token_cast import SwiGLUPerTokenCast, SwiGLUPerTokenCastTuned, swiglu_per_token_cast  # noqa: E402

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

LLM_NK = [(8192, 8192), (28672, 8192), (8192, 28672), (3584, 18944)]

if triton is not None:

    @triton.jit
    def read_write_kernel(x, out, scales, n, READS: tl.constexpr, BLOCK: tl.constexpr):
        # Reads READS * BLOCK bf16 values (as int16; the second half of x from n on), writes BLOCK
        # bytes and one float32 per 128: the bytes a quantization kernel must move, nothing computed.
        pid = tl.program_id(0).to(tl.int64)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x + offs, mask=offs < n, other=0)
        if READS == 2:
            v = v ^ tl.load(x + n + offs, mask=offs < n, other=0)
        tl.store(out + offs, v.to(tl.uint8), mask=offs < n)
        g = pid * (BLOCK // 128) + tl.arange(0, BLOCK // 128)
        tl.store(scales + g, tl.sum(v.reshape(BLOCK // 128, 128), axis=1).to(tl.float32), mask=g < n // 128)

    def read_write_ms(elements, reads=1):
        """The best time of read_write_kernel writing `elements` codes (and reading `reads` bf16
        values per code), over blocks of 1024 to 8192 codes."""
        x = torch.zeros(reads * elements, dtype=torch.int16, device="cuda")
        out = torch.empty(elements, dtype=torch.uint8, device="cuda")
        scales = torch.empty(elements // 128, dtype=torch.float32, device="cuda")
        best = None
        for block in (1024, 2048, 4096, 8192):
            grid = (triton.cdiv(elements, block),)
            t = interleaved_ms({"floor": lambda: read_write_kernel[grid](x, out, scales, elements, READS=reads,
                                                                          BLOCK=block, num_warps=4)},
                               rounds=1)["floor"]
            best = t if best is None else min(best, t)
        return best


def torch_per_token_cast(x):
    m, hidden = x.shape
    xg = x.float().view(m, hidden // 128, 128)
    amax = xg.abs().amax(dim=2, keepdim=True)
    # A tensor 448, not a Python number: torch divides by a number as a multiplication by its
    # reciprocal, one rounding off the IEEE quotient the kernel (and per_token_cast.py's
    # definition) computes.
    e4m3_max = torch.full_like(amax, 448.0)
    scale = torch.where(amax > 0, amax / e4m3_max, torch.ones_like(amax))
    inv = torch.where(amax > 0, e4m3_max / amax, torch.ones_like(amax))
    return (xg * inv).to(torch.float8_e4m3fn).view(m, hidden), scale.view(m, -1)


def torch_swiglu_per_token_cast(x):
    hidden = x.shape[1] // 2
    g, u = x[:, :hidden].float(), x[:, hidden:].float()
    return torch_per_token_cast(torch.nn.functional.silu(g) * u)


def tile_width(kernel, args):
    """"block_n/stages" of a MatmulFp8Auto's kernel for these arguments ("?" before tuning)."""
    chosen = kernel.tuned._tilus_tuner.winner_for(args, {}) if kernel.tuned is not None else kernel.kernel(*args[:2])
    return "?" if chosen is None else f"{chosen.block_n}/{chosen.stages}"


def cublas_blockwise(a, b, raw_sa, raw_sb, tilus_block, c):
    """torch._scaled_mm with DeepSeek-V3 block scales (cuBLASLt's 1 x 128 by 128 x 128 scaling,
    CUDA 12.9+ on sm_90) where this torch takes them: the call, checked against tilus's block-scaled
    result, or None. The scale layouts tried: a's [m, k / 128] and b's [n / 128, k / 128] or its
    transpose, each row- or column-major."""
    tilus_block()
    want = c.float().clone()
    for sa in (raw_sa.t().contiguous().t(), raw_sa.contiguous()):
        for sb in (raw_sb.t().contiguous(), raw_sb.t(), raw_sb.contiguous(), raw_sb.t().contiguous().t()):
            fn = lambda sa=sa, sb=sb: torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
            try:
                got = fn().float()
            except (RuntimeError, ValueError) as e:
                last = str(e).splitlines()[0][:100]
                continue
            err = (got - want).abs().max().item() / max(want.abs().max().item(), 1e-9)
            if err < 2e-2:
                return fn
            last = f"relative difference {err:.3g} from tilus block"
    print(f"  cuBLAS block: not run ({last})", flush=True)
    return None


def gemm_rows(ms, quick, shapes=None, block_tiles=(), tune=False, tensor_tiles=(), tune_block=False):
    sms = torch.cuda.get_device_properties(0).multi_processor_count // 2 * 2
    if not shapes:
        shapes = [(4096, 4096, 4096), (8192, 8192, 8192)]
        shapes += [(m, n, k) for n, k in (LLM_NK[:1] if quick else LLM_NK) for m in ms]
    tensor_k, row_k, block_k = (MatmulFp8Auto("tensor", blocks=sms, tune=tune),
                                MatmulFp8Auto("row", blocks=sms, tune=tune), MatmulFp8Block(blocks=sms, tune=tune_block))
    tiles = {t: MatmulFp8("block", block_m=t[0], block_n=t[1], products=t[2] if len(t) > 2 else 1,
                          stages=t[3] if len(t) > 3 else None, blocks=sms) for t in block_tiles}
    tiles.update({("tensor",) + t: MatmulFp8("tensor", block_n=t[0], stages=t[1] if len(t) > 1 else None, blocks=sms)
                  for t in tensor_tiles})
    rows = []
    for m, n, k in shapes:
        torch.manual_seed(0)
        a = (torch.randn(m, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        b = (torch.randn(n, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        one = torch.ones(1, device="cuda")
        sa_row, sb_row = torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") + 0.5
        kb = -(-k // 128)
        raw_sa, raw_sb = torch.rand(m, kb, device="cuda") + 0.5, torch.rand(-(-n // 128), kb, device="cuda") + 0.5
        sa_blk, sb_blk = block_scales(raw_sa, raw_sb)
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        fns = {"tilus tensor": lambda: tensor_k(m, n, k, a, b, one, one, c),
               "tilus row": lambda: row_k(m, n, k, a, b, sa_row, sb_row, c),
               "tilus block": lambda: block_k(m, n, k, a, b, sa_blk, sb_blk, c)}
        for t, kern in tiles.items():
            if t[0] == "tensor":
                fns[f"tilus tensor {'x'.join(map(str, t[1:]))}"] = lambda kern=kern: kern(m, n, k, a, b, one, one, c)
            else:
                fns[f"tilus block {'x'.join(map(str, t))}"] = lambda kern=kern: kern(m, n, k, a, b, sa_blk, sb_blk, c)
        # The per-tensor result against a float32 product of the same codes, as a check that the
        # run is meaningful (fp8 tensor cores sum with fewer bits than float32).
        fns["tilus tensor"]()
        ref = a.float() @ b.float().t()
        err = (c.float() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-9)
        assert err < 2e-2, f"tilus fp8 per-tensor is wrong at {m}x{n}x{k}: relative error {err}"
        del ref
        for name, fn in [("cuBLAS", lambda: torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16)),
                         ("cuBLAS fast", lambda: torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16,
                                                                   use_fast_accum=True)),
                         ("cuBLAS row", lambda: torch._scaled_mm(a, b.t(), sa_row.view(-1, 1), sb_row.view(1, -1),
                                                                  out_dtype=torch.bfloat16))]:
            try:
                fn()
                fns[name] = fn
            except RuntimeError as e:  # shapes cuBLASLt's FP8 kernels refuse (m not a multiple of 16, ...)
                print(f"  {name} at {m}x{n}x{k}: not run ({str(e).splitlines()[0][:80]})", flush=True)
        blockwise = cublas_blockwise(a, b, raw_sa, raw_sb, lambda: block_k(m, n, k, a, b, sa_blk, sb_blk, c), c)
        if blockwise is not None:
            fns["cuBLAS block"] = blockwise
        ms_ = interleaved_ms(fns, repeat=20)
        tf = {name: 2 * m * n * k / t / 1e9 for name, t in ms_.items()}
        rows.append((m, n, k, ms_, tf))
        line = "  ".join(f"{name} {t * 1e3:8.1f} us ({tf[name]:6.1f} TF)" for name, t in ms_.items())
        tile = block_k.tile(m, n, k, a, b, sa_blk, sb_blk, c)
        how = "tuned" if tune_block else "block_config"
        tile = "x".join(map(str, tile)) if tile else "?"
        widths = [tile_width(kern, (m, n, k, a, b, s_a, s_b, c))
                  for kern, s_a, s_b in ((tensor_k, one, one), (row_k, sa_row, sb_row))]
        print(f"{m:5d}x{n:5d}x{k:5d} (tilus tensor / row: 128x{widths[0]} / 128x{widths[1]} (/stages, "
              f"{'tuned' if tune else 'tensor_config'}), block: {tile} (block_m x block_n x products), {how}): {line}",
              flush=True)
    return rows


def cast_tile(spec):
    """--cast-tiles' "BMxGxWxV[c][i]" as (name, keywords): block_m, groups, warps, vec (0: the
    compiler's layout), c: cols_first, i: the SwiGLU's division as div="ieee" (the plain cast
    ignores it)."""
    flags = spec.lstrip("0123456789x")
    bm, g, w, v = (int(t) for t in spec[:len(spec) - len(flags)].split("x"))
    kw = dict(block_m=bm, groups=g, warps=w, vec=v or None, cols_first="c" in flags)
    return f"tilus {spec}", {**kw, **({"div": "ieee"} if "i" in flags else {})}


def quant_rows(quick, sizes=None, tune=True, tiles=()):
    rows, tile_kernels = [], {}
    sizes = sizes or ([(128, 7168), (4096, 7168), (16384, 7168)] if not quick else [(4096, 7168)])
    for m, hidden in sizes:
        for fused in (False, True):
            x = torch.randn(m, 2 * hidden if fused else hidden, device="cuda").to(torch.bfloat16)
            out = torch.empty(m, hidden, dtype=torch.uint8, device="cuda")
            scales = torch.empty(m, hidden // 128, dtype=torch.float32, device="cuda")
            if fused:
                fns = {"tilus": lambda: swiglu_per_token_cast(x, out, scales, tune=tune),
                       "torch": lambda: torch_swiglu_per_token_cast(x)}
            else:
                fns = {"tilus": lambda: per_token_cast(x, out, scales, tune=tune), "torch": lambda: torch_per_token_cast(x)}
            for spec in tiles:
                name, kw = cast_tile(spec)
                if (spec, fused) not in tile_kernels:
                    tile_kernels[spec, fused] = SwiGLUPerTokenCast(**kw) if fused else PerTokenCast(
                        **{k: v for k, v in kw.items() if k != "div"})
                fns[name] = lambda k=tile_kernels[spec, fused]: k(m, hidden, x, out, scales)
                fns[name]()
                got = out.view(torch.float8_e4m3fn).float()
                want = (torch_swiglu_per_token_cast if fused else torch_per_token_cast)(x)[0].float()
                assert (got - want).abs().max().item() <= (32.0 if fused else 0.0), f"{name} codes differ from torch's"
            fns["tilus"]()
            if tune:
                kernel = cast_kernel(*((SwiGLUPerTokenCast, SwiGLUPerTokenCastTuned) if fused else
                                       (PerTokenCast, PerTokenCastTuned)), m, hidden, True,
                                     **(dict(clamp=None) if fused else {}), dtype=tilus.bfloat16)
                config = tuned_config(kernel, m, hidden, x, out, scales)
            else:
                config = tuple(cast_config(m, hidden, fused).values())
            want, want_s = (torch_swiglu_per_token_cast if fused else torch_per_token_cast)(x)
            diff = (out.view(torch.float8_e4m3fn).float() - want.float()).abs().max().item()
            assert torch.equal(scales, want_s) or fused, "tilus per_token_cast scales differ from torch's"
            assert diff <= (32.0 if fused else 0.0), f"tilus codes differ from torch's by {diff}"
            t = interleaved_ms(fns, repeat=30)
            moved = x.numel() * 2 + out.numel() + scales.numel() * 4
            floor = read_write_ms(out.numel(), 2 if fused else 1) if triton is not None else None
            rows.append((("swiglu+cast" if fused else "per_token_cast"), m, hidden, t, floor, moved))
            fl = f"floor {floor * 1e3:7.1f} us" if floor else "floor n/a"
            print(f"{rows[-1][0]:15s} {m:6d}x{hidden}: tilus {t['tilus'] * 1e3:7.1f} us "
                  f"(block_m, groups, warps, vec {config}{' tuned' if tune else ''}) "
                  f"({moved / t['tilus'] / 1e6:5.0f} GB/s)  torch {t['torch'] * 1e3:7.1f} us  {fl}", flush=True)
            for name in (n for n in t if n.startswith("tilus ")):
                print(f"{'':15s} {m:6d}x{hidden}: {name:22s} {t[name] * 1e3:7.1f} us"
                      + (f" {floor / t[name]:.2f}x of the floor" if floor else ""), flush=True)
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ms", default="1,16,128,1024,4096,8192")
    p.add_argument("--only", choices=["gemm", "quant"])
    p.add_argument("--quick", action="store_true", help="one LLM shape, one quantization size")
    p.add_argument("--shapes", default="", help="GEMM shapes MxNxK, comma-separated (instead of the default set)")
    p.add_argument("--quant-sizes", default="", help="quantization sizes MxHIDDEN, comma-separated (instead of "
                                                     "128x7168,4096x7168,16384x7168)")
    p.add_argument("--tune-block", action="store_true", help="the block-scaled tile by the autotuner among "
                                                         "BLOCK_TILES, not by block_config")
    p.add_argument("--tune-tensor", action="store_true", help="the per-tensor and per-row tile by the autotuner "
                                                          "among TILES, not by tensor_config")
    p.add_argument("--no-tune", action="store_true", help="the quantization's tile by cast_config, not by the "
                                                          "autotuner")
    p.add_argument("--cast-tiles", default="", help="quantization tiles BMxGxWxV timed beside the chosen one "
                                                    "(block_m, groups, warps, vec; vec 0: the compiler's layout), a "
                                                    "suffix c: cols_first, i: the SwiGLU's IEEE division (e.g. "
                                                    "1x8x2x16c,1x8x4x0,1x8x2x16ci)")
    p.add_argument("--block-tiles", default="", help="block-scaled tiles BMxBN, BMxBNxP (P products) or BMxBNxPxS "
                                                     "(S stages; e.g. 128x256,128x128x2,128x256x1x3) timed beside "
                                                     "the chosen one")
    p.add_argument("--tensor-tiles", default="", help="per-tensor tiles BN or BNxSTAGES of 128 rows (e.g. 192,256x3) "
                                                      "timed beside the chosen one")
    args = p.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    block_tiles = [tuple(int(v) for v in s.split("x")) for s in args.block_tiles.split(",") if s]
    tensor_tiles = [tuple(int(v) for v in s.split("x")) for s in args.tensor_tiles.split(",") if s]
    quant_sizes = [tuple(int(v) for v in s.split("x")) for s in args.quant_sizes.split(",") if s]
    print(f"FP8 on {torch.cuda.get_device_name()}; torch {torch.__version__}, "
          f"triton {triton.__version__ if triton else 'missing'}", flush=True)
    gemm = gemm_rows([int(x) for x in args.ms.split(",")], args.quick, shapes, block_tiles,
                     args.tune_tensor, tensor_tiles, args.tune_block) if args.only != "quant" else []
    cast_tiles = [c for c in args.cast_tiles.split(",") if c]
    quant = quant_rows(args.quick, quant_sizes, not args.no_tune, cast_tiles) if args.only != "gemm" else []
    print("\nsummary (time ratios: > 1 means tilus is faster)")
    if gemm:
        extra = [f"block {'x'.join(map(str, t))}" for t in block_tiles]
        extra += [f"tensor {'x'.join(map(str, t))}" for t in tensor_tiles]
        print(f"{'m x n x k':>20} {'tensor/cuBLAS':>14} {'tensor/fast':>12} {'row/cuBLAS row':>15} {'block/cuBLAS':>13}"
              f" {'block/cuBLAS block':>19}" + "".join(f" {e + '/cuBLAS':>20}" for e in extra))
        for m, n, k, t, _ in gemm:
            r = lambda ref, mine: f"{t[ref] / t[mine]:.2f}x" if ref in t else "n/a"  # noqa: E731
            print(f"{f'{m}x{n}x{k}':>20} {r('cuBLAS', 'tilus tensor'):>14} {r('cuBLAS fast', 'tilus tensor'):>12} "
                  f"{r('cuBLAS row', 'tilus row'):>15} {r('cuBLAS', 'tilus block'):>13}"
                  f" {r('cuBLAS block', 'tilus block'):>19}"
                  + "".join(f" {r('cuBLAS', 'tilus ' + e):>20}" for e in extra))
    for name, m, hidden, t, floor, moved in quant:
        f = f"{floor / t['tilus']:.2f}x of the floor" if floor else "floor n/a"
        tiles = " ".join(f"{k[6:]} {floor / v:.2f}" for k, v in t.items() if k.startswith("tilus ") and floor)
        print(f"{name:>15} {m}x{hidden}: {t['torch'] / t['tilus']:.2f}x torch, {f}" + (f"; tiles: {tiles}" if tiles else ""))


if __name__ == "__main__":
    main()
