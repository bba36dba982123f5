"""Attention on the GPU in one run: tilus (examples/python/flash_attention.py, flash_decoding.py)
against torch SDPA (its cuDNN and flash backends) and a Triton kernel of the fused-attention
tutorial's algorithm, and decode against SDPA and the time to read the KV cache once.

    PYTHONPATH=build/python python bench/attention.py [--sweep full|goal|smoke] [--only prefill|decode]
        [--head-dims 128[,64,...]] [--mask causal|none] [--seqlens 4096[,...]] [--candidates [--no-persistent]
        [--candidate-dtypes f16,bf16] [--extra-candidates 'key=value ...' ... [--only-extra]] [--json FILE]]
        [--rounds N] [--timing block|mixed|both] [--warmup SECONDS] [--no-flash]
        [--no-triton] [--decode-runs N]
        [--readme README.md]
    python bench/attention.py --ncu [--seqlen 4096 --head-dim 128 --causal]

Prefill: 16k tokens per launch (batch = 16384 / seqlen), heads x d = 2048, at seqlen 1k-16k,
d = 64, 128, 256, causal and not, f16 and bf16; TFLOP/s count 4 * batch * heads * seqlen^2 * d
(half of it causal). Decode: one query token, 32 query heads on 8 kv heads, d = 128, pages of
64 keys scattered at random, KV length 4k-128k, batch 1-64; "KV read" is a kernel that only
reads both caches once (a Triton sum; the floor for any decode kernel), and the ratio is tilus's
time over it. Every launch is timed with CUDA events after an L2 flush, median of 20, the
kernels of one shape interleaved (bench/run.py; prefill: 1.5 s of the shape's kernels first,
then 5 rounds (10 at 4096), each launching every kernel once per pass in a new random order, the
median of each one's rounds). Decode's launches are queued behind a GPU sleep
(median_ms(queued=True)): a launch that waits for the last one times the host's cost of the call
as well wherever it exceeds the flush's ~60-70 us of GPU time, and flash_decode's came close
(35-63 us a call on the H200's host before it kept its launches, 20 us after; tilus's rows,
every configuration alike, rose 12-15 % in later rounds while the KV read's did not, and ncu
timed the kernel alone at 1.0x the read), so the table has the GPU's time and flash_decode's
host time per call in a column of its own;
each figure is the median of 5 rounds, their spread beside it. --decode-runs N measures the decode
table N times in the call. Results are checked against SDPA first.

--sweep goal measures only the shapes of issue 40's goal (seqlen >= 4096: 4096, 8192 and 16384
at d = 128, 4096 at d = 64 and 256, causal and not, f16 and bf16 at d = 128; decode at 16k and 64k
keys), smoke two of each. --readme FILE
writes the figures into FILE's attention tables (between the `<!-- attention-bench -->` markers):
the rows measured in this run replace theirs, the others keep what they had ("-" until measured).

--head-dims keeps the prefill shapes of those head dims only (the sweep's others are not run),
--mask causal (none) its causal (non-causal) shapes only, --seqlens those query lengths only.
--rounds N: each prefill figure the median of N rounds (5, and 40960 / seqlen below 8192: 10 at
4096); --timing mixed (the default): a round launches every kernel of the shape once per pass, 20
passes, in a new random order each (the kernels share the GPU's clock and heat launch by launch),
where block times each one's 20 launches in a row, both: the shape timed block then mixed;
--warmup SECONDS (1.5) runs the shape's kernels in turn that long before its rounds (an H200 that
idled through a shape's setup runs its first second of attention at up to 1980 MHz, then
1450-1750 under its 700 W limit, dipping to ~1400 as it engages: docs/gpu.md, "Attention on
Hopper"); --no-flash leaves SDPA's flash backend out (it takes the longest).

--candidates also times, at each decode shape, every configuration flash_decoding.decode_candidates
offers (key block size, stages, blocks per SM, splits) in the same interleaved run, marks the
fastest, and prints which one won per shape: the rule decode_config follows comes from these. At
each f16 prefill shape it does the same with flash_attention.prefill_candidates (changes to the
rule flash_attention.prefill_config that a launch takes: stages, key block size, ping-pong off,
three consumer warp groups, o's rescale between the GEMMs, the ping-pong turns at named barriers,
the L2 sections of the causal order,
the persistent kernel of one block per SM unless --no-persistent; bf16 runs the same code, and
times them with --candidate-dtypes f16,bf16; --extra-candidates 'key=value ...' adds configurations
of one's own, --only-extra those alone: one of them equal to the rule times it twice, the
distance between the two the bench's noise); a table of every candidate's TFLOP/s and ratio to
cuDNN per shape comes last, with cuDNN's rounds' min-max and each candidate's spread over its
rounds ((max - min) / median; --json FILE writes every round's figures). --compile-only [--part K/N] compiles the
prefill kernels a run would launch into the disk cache and exits (N processes compile at once). Every prefill kernel (the candidates
too) is compiled in parallel before the first is timed. --no-triton leaves Triton out.

--ncu runs itself under `ncu --clock-control none` at one prefill shape and prints, for tilus and
cuDNN's kernel, the time, SM clock and tensor pipes busy (`sm__pipe_tensor_cycles_active`, as
bench/hopper_profile.py does for the matmul).
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import time

try:
    import torch
except ImportError:  # the README filling (tests on CI) needs neither torch nor a GPU
    torch = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None

TOKENS = 16384
WIDTH = 2048  # heads * d

# (d, seqlen, causal) of the prefill runs (f16; bf16 at d = 128) and (batch, keys) of decode.
_PREFILL_128 = [(128, s, c) for s in (1024, 4096, 8192, 16384) for c in (False, True)]
SWEEPS = {
    "full": (_PREFILL_128 + [(64, s, c) for s in (4096, 16384) for c in (False, True)]
             + [(256, 4096, c) for c in (False, True)],
             [(1, 4096), (1, 16384), (1, 65536), (1, 131072), (8, 16384), (8, 65536), (64, 4096), (64, 16384)]),
    "goal": ([(d, s, c) for d, s in ((128, 4096), (128, 8192), (128, 16384), (64, 4096), (256, 4096))
              for c in (False, True)],
             [(1, 16384), (1, 65536), (8, 16384), (8, 65536)]),
    "smoke": ([(128, 4096, False), (128, 4096, True)], [(1, 16384), (8, 16384)]),
}

if triton is not None:
    @triton.jit
    def _triton_attention(Q, K, V, O, scale, seqlen, stride_b, stride_h, stride_s, H: tl.constexpr,
                          D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr):
        """One BM-row query tile of one (batch, head): the key blocks without a mask first, then
        (causal) the blocks that cross the diagonal with it; online softmax in exp2."""
        pid = tl.program_id(0)
        bh = tl.program_id(1)
        base = (bh // H) * stride_b + (bh % H) * stride_h
        rows = pid * BM + tl.arange(0, BM)
        dims = tl.arange(0, D)
        q = tl.load(Q + base + rows[:, None] * stride_s + dims[None, :], mask=rows[:, None] < seqlen, other=0.0)
        m = tl.full([BM], float("-inf"), tl.float32)
        l = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, D], tl.float32)
        scale2 = scale * 1.4426950408889634
        full_end = (pid * BM) // BN * BN if CAUSAL else seqlen // BN * BN
        end = tl.minimum((pid + 1) * BM, seqlen) if CAUSAL else seqlen
        for start in range(0, full_end, BN):  # every key of these blocks is visible to every row
            keys = start + tl.arange(0, BN)
            kt = tl.load(K + base + keys[None, :] * stride_s + dims[:, None])
            s = tl.dot(q, kt) * scale2
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            v = tl.load(V + base + keys[:, None] * stride_s + dims[None, :])
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        for start in range(full_end, end, BN):  # the diagonal and the ragged end
            keys = start + tl.arange(0, BN)
            kt = tl.load(K + base + keys[None, :] * stride_s + dims[:, None], mask=keys[None, :] < seqlen, other=0.0)
            s = tl.dot(q, kt) * scale2
            ok = keys[None, :] < seqlen
            if CAUSAL:
                ok = ok & (keys[None, :] <= rows[:, None])
            s = tl.where(ok, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            v = tl.load(V + base + keys[:, None] * stride_s + dims[None, :], mask=keys[:, None] < seqlen, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        acc = acc / l[:, None]
        tl.store(O + base + rows[:, None] * stride_s + dims[None, :], acc.to(O.dtype.element_ty),
                 mask=rows[:, None] < seqlen)

    @triton.jit
    def _triton_read(X, n, out, BLOCK: tl.constexpr):
        """Sums 32-bit words of x, BLOCK per step: a kernel that only reads (the KV-read floor)."""
        pid = tl.program_id(0)
        step = tl.num_programs(0) * BLOCK
        acc = tl.zeros([BLOCK], tl.int32)
        for start in range(pid * BLOCK, n, step):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(X + offs, mask=offs < n, other=0)
        tl.store(out + pid, tl.sum(acc, 0))


def triton_attention(q, k, v, o, causal):
    """q, k, v, o: [batch, heads, seqlen, d] (strided views of [batch, seqlen, heads, d] tensors)."""
    b, h, s, d = q.shape
    bm, bn = 128, (128 if d <= 64 else 64)
    warps = 8 if d >= 128 else 4
    grid = (triton.cdiv(s, bm), b * h)
    _triton_attention[grid](q, k, v, o, 1.0 / math.sqrt(d), s, q.stride(0), q.stride(1), q.stride(2), H=h, D=d,
                            BM=bm, BN=bn, CAUSAL=causal, num_warps=warps, num_stages=2 if d >= 256 else 3)


def sdpa(backend):
    from torch.nn.attention import sdpa_kernel

    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def dense_call(q, k, v, causal, cfg):
    """(kernel, arguments) of flash_attention(q, k, v, causal, **cfg) (dense [batch, seqlen, heads, d])."""
    from flash_attention import _uniform_offsets, prefill_call
    b, s, h, d = q.shape
    hk = k.shape[2]
    return prefill_call(q.reshape(b * s, h, d), k.reshape(b * s, hk, d), v.reshape(b * s, hk, d),
                        _uniform_offsets(b, s, q), _uniform_offsets(b, s, q), s, causal, **cfg)[:2]


def persistent_blocks(persistent):
    """The persistent candidate's blocks (one per SM), 0 where --no-persistent leaves it out."""
    return torch.cuda.get_device_properties(0).multi_processor_count if persistent else 0


