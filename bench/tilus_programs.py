"""NVIDIA Tilus's own programs, run unchanged on tilus (GPU): its Hopper matmul v4 and v5 against
cuBLAS, and every config of its flash-attention v2 and v3 against torch SDPA, in one run.

    python bench/tilus_programs.py [matmul] [attention] [sanitize] [--carry carry] [--size 8192]
                                   [--seqlen 4096] [--fix NAME=VALUE ...]

The programs are NVIDIA Tilus's files (commit 9a22de0), not part of this repository: copy them,
unchanged, into the ignored folder carry/ first:

    carry/hopper_matmul/matmul_v4.py, carry/hopper_matmul/matmul_v5.py   (examples/hopper_matmul/)
    carry/attention/flash_attention_v2.py, carry/attention/flash_attention_v3.py   (examples/attention/)

They import nothing of Tilus's but the `tilus` package; pandas, which they only use to print their
own tables, is replaced by a stand-in when it is not installed.

matmul: each Script tunes its own space at size^3 (f16, c = a @ b.T; the configs compile in
parallel), its result is checked against cuBLAS's (atol = rtol = 1e-2, as the files' own check),
every config's ptxas report is read (wgmma serialized? spills?), and the winner and cuBLAS
(torch.matmul) are timed in turns: rounds of 20 launches each after 5 warm-up launches, the order
reversed every round, the median round of each kept. `--fix block_k=64` (repeatable) fixes a
constructor argument, as a caller may, so that only the rest of the space is tuned (a shorter run).

attention: every config of each file's autotune space (v3's own debug_schedule aside: NVIDIA
Tilus runs only that one) is constructed (NVIDIA Tilus's constructor refuses some: resolve_dot_config
finds no warp split), compiled (in parallel), run at batch 1, seqlen, 32 heads, 8 K/V heads, head
dim 128 (causal; the files' own llama-8B shape) and checked against float32 attention
(atol = rtol = 1e-2), then timed (CUDA events, median of 10 calls after one) next to torch SDPA
(causal, GQA) with its default backend and with cuDNN. v3 is also run as its file runs it (its
debug_schedule). FLOPs are counted as the files count them: 2 * batch * heads * seqlen^2 * d.

sanitize: one config of each file at a small size, each result checked (for compute-sanitizer:
v5 and v4 at 512 x 768 x 320, v2 and v3 at batch 1, seqlen 256 (a multiple of their blocks: their k
prefetch is not bounds-checked), 8/2 heads, head dim 128; v3 as
the file runs it, its debug_schedule).

Each row of the short table is printed as it is made (a line starting `SUMMARY `) and again last.
"""
import argparse
import concurrent.futures
import importlib.util
import math
import statistics
import sys
import time
import traceback
import types
from pathlib import Path

import tilus

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "python"))
from common import timed  # noqa: E402  (median ms of CUDA-event-timed calls)


def _pandas_stand_in():
    """A module that takes the place of pandas where it is missing: the files set display options
    and build a DataFrame only to print their own tables (this bench prints its own)."""
    try:
        import pandas  # noqa: F401
        return
    except ImportError:
        pass
    pd = types.ModuleType("pandas")
    pd.options = types.SimpleNamespace(display=types.SimpleNamespace())

    class DataFrame:
        def __init__(self, rows, columns):
            self.rows, self.columns = rows, columns

        def __str__(self):
            return "\n".join(["  ".join(map(str, self.columns))] + ["  ".join(map(str, r)) for r in self.rows])

    pd.DataFrame = DataFrame
    sys.modules["pandas"] = pd


def load(path):
    """The module of a program file, imported from where it lies (unchanged)."""
    if not path.exists():
        raise SystemExit(f"{path} is missing: copy NVIDIA Tilus's file there unchanged (see --help)")
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def full_space(cls):
    """Every config of an autotuned class's space (dicts of constructor arguments)."""
    by_text = cls._tilus_values
    return [{n: by_text[n][t] for n, t in c.items()} for c in cls._tilus_space.configs({})]


def first_line(e):
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:220]


def timed_in_turns(fns, rounds=5, reps=20, warmup=5):
    """{name: ms per call}: each function timed over `reps` calls with CUDA events, in turns (the
    order reversed every round), the median of its rounds."""
    import torch
    times = {name: [] for name in fns}
    items = list(fns.items())
    for r in range(rounds):
        for name, fn in (items if r % 2 == 0 else items[::-1]):
            for _ in range(warmup):
                fn()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / reps)
    return {name: statistics.median(v) for name, v in times.items()}