def parse_config(text, sms):
    """A configuration given on the command line (`--extra-candidates`): `key=value ...`, each value
    an int, True / False or `sms` (the GPU's multiprocessors), e.g. `persistent=sms block_n=128`."""
    cfg = {}
    for item in text.split():
        key, eq, val = item.partition("=")
        if not eq or not key:
            raise SystemExit(f"attention: a candidate is key=value ..., not {text!r}")
        words = {"sms": sms, "True": True, "False": False}
        try:
            cfg[key] = words[val] if val in words else int(val)
        except ValueError:
            raise SystemExit(f"attention: a candidate's value is an int, True, False or sms, not {val!r}") from None
    return cfg


def shape_candidates(name, d, causal, s, persistent, extra=(), only_extra=False):
    """The candidates timed at a prefill shape of dtype `name`: flash_attention.prefill_candidates'
    (not with `only_extra`) and `extra` (configurations parse_config reads, on top of the rule as
    those are)."""
    from flash_attention import prefill_candidates
    sms = persistent_blocks(True)
    return ([] if only_extra else prefill_candidates(d, causal, persistent_blocks(persistent), s, name)) + [
        parse_config(x, sms) for x in extra]


def compile_prefill(tables, candidates, persistent=True, part=None, cand_dtypes=("float16",), extra=(), only_extra=False):
    """Every kernel the prefill tables ([(dtypes, configs)]) launch (with `candidates`, each shape's
    candidates too at the dtypes of `cand_dtypes`), compiled in parallel threads before anything is
    timed, each once (the shapes that launch the same kernel share it); part (k, n): only every n-th
    from the k-th (--compile-only --part k/n: n processes fill the disk cache at once)."""
    from concurrent.futures import ThreadPoolExecutor
    from flash_attention import config_name, kernel_config, prefill_config
    gpu_sms = persistent_blocks(True)  # the rule's: the GPU's SMs
    work, seen = [], set()
    for dtypes, configs in tables:
        for name in dtypes:
            for d, s, causal in configs:
                for cfg in [{}] + (shape_candidates(name, d, causal, s, persistent, extra, only_extra)
                                   if candidates and name in cand_dtypes else []):
                    key = (name, d, causal, config_name(kernel_config({**prefill_config(d, causal, gpu_sms, s, name), **cfg})))
                    if key not in seen:
                        seen.add(key)
                        work.append((name, d, s, causal, cfg))
    if part:
        work = work[part[0]::part[1]]

    def build(item):  # a configuration that fails is reported here and left out when timed
        name, d, s, causal, cfg = item
        b, h = TOKENS // s, WIDTH // d
        q = torch.empty(b, s, h, d, device="cuda", dtype=getattr(torch, name))
        try:
            kernel, args = dense_call(q, q, q, causal, cfg)
            kernel.compiled(*args)
        except Exception as e:  # noqa: BLE001 (any compile error: the others still run)
            return f"  {name} d {d} causal {causal} {config_name(cfg)}: does not compile ({str(e).splitlines()[0][:160]})"
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=max(1, min(len(work), os.cpu_count() or 1))) as pool:
        failed = [f for f in pool.map(build, work) if f]
    print(f"prefill: {len(work)} kernels compiled in {time.time() - t0:.0f} s" + "".join("\n" + f for f in failed),
          flush=True)


def _short(name):
    """A dtype's name as the tables print it (f16, bf16)."""
    return {"float16": "f16", "bfloat16": "bf16"}.get(name, name)


def prefill(dtypes, configs, candidates=False, with_triton=True, persistent=True, cand_dtypes=("float16",), extra=(),
            rounds=None, timings=("mixed",), with_flash=True, only_extra=False, warm_s=1.5):
    """The prefill table; with `candidates`, every configuration of flash_attention.prefill_candidates
    timed in the same interleaved run at the dtypes of `cand_dtypes` (tilus's row is the rule's).
    Each figure is the median of `rounds` rounds (None: 5, 40960 / seqlen at shorter lengths, where
    they are cheap; bench/run.py's interleaved_ms, after `warm_s`
    seconds of the shape's kernels in turn), timed as each of `timings` says ("block": each kernel's
    20 launches in a row, "mixed": interleaved_ms's launch-by-launch rounds; both: the shape twice);
    `with_flash` False leaves SDPA's flash backend out.
    Returns the table's rows and, with `candidates`, (dtype, d, seqlen, causal, [(label, TFLOP/s)],
    cuDNN's TFLOP/s, {label: each round's TFLOP/s}, each round's start, the timing) per shape and
    timing, the rule first (labelled "rule")."""
    from run import interleaved_ms  # bench/run.py: the timing every bench shares
    from torch.nn.attention import SDPBackend
    from flash_attention import config_name, flash_attention
    print(f"\nprefill: {TOKENS} tokens per launch, heads x d = {WIDTH}, TFLOP/s (ratio: tilus / cuDNN)", flush=True)
    print(f"{'dtype':5} {'d':>4} {'seqlen':>6} {'causal':>6} | {'tilus':>7} {'cuDNN':>7} {'flash':>7} {'Triton':>7} | "
          f"{'vs cuDNN':>8}", flush=True)
    rows, tried, each = [], [], []
    for name in dtypes:
        dt = getattr(torch, name)
        for d, s, causal in configs:
            b, h = TOKENS // s, WIDTH // d
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dt) for _ in range(3))
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            out = torch.empty_like(q).transpose(1, 2)  # the strides of qt (the Triton kernel shares them)
            got, _ = flash_attention(q, k, v, causal=causal)
            want = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            err = (got.transpose(1, 2).float() - want.float()).abs().max().item()
            fns = {"tilus": lambda: flash_attention(q, k, v, causal=causal)}
            for label, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION),) + (
                    (("flash", SDPBackend.FLASH_ATTENTION),) if with_flash else ()):
                try:
                    sdpa(backend)(qt, kt, vt, causal)
                    fns[label] = (lambda f: lambda: f(qt, kt, vt, causal))(sdpa(backend))
                except RuntimeError as e:
                    print(f"  {label} SDPA: not available here ({str(e).splitlines()[0][:80]})", flush=True)
            for cfg in (shape_candidates(name, d, causal, s, persistent, extra, only_extra) if candidates and name in cand_dtypes
                        else []):
                try:
                    cerr = (flash_attention(q, k, v, causal=causal, **cfg)[0].transpose(1, 2).float() - want.float()).abs()
                except Exception as e:  # noqa: BLE001
                    print(f"  {config_name(cfg)}: fails ({str(e).splitlines()[0][:120]}), left out", flush=True)
                    continue
                if cerr.max().item() > 2e-2 + err:
                    print(f"  {config_name(cfg)}: wrong (max abs err vs SDPA {cerr.max().item():.3g}), left out", flush=True)
                    continue
                fns[config_name(cfg)] = (lambda c: lambda: flash_attention(q, k, v, causal=causal, **c))(cfg)
            if triton is not None and with_triton:
                triton_attention(qt, kt, vt, out, causal)
                terr = (out.float() - want.float()).abs().max().item()
                if terr < 5e-2:
                    fns["Triton"] = lambda: triton_attention(qt, kt, vt, out, causal)
                else:
                    print(f"  Triton: wrong (max abs err {terr:.3g}), left out", flush=True)
            for n_mode, mode in enumerate(timings):
                per_round, stamps = {}, []
                ms = interleaved_ms(fns, rounds=rounds or max(5, 40960 // s), repeat=20, per_round=per_round,
                                    mixed=mode == "mixed",
                                    stamps=stamps, warm_s=0.0 if n_mode else warm_s)
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                tf = {k: flops / v / 1e9 for k, v in ms.items()}
                tf_rounds = {("rule" if k == "tilus" else k): [flops / x / 1e9 for x in v] for k, v in per_round.items()}
                ratio = tf["tilus"] / tf["cuDNN"] if "cuDNN" in tf else float("nan")
                cell = lambda k: f"{tf[k]:7.0f}" if k in tf else f"{'-':>7}"  # noqa: E731
                lo_hi = lambda k: f"{min(tf_rounds[k]):.0f}-{max(tf_rounds[k]):.0f}" if k in tf_rounds else "-"  # noqa: E731
                print(f"{_short(name):5} {d:4} {s:6} {str(causal):>6} | {cell('tilus')} {cell('cuDNN')} {cell('flash')} "
                      f"{cell('Triton')} | {ratio:7.2f}x | rounds: tilus {lo_hi('rule')}, cuDNN {lo_hi('cuDNN')}"
                      + (f"  (max abs err vs SDPA {err:.2g})" if err > 2e-2 else "")
                      + (f"  ({mode} timing)" if len(timings) > 1 else ""), flush=True)
                rows.append((name, d, s, causal, tf, ratio))
                if candidates and name in cand_dtypes:
                    others = [k for k in tf if k not in ("tilus", "cuDNN", "flash", "Triton")]  # the candidates
                    each.append((name, d, s, causal, [("rule", tf["tilus"])] + [(k, tf[k]) for k in others],
                                 tf.get("cuDNN"), tf_rounds, stamps, mode))
                    timed = [(tf["tilus"], "default")] + [(tf[k], k) for k in others]
                    best = max(timed)
                    for t, label in timed:
                        print(f"  {label:34} {t:7.0f} TFLOP/s {t / tf['cuDNN'] if 'cuDNN' in tf else float('nan'):5.2f}x cuDNN"
                              + ("  <- fastest" if (t, label) == best else ""), flush=True)
                    tried.append(f"{_short(name):5} {d:4} {s:6} {str(causal):>6} | {best[1]:34} {best[0]:7.0f}, default "
                                 f"{tf['tilus']:.0f}" + (f" ({mode} timing)" if len(timings) > 1 else ""))
            del q, k, v, qt, kt, vt, out, got, want
            torch.cuda.empty_cache()
    if tried:
        print("\nprefill candidates, the fastest per shape (TFLOP/s):\n" + "\n".join(tried), flush=True)
    return rows, each


def spread(figures):
    """The spread of a kernel's round figures: (max - min) / median, in %."""
    x = sorted(figures)
    return 100 * (x[-1] - x[0]) / x[len(x) // 2] if x else float("nan")


def candidates_table(each):
    """Every candidate of each shape (prefill()'s second result) in a line: cuDNN's TFLOP/s (its
    rounds' min-max), then each candidate's short name, TFLOP/s, ratio to cuDNN and the spread of
    its rounds (max - min over the median, %), the rule first and the fastest marked with *."""
    lines = ["prefill candidates, TFLOP/s, x cuDNN and the spread of the rounds (* the fastest):",
             f"{'dtype':5} {'seqlen':>6} {'causal':>6} | cuDNN (rounds' min-max) | rule, then each candidate (changes "
             "to the rule)"]
    for name, d, s, causal, timed, cudnn, rounds, *rest in each:
        best = max(t for _, t in timed)
        cells = [f"{short_config(label)} {t:.0f} {t / cudnn if cudnn else float('nan'):.3f}"
                 + ("*" if t == best else "") + f" {spread(rounds.get(label, [])):.1f}%" for label, t in timed]
        c = sorted(rounds.get("cuDNN", []))
        head = f"{cudnn:.0f} ({c[0]:.0f}-{c[-1]:.0f})" if cudnn and c else "-"
        lines.append(f"{_short(name):5} {s:6} {str(causal):>6} | {head} | " + " | ".join(cells)
                     + (f"  (d {d})" if d != 128 else "") + (f"  ({rest[1]} timing)" if len(rest) > 1 and rest[1] != "block"
                                                             else ""))
    return "\n".join(lines)


def short_config(label):
    """A candidate's name (config_name's `key=value ...`) shortened for the table: block_n=144 bn144,
    persistent=0 np, persistent=N P, pingpong=B pp1/pp0, rescale_between=B rb1/rb0, stages=S st3, ..."""
    names = {"block_n": "bn", "stages": "st", "consumers": "c", "pingpong": "pp", "rescale_between": "rb",
             "named_turns": "nt", "l2_bytes": "l2_"}
    out = []
    for item in label.split():
        key, _, val = item.partition("=")
        if key == "persistent":
            out.append("np" if val == "0" else "P")
        else:
            out.append(names.get(key, key) + {"True": "1", "False": "0"}.get(val, val))
    return "+".join(out) or label


def kv_read(kc, vc):
    n = kc.numel() * kc.element_size() // 4
    blocks = 4 * torch.cuda.get_device_properties(0).multi_processor_count
    part = torch.empty(blocks, dtype=torch.int32, device="cuda")

    def run():
        _triton_read[(blocks,)](kc.view(torch.int32).view(-1), n, part, BLOCK=4096, num_warps=8)
        _triton_read[(blocks,)](vc.view(torch.int32).view(-1), n, part, BLOCK=4096, num_warps=8)
    return run


DECODE_PAGE, DECODE_HEADS, DECODE_KV_HEADS, DECODE_D = 64, 32, 8, 128


def kv_mb(batch, n, kv_heads=DECODE_KV_HEADS, d=DECODE_D):
    """Megabytes of both f16 caches of `batch` sequences of n keys."""
    return 2 * batch * n * kv_heads * d * 2 / 1e6


def decode(configs, page_size=DECODE_PAGE, heads=DECODE_HEADS, kv_heads=DECODE_KV_HEADS, d=DECODE_D, candidates=False,
           rounds=5, runs=1):
    """The decode table; with `candidates`, every configuration of flash_decoding.decode_candidates
    timed in the same interleaved run (tilus's row is the default rule's, decode_config). Each is
    the median of `rounds` rounds of 20 launches queued behind a GPU sleep (bench/run.py's
    median_ms(queued=True): the GPU's time alone; flash_decode's host cost per call is printed
    beside it); the rounds' spread follows each figure. `runs` > 1 measures the table that many
    times (the shapes' data made anew each time) and prints each run's ratios at the end."""
    from run import host_us, interleaved_ms
    from common import compile_all
    from flash_decoding import config_name, decode_call, decode_candidates, flash_decode, random_cache_gpu
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"\ndecode: 1 query token, {heads} heads on {kv_heads} kv heads, d {d}, f16, pages of {page_size} in a "
          f"random order; microseconds, the median of {rounds} rounds (their min-max), GPU time with the launches "
          f"queued; host: flash_decode's CPU time per call (ratio: tilus / KV read)", flush=True)
    head = (f"{'batch':>5} {'keys':>7} {'KV MB':>7} | {'tilus':>8} {'(rounds)':>13} {'SDPA':>8} {'KV read':>8} | "
            f"{'vs read':>7} {'GB/s':>6} | {'host us':>7}")
    rows, lines, tried, ratios = [], [], [], {}
    for run_index in range(runs):
        if runs > 1:
            print(f"\ndecode run {run_index + 1} of {runs}", flush=True)
        print(head, flush=True)
        for batch, n in configs:
            q, kc, vc, table, lens = random_cache_gpu(batch, n, heads, kv_heads, d, page_size)
            # SDPA on the same keys gathered contiguous ([batch, kv_heads, n, d]; GQA by enable_gqa,
            # torch 2.5 on; before it the kv heads repeated, which reads group times the bytes).
            kd = kc[table.long()].reshape(batch, n, kv_heads, d).transpose(1, 2)
            vd = vc[table.long()].reshape(batch, n, kv_heads, d).transpose(1, 2)
            qd = q.transpose(1, 2)
            try:
                torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, enable_gqa=True)
                ref = lambda: torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, enable_gqa=True)  # noqa: E731
            except TypeError:
                kd, vd = (x.repeat_interleave(heads // kv_heads, dim=1) for x in (kd, vd))
                ref = lambda: torch.nn.functional.scaled_dot_product_attention(qd, kd, vd)  # noqa: E731
            want = ref()
            every = decode_candidates(batch, kv_heads, n, d, sms) if candidates else []  # the first is the rule's
            if every and run_index == 0:  # their kernels compiled in parallel
                compile_all(every, lambda cfg: decode_call(q, kc, vc, table, lens, config=cfg)[:2])
            got, _ = flash_decode(q, kc, vc, table, lens)
            err = (got.transpose(1, 2).float() - want.float()).abs().max().item()
            fns = {"tilus": lambda: flash_decode(q, kc, vc, table, lens), "SDPA": ref}
            if triton is not None:
                fns["read"] = kv_read(kc, vc)
            for cfg in every[1:]:
                cerr = (flash_decode(q, kc, vc, table, lens, config=cfg)[0].transpose(1, 2).float() - want.float()).abs().max()
                if cerr.item() > 2e-2:
                    print(f"  {config_name(cfg)}: wrong (max abs err vs SDPA {cerr.item():.3g}), left out", flush=True)
                    continue
                fns[config_name(cfg)] = (lambda c: lambda: flash_decode(q, kc, vc, table, lens, config=c))(cfg)
            spread = {}
            ms = interleaved_ms(fns, rounds=rounds, repeat=20, queued=True, per_round=spread)
            host = host_us(fns["tilus"])
            mb = kv_mb(batch, n, kv_heads, d)
            ratio = ms["tilus"] / ms["read"] if "read" in ms else float("nan")
            ratios.setdefault((batch, n), []).append(ratio)
            read = f"{ms['read'] * 1e3:8.1f}" if "read" in ms else f"{'-':>8}"
            span = lambda k: f"({min(spread[k]) * 1e3:.1f}-{max(spread[k]) * 1e3:.1f})"  # noqa: E731
            line = (f"{batch:5} {n:7} {mb:7.0f} | {ms['tilus'] * 1e3:8.1f} {span('tilus'):>13} {ms['SDPA'] * 1e3:8.1f} "
                    f"{read} | {ratio:6.2f}x {mb / ms['tilus']:6.0f} | {host:7.1f}"
                    + (f"  (max abs err vs SDPA {err:.2g})" if err > 2e-2 else ""))
            print(line, flush=True)
            lines.append(line)
            if candidates:
                default = config_name(every[0])
                timed = [(ms["tilus"], default + " (the rule)", "tilus")] + [
                    (ms[k], k, k) for k in fns if k not in ("tilus", "SDPA", "read")]
                best = min(timed)
                for t, name, k in timed:
                    print(f"  {name:34} {t * 1e3:8.1f} us {span(k):>15} {t / ms['read'] if 'read' in ms else float('nan'):5.2f}x"
                          f" read" + ("  <- fastest" if (t, name, k) == best else ""), flush=True)
                tried.append(f"{batch:5} {n:7} | {best[1]:34} {best[0] * 1e3:8.1f} us, rule {ms['tilus'] * 1e3:.1f} us")
            rows.append((batch, n, ms, ratio))
            del q, kc, vc, table, kd, vd, qd, want, got
            torch.cuda.empty_cache()
    if candidates:  # the summary: which configuration each shape ran fastest with
        print(f"\ndecode candidates, the fastest per shape:\n{'batch':>5} {'keys':>7} | configuration (block_n x "
              f"stages / blocks per SM, splits)", flush=True)
        print("\n".join(tried), flush=True)
    print(f"\ndecode (again, last):\n{head}\n" + "\n".join(lines), flush=True)
    if runs > 1:
        print(f"\ndecode, tilus / KV read in each of {runs} runs:\n" + "\n".join(
            f"{b:5} {n:7} | " + " ".join(f"{r:5.2f}x" for r in rs) for (b, n), rs in ratios.items()), flush=True)
    return rows[-len(configs):]


def ncu_child(s, d, causal, launches=2):
    from torch.nn.attention import SDPBackend
    from flash_attention import flash_attention
    b, h = TOKENS // s, WIDTH // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.float16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    cudnn = sdpa(SDPBackend.CUDNN_ATTENTION)
    for _ in range(20):
        flash_attention(q, k, v, causal=causal)
        cudnn(qt, kt, vt, causal)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(launches):
        flash_attention(q, k, v, causal=causal)
        cudnn(qt, kt, vt, causal)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def ncu(args):
    from hopper_profile import METRICS, parse_ncu_csv
    exe = shutil.which("ncu")
    if exe is None:
        sys.exit("attention: ncu (Nsight Compute) is not on PATH")
    cmd = [exe, "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "details",
           "--metrics", ",".join(METRICS), sys.executable, os.path.abspath(__file__), "--ncu-child",
           "--seqlen", str(args.seqlen), "--head-dim", str(args.head_dim)] + (["--causal"] if args.causal else [])
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"attention: ncu failed ({run.returncode}):\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    b, h = TOKENS // args.seqlen, WIDTH // args.head_dim
    print(f"prefill f16 batch {b} seqlen {args.seqlen} heads {h} d {args.head_dim} causal {args.causal}, "
          f"ncu --clock-control none")
    print(f"{'kernel':60} {'time':>10} {'SM clock':>9} {'tensor pipes busy':>18}")
    for r in parse_ncu_csv(run.stdout):
        print(f"{r['kernel'][:60]:60} {r['time_us']:8.1f} us {r['clock_ghz']:5.2f} GHz {r['tensor_pct']:16.1f} %")

# --- the README's tables ----------------------------------------------------------------------

BEGIN, END = "<!-- attention-bench -->", "<!-- /attention-bench -->"
PREFILL_HEAD = ("| dtype | d | seqlen | causal | tilus | cuDNN | flash | Triton | tilus / cuDNN |\n"
                "|---|---|---|---|---|---|---|---|---|")
DECODE_HEAD = ("| batch | keys | KV MB | tilus (us) | SDPA (us) | KV read (us) | tilus / KV read |\n"
               "|---|---|---|---|---|---|---|")


def _cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _tf(x):
    return "-" if x is None or x != x else f"{x:.0f}"


def readme_tables(prefill_rows=(), decode_rows=(), note=None, old=None):
    """The text between the README's markers: a prefill table (TFLOP/s) with a row per shape of
    the full sweep and a decode table (microseconds). Rows measured now (prefill(), decode()'s
    rows) are filled; the others keep their line of `old` (the block before), else "-"."""
    kept = {}
    for line in (old or "").splitlines():
        if line.startswith("|") and not line.startswith("|---") and _cells(line)[0] not in ("dtype", "batch"):
            kept[tuple(_cells(line)[:4] if _cells(line)[0].startswith(("float", "bfloat")) else _cells(line)[:2])] = line
    now = {}
    for name, d, s, causal, tf, ratio in prefill_rows:
        key = (name, str(d), str(s), "yes" if causal else "no")
        now[key] = "| " + " | ".join(list(key) + [_tf(tf.get(k)) for k in ("tilus", "cuDNN", "flash", "Triton")]
                                     + [f"{ratio:.2f}x" if ratio == ratio else "-"]) + " |"
    for batch, n, ms, ratio in decode_rows:
        key = (str(batch), str(n))
        us = lambda k: f"{ms[k] * 1e3:.1f}" if k in ms else "-"  # noqa: E731
        now[key] = (f"| {batch} | {n} | {kv_mb(batch, n):.0f} | {us('tilus')} | {us('SDPA')} | "
                    f"{us('read')} | " + (f"{ratio:.2f}x" if ratio == ratio else "-") + " |")
    pre, dec = SWEEPS["full"]
    lines = [f"Last filled: {note}." if note else
             next((x for x in (old or "").splitlines() if x.startswith("Last filled")), "Not measured yet.")]
    lines += ["", "Prefill, TFLOP/s:", "", PREFILL_HEAD]
    for name, shapes in (("float16", pre), ("bfloat16", [c for c in pre if c[0] == 128])):
        for d, s, causal in shapes:
            key = (name, str(d), str(s), "yes" if causal else "no")
            lines.append(now.get(key) or kept.get(key) or "| " + " | ".join(list(key) + ["-"] * 5) + " |")
    lines += ["", f"Decode (f16, one token, {DECODE_HEADS} heads on {DECODE_KV_HEADS} kv heads, d {DECODE_D}, pages of "
              f"{DECODE_PAGE}), microseconds:", "", DECODE_HEAD]
    for batch, n in dec:
        key = (str(batch), str(n))
        lines.append(now.get(key) or kept.get(key) or f"| {batch} | {n} | {kv_mb(batch, n):.0f} | " + " | ".join(["-"] * 4)
                     + " |")
    return "\n".join(lines)


def fill_readme(path, prefill_rows, decode_rows, note):
    with open(path) as f:
        text = f.read()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise SystemExit(f"attention: {path} has no single {BEGIN} ... {END} block to write the tables into")
    head, rest = text.split(BEGIN)
    old, tail = rest.split(END)
    with open(path, "w") as f:
        f.write(head + BEGIN + "\n" + readme_tables(prefill_rows, decode_rows, note, old) + "\n" + END + tail)


def prefill_shapes(sweep, head_dims=None, mask=None, seqlens=None):
    """(d, seqlen, causal) of the sweep's prefill runs; with head_dims ("128" or "64,256"), those of
    these head dims only; with mask ("causal" or "none"), the causal or the non-causal ones only;
    with seqlens ("4096" or "4096,8192"), those query lengths only."""
    pre = [c for c in SWEEPS[sweep][0] if mask is None or c[2] == (mask == "causal")]
    if seqlens:
        try:
            keep = {int(x) for x in seqlens.split(",")}
        except ValueError:
            raise SystemExit(f"attention: --seqlens takes lengths separated by commas (4096,8192), not {seqlens!r}")
        pre = [c for c in pre if c[1] in keep]
    if not head_dims:
        return pre
    try:
        dims = {int(x) for x in head_dims.split(",")}
    except ValueError:
        raise SystemExit(f"attention: --head-dims takes head dims separated by commas (128 or 64,256), not {head_dims!r}")
    return [c for c in pre if c[0] in dims]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sweep", choices=sorted(SWEEPS), default="full",
                   help="full: every shape; goal: the shapes of issue 40's goal; smoke: two of each")
    p.add_argument("--readme", metavar="FILE", help="write the figures into FILE's attention tables")
    p.add_argument("--only", choices=("prefill", "decode"))
    p.add_argument("--head-dims", metavar="D[,D...]", help="prefill at these head dims only (of the sweep's)")
    p.add_argument("--candidates", action="store_true",
                   help="also time every configuration of flash_attention.prefill_candidates (prefill) and "
                        "flash_decoding.decode_candidates (decode) at each shape")
    p.add_argument("--decode-runs", type=int, default=1, metavar="N",
                   help="measure the decode table N times in this call (the spread between runs)")
    p.add_argument("--no-triton", action="store_true", help="leave the Triton kernel out (its compiles take time)")
    p.add_argument("--no-persistent", action="store_true", help="--candidates without the persistent prefill kernel")
    p.add_argument("--candidate-dtypes", default="f16", metavar="f16[,bf16]",
                   help="--candidates: the prefill dtypes whose shapes time the candidates (f16 by default)")
    p.add_argument("--extra-candidates", nargs="+", default=[], metavar="CFG",
                   help="--candidates: these prefill configurations too, on top of the rule at every shape "
                        "(each 'key=value ...', values ints, True/False or sms, e.g. 'persistent=sms block_n=128')")
    p.add_argument("--only-extra", action="store_true",
                   help="--candidates: time only the --extra-candidates beside the rule, not prefill_candidates'")
    p.add_argument("--mask", choices=("causal", "none"), help="prefill: only the causal or only the non-causal shapes")
    p.add_argument("--seqlens", metavar="S[,S...]", help="prefill at these query lengths only (of the sweep's)")
    p.add_argument("--rounds", type=int, metavar="N",
                   help="prefill: each figure the median of N rounds of 20 launches (5; 40960 / seqlen below 8192)")
    p.add_argument("--timing", choices=("block", "mixed", "both"), default="mixed",
                   help="prefill: a round times each kernel's 20 launches in a row (block) or every kernel once "
                        "per pass in a new random order (mixed: bench/run.py interleaved_ms(mixed=True)); both: "
                        "each shape timed both ways, block first")
    p.add_argument("--warmup", type=float, default=1.5, metavar="SECONDS",
                   help="prefill: each shape's kernels in turn for SECONDS before its rounds (1.5: the GPU's clock "
                        "settles under its power limit)")
    p.add_argument("--no-flash", action="store_true", help="prefill: leave SDPA's flash backend out")
    p.add_argument("--json", metavar="FILE", help="prefill --candidates: every round's TFLOP/s of each kernel to FILE")
    p.add_argument("--compile-only", action="store_true",
                   help="prefill: only compile the kernels the run would launch (into the disk cache), then exit")
    p.add_argument("--part", metavar="K/N", help="--compile-only: every N-th kernel from the K-th (N processes at once)")
    p.add_argument("--ncu", action="store_true", help="ncu's tensor-pipe view of tilus and cuDNN at one shape")
    p.add_argument("--seqlen", type=int, default=4096)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--ncu-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.ncu_child:
        return ncu_child(args.seqlen, args.head_dim, args.causal)
    if args.ncu:
        return ncu(args)
    import tilus
    props = torch.cuda.get_device_properties(0)
    print(f"GPU {props.name}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"triton {triton.__version__ if triton else 'missing'}, tilus from {os.path.dirname(tilus.__file__)}",
          flush=True)
    t0 = time.time()
    pre, dec = prefill_shapes(args.sweep, args.head_dims, args.mask, args.seqlens), SWEEPS[args.sweep][1]
    short = {"f16": "float16", "bf16": "bfloat16"}
    cand_dtypes = tuple(short.get(x.strip(), x.strip()) for x in args.candidate_dtypes.split(","))
    dts = ["float16", "bfloat16"] if args.sweep != "smoke" else ["float16"]
    note = (f"{props.name}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
            f"triton {triton.__version__ if triton else 'missing'}, {time.strftime('%Y-%m-%d')}, "
            f"`bench/attention.py --sweep {args.sweep}`")
    each = []
    if args.only != "decode":
        tables = [(dts[:1], pre)] + ([(dts[1:], [c for c in pre if c[0] == 128])] if len(dts) > 1 else [])  # bf16: d 128
        if args.compile_only:
            part = tuple(int(x) for x in args.part.split("/")) if args.part else None
            return compile_prefill(tables, args.candidates, not args.no_persistent, part, cand_dtypes, args.extra_candidates,
                                   args.only_extra)
        compile_prefill(tables, args.candidates, not args.no_persistent, cand_dtypes=cand_dtypes, extra=args.extra_candidates,
                        only_extra=args.only_extra)
        rows = []
        for dtypes, configs in tables:
            got = prefill(dtypes, configs, args.candidates, not args.no_triton, not args.no_persistent, cand_dtypes,
                          args.extra_candidates, args.rounds, ("block", "mixed") if args.timing == "both" else (args.timing,),
                          not args.no_flash, args.only_extra, args.warmup)
            rows += got[0]
            each += got[1]
        if args.readme:  # now, so that a run cut short later keeps these
            fill_readme(args.readme, rows, [], note)
    if args.only != "prefill":
        rows = decode(dec, candidates=args.candidates, runs=args.decode_runs)
        if args.readme:
            fill_readme(args.readme, [], rows, note)
    if args.readme:
        print(f"attention tables written into {args.readme}", flush=True)
    print(f"\nattention bench: {time.time() - t0:.0f} s", flush=True)
    if args.json and each:
        import json
        from flash_attention import config_name, prefill_config
        sms = persistent_blocks(True)
        with open(args.json, "w") as f:
            json.dump([dict(dtype=name, d=d, seqlen=s, causal=causal, timing=mode, warmup=args.warmup,
                            rule=config_name(prefill_config(d, causal, sms, s, name)), rounds=rounds, starts=starts)
                       for name, d, s, causal, _, _, rounds, starts, mode in each], f, indent=1)
    if args.only != "decode" and each:  # last: what the lead reads first
        print("\n" + candidates_table(each), flush=True)


if __name__ == "__main__":
    main()