def compiled_report(inst, args):
    """(registers, spill bytes, wgmma serialization reason) of one config's compiled kernel."""
    try:
        c = inst.compiled(*args)
        return c.registers, c.spill_store_bytes, c.wgmma_serialized
    except Exception as e:  # a config the tuner skipped (shared memory, ...)
        return None, None, "not compiled: " + first_line(e)


def add(summary, line):
    """A row of the short table, printed at once too (a later part may run out of time)."""
    summary.append(line)
    print("SUMMARY " + line, flush=True)


def bench_matmul(carry, size, summary, fixed):
    import torch
    from tilus import tuning
    for file, cls_name in [("matmul_v5", "MatmulWGMMAV5"), ("matmul_v4", "MatmulWGMMAV4")]:
        print(f"\n=== {file}.py ({cls_name}) at {size}^3, f16, c = a @ b.T", flush=True)
        mod = load(carry / "hopper_matmul" / f"{file}.py")
        cls = getattr(mod, cls_name)
        m = n = k = size
        torch.manual_seed(0)
        a = (torch.rand(m, k, dtype=torch.float16, device="cuda") - 0.5) / math.sqrt(k)
        b = (torch.rand(n, k, dtype=torch.float16, device="cuda") - 0.5) / math.sqrt(k)
        c = torch.empty(m, n, dtype=torch.float16, device="cuda")
        kernel = cls(**fixed)
        t0 = time.time()
        kernel(m, n, k, a, b, c)  # tunes the file's space (its configs compile in parallel), runs the winner
        torch.cuda.synchronize()
        tune_s = time.time() - t0
        ref = a @ b.T
        try:
            torch.testing.assert_close(c, ref, atol=1e-2, rtol=1e-2)
            check = "ok"
        except AssertionError as e:
            check = "FAIL: " + first_line(e)
        tilus.autotune_report()
        tuner = kernel._tilus_tuner
        winner = tuner.winner_for((m, n, k, a, b, c), {})
        args = (m, n, k, a, b, c)
        w_regs, w_spill, w_ser = compiled_report(winner, args)
        serialized, spilling = [], []
        configs = tuning.space_of(cls, fixed)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:  # cache hits; NVRTC runs outside the GIL
            reports = list(pool.map(lambda cfg: compiled_report(tuner.instance(cfg), args), configs))
        for cfg, (regs, spill, ser) in zip(configs, reports):
            if regs is None:
                continue
            if ser:
                serialized.append((cfg, ser))
            if spill and spill > 0:
                spilling.append((cfg, spill))
        print(f"configs whose wgmma ptxas serialized: {len(serialized)}")
        for cfg, why in serialized:
            print(f"  {cfg}: {why}")
        print(f"configs that spill: {len(spilling)}")
        for cfg, spill in spilling:
            print(f"  {cfg}: {spill} bytes of spill stores per thread")
        times = timed_in_turns({"cuBLAS": lambda: torch.matmul(a, b.T, out=ref),
                                file: lambda: kernel(m, n, k, a, b, c)})
        flops = 2.0 * m * n * k
        ratio = times["cuBLAS"] / times[file]
        cfg = {name: getattr(winner, name) for name in cls._tilus_space.names if name not in fixed}
        print(f"winner {cfg}: {w_regs} registers, {w_spill} bytes of spills, wgmma serialized: {w_ser or 'no'}")
        print(f"{file}: {times[file]:.3f} ms = {flops / times[file] * 1e-9:.0f} TFLOP/s; cuBLAS "
              f"{times['cuBLAS']:.3f} ms = {flops / times['cuBLAS'] * 1e-9:.0f} TFLOP/s; "
              f"{ratio:.3f}x cuBLAS; check {check}; tuning {tune_s:.0f} s", flush=True)
        add(summary, f"{file:<22} {size}^3  {flops / times[file] * 1e-9:5.0f} TFLOP/s  cuBLAS "
                       f"{flops / times['cuBLAS'] * 1e-9:5.0f}  {ratio:.3f}x  check {check}  serialized "
                       f"{len(serialized)}  spilling {len(spilling)}"
            f"{'  fixed ' + str(fixed) if fixed else ''}  space {len(configs)}")


def attention_reference(q, k, v):
    """float32 causal attention of [batch, seq, heads, d] tensors, K/V heads shared, in the same
    layout."""
    import torch
    group = q.shape[2] // k.shape[2]
    qt = q.float().transpose(1, 2)
    kt = k.float().repeat_interleave(group, dim=2).transpose(1, 2)
    vt = v.float().repeat_interleave(group, dim=2).transpose(1, 2)
    return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True).transpose(1, 2)


def bench_attention(carry, seqlen, summary, fixed):
    import torch
    batch, heads, kv_heads, d = 1, 32, 8, 128
    torch.manual_seed(0)
    q = torch.randn(batch, seqlen, heads, d, dtype=torch.float16, device="cuda")
    k = torch.randn(batch, seqlen, kv_heads, d, dtype=torch.float16, device="cuda")
    v = torch.randn(batch, seqlen, kv_heads, d, dtype=torch.float16, device="cuda")
    want = attention_reference(q, k, v)
    flops = 2.0 * batch * heads * seqlen * seqlen * d
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    sdpa = {}
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for name, backends in [("SDPA", None), ("SDPA cuDNN", [SDPBackend.CUDNN_ATTENTION])]:
        def run(backends=backends):
            if backends is None:
                return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
            with sdpa_kernel(backends):
                return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
        try:
            sdpa[name] = timed(run, "cuda", repeat=10)
        except Exception as e:
            print(f"{name}: not run ({first_line(e)})")
    for name, ms in sdpa.items():
        print(f"{name}: {ms:.3f} ms = {flops / ms * 1e-9:.0f} TFLOP/s")
    sdpa_ms = min(sdpa.values()) if sdpa else float("nan")
    for file in ["flash_attention_v2", "flash_attention_v3"]:
        print(f"\n=== {file}.py at batch {batch}, seqlen {seqlen}, heads {heads}/{kv_heads}, d {d}, causal", flush=True)
        mod = load(carry / "attention" / f"{file}.py")
        cls = mod.FlashAttention
        args = (batch, seqlen, q, k, v) if file.endswith("v2") else (batch, seqlen, seqlen, q, k, v)
        configs = [c for c in full_space(cls) if all(c.get(n, v) == v for n, v in fixed.items())]
        made, refused = [], []
        for cfg in configs:
            try:
                made.append((cfg, cls(dtype=tilus.float16, num_heads=heads, num_heads_kv=kv_heads, head_size=d, **cfg)))
            except Exception as e:
                refused.append((cfg, "constructor: " + first_line(e)))
        out = torch.empty_like(q)
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(16) as pool:  # NVRTC runs outside the GIL
            results = list(pool.map(lambda ck: _compile(ck[1], args + (out,)), made))
        compile_s = time.time() - t0
        rows = []
        for (cfg, inst), err in zip(made, results):
            if err:
                refused.append((cfg, err))
                continue
            out = torch.empty_like(q)
            try:
                inst(*args, out)
                torch.cuda.synchronize()
                diff = (out.float() - want).abs().max().item()
                ok = torch.allclose(out.float(), want, atol=1e-2, rtol=1e-2)
                ms = timed(lambda: inst(*args, out), "cuda", repeat=10)
            except Exception as e:
                refused.append((cfg, "run: " + first_line(e)))
                continue
            rows.append((cfg, ok, diff, ms))
            print(f"{'PASS' if ok else 'FAIL'} {cfg}: max diff {diff:.1e}, {ms:.3f} ms = {flops / ms * 1e-9:.0f} TFLOP/s",
                  flush=True)
        for cfg, why in refused:
            print(f"REFUSED {cfg}: {why}")
        passed = [r for r in rows if r[1]]
        best = min(passed, key=lambda r: r[3]) if passed else None
        print(f"{file}: {len(passed)} of {len(configs)} configs pass, {len(rows) - len(passed)} fail, "
              f"{len(refused)} refused; compiled in {compile_s:.0f} s")
        line = f"{file:<22} {len(passed):3d}/{len(configs)} pass {len(rows) - len(passed)} fail {len(refused)} refused"
        if best:
            line += (f"  best {flops / best[3] * 1e-9:4.0f} TFLOP/s {best[0]}  SDPA {flops / sdpa_ms * 1e-9:4.0f}  "
                     f"{sdpa_ms / best[3]:.2f}x SDPA")
        add(summary, line)
        if file.endswith("v3"):  # as the file runs it: NVIDIA Tilus's debug_schedule
            out = torch.empty_like(q)
            try:
                got = mod.flash_attention(q, k, v)
                ok = torch.allclose(got.float(), want, atol=1e-2, rtol=1e-2)
                ms = timed(lambda: mod.flash_attention(q, k, v), "cuda", repeat=10)
                add(summary, f"{'flash_attention (v3)':<22} its debug_schedule {cls.debug_schedule}: "
                               f"{'ok' if ok else 'FAIL'}, {flops / ms * 1e-9:.0f} TFLOP/s")
            except Exception as e:
                add(summary, f"{'flash_attention (v3)':<22} FAIL: {first_line(e)}")


def sanitize(carry, summary):
    """One config of each program at a small size, its result checked: what compute-sanitizer runs."""
    import torch
    torch.manual_seed(0)
    m, n, k = 512, 768, 320
    a = (torch.rand(m, k, dtype=torch.float16, device="cuda") - 0.5) / math.sqrt(k)
    b = (torch.rand(n, k, dtype=torch.float16, device="cuda") - 0.5) / math.sqrt(k)
    for file, cls_name in [("matmul_v5", "MatmulWGMMAV5"), ("matmul_v4", "MatmulWGMMAV4")]:
        cls = getattr(load(carry / "hopper_matmul" / f"{file}.py"), cls_name)
        cfg = dict(num_stages=4, block_m=128, block_n=256, block_k=64, swizzle_size=8)
        c = torch.full((m, n), 7.0, dtype=torch.float16, device="cuda")
        cls(**cfg)(m, n, k, a, b, c)
        torch.cuda.synchronize()
        ok = torch.allclose(c, a @ b.T, atol=1e-2, rtol=1e-2)
        add(summary, f"{file:<22} {m}x{n}x{k} {cfg}: {'ok' if ok else 'FAIL'}")
    batch, seqlen, heads, kv_heads, d = 1, 256, 8, 2, 128
    q = torch.randn(batch, seqlen, heads, d, dtype=torch.float16, device="cuda")
    kk = torch.randn(batch, seqlen, kv_heads, d, dtype=torch.float16, device="cuda")
    v = torch.randn(batch, seqlen, kv_heads, d, dtype=torch.float16, device="cuda")
    want = attention_reference(q, kk, v)
    v2 = load(carry / "attention" / "flash_attention_v2.py").FlashAttention
    cfg = dict(num_warps=4, block_q=64, block_kv=64)
    out = torch.empty_like(q)
    v2(dtype=tilus.float16, num_heads=heads, num_heads_kv=kv_heads, head_size=d, **cfg)(batch, seqlen, q, kk, v, out)
    torch.cuda.synchronize()
    ok = torch.allclose(out.float(), want, atol=1e-2, rtol=1e-2)
    add(summary, f"{'flash_attention_v2':<22} seqlen {seqlen} {cfg}: {'ok' if ok else 'FAIL'}")
    v3 = load(carry / "attention" / "flash_attention_v3.py")
    got = v3.flash_attention(q, kk, v)
    torch.cuda.synchronize()
    ok = torch.allclose(got.float(), want, atol=1e-2, rtol=1e-2)
    add(summary, f"{'flash_attention_v3':<22} seqlen {seqlen} {v3.FlashAttention.debug_schedule}: "
                 f"{'ok' if ok else 'FAIL'}")


def _compile(inst, args):
    try:
        inst.compiled(*args)
        return None
    except Exception as e:
        return "compile: " + first_line(e)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("parts", nargs="*", default=["matmul", "attention"], choices=["matmul", "attention", "sanitize"])
    p.add_argument("--carry", default=str(ROOT / "carry"), help="where the program files lie (default: carry/)")
    p.add_argument("--size", type=int, default=8192, help="the matmul's m = n = k (default 8192)")
    p.add_argument("--seqlen", type=int, default=4096, help="the attention's sequence length (default 4096)")
    p.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                   help="fix a constructor argument of the autotuned classes (a Python literal); repeatable")
    a = p.parse_args()
    import ast
    fixed = {}
    for item in a.fix:
        name, _, value = item.partition("=")
        fixed[name.strip()] = ast.literal_eval(value.strip())
    if not tilus.gpu_available():
        raise SystemExit("tilus_programs: needs a GPU")
    _pandas_stand_in()
    import torch
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    carry = Path(a.carry)
    summary = []
    for part in a.parts:
        try:
            if part == "matmul":
                bench_matmul(carry, a.size, summary, fixed)
            elif part == "attention":
                bench_attention(carry, a.seqlen, summary, fixed)
            else:
                sanitize(carry, summary)
        except Exception:
            traceback.print_exc()
            add(summary, f"{part}: FAILED (traceback above)")
    print("\nsummary")
    for line in summary:
        print(line)


if __name__ == "__main__":
    main()
