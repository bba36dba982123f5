"""NVRTC compile time of every example kernel, compile-only (no GPU needed).

    PYTHONPATH=build/python python3 bench/compile_time.py [--repeat 3] [--arch sm_90a]
        [--print-ir build/examples/cpp/print_ir] [--only NAME ...] [--autotune] [--json FILE]
        [--nvrtc-option OPTION ...] [--driver-cache]

The kernels: each Python example (examples/python; the wgmma ones for sm_90a; matmul_a16wx.py's
kernel for small m with uint4 weights and, for sm_90a, its wgmma kernel for large m), traced and
specialized as a launch with 16-divisible sizes and 16-byte aligned pointers specializes it, and
each C++ example
(examples/cpp, through `print_ir --cuda ARCH --divisible`; skipped when print_ir is not built).
Each is compiled by NVRTC, in this process, in three ways, `--repeat` times each (interleaved;
the median counts):

  full  the whole device header library and no precompiled header: how tilus compiled before
        issue 18 (its options otherwise as now)
  cold  only the device header parts the kernel needs, no precompiled header: the first
        compile of a process
  warm  with the process's precompiled device header (made by one untimed compile first): every
        later compile of the process

NVRTC's own --time report splits each into its front end (preprocessing, parsing, NVVM IR),
the NVVM optimizer and ptxas. All three ways produce the same SASS (checked here on every
kernel; tests/cpp/test_nvrtc.cpp asserts it).

Every compile is a real one: where a CUDA driver is installed, NVRTC (12.9+) would otherwise
answer a kernel it compiled before, in any process, from the driver's compute cache and skip its
optimizer and ptxas (a 500 ms Hopper matmul then "compiles" in 50 ms). --driver-cache leaves
that cache on, to measure it.

--nvrtc-option adds an NVRTC option to every compile (for comparing options: the "sass" column
is the kernel's SASS bytes, the same in every way of compiling).

--autotune also times compiling the 16-config space of examples/python/matmul_autotune.py for
m = n = k = 1024 (compile-only, a fixed timer) in a fresh process with an empty cache directory,
three ways: as before issue 18 (TILUS_NVRTC_PCH=0 TILUS_NVRTC_MINIMAL_HEADER=0), with the minimal
header only (TILUS_NVRTC_PCH=0), and as now (both). Run with the PYTHONPATH of a build from before
issue 18 (no tilus._C.nvrtc_compile), it times that build's autotuning only.
"""
import argparse
import inspect
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))

# NVRTC 12.9+ keeps what it compiled in the CUDA driver's compute cache (~/.nv/ComputeCache, keyed
# by the NVVM IR) where a driver is installed: a later compile of the same kernel, in any process,
# skips the NVVM optimizer and ptxas. That measures the cache, not the compiler, so it is off here
# (CUDA_CACHE_DISABLE=1, also for the autotuning child processes) unless --driver-cache.
if "--driver-cache" not in sys.argv:
    os.environ["CUDA_CACHE_DISABLE"] = "1"

import tilus  # noqa: E402
from tilus import _C  # noqa: E402

MODES = ("full", "cold", "warm")


def python_kernels(arch):
    from conv2d import Conv2d
    from layer_norm import LayerNorm
    from matmul_tma import MatmulTma
    from matmul_v0 import MatmulV0
    from matmul_v1 import MatmulV1
    from matmul_v2 import MatmulV2
    from matmul_v3 import MatmulV3
    from softmax import Softmax
    from tma_copy import TmaCopy
    from vector_add import VectorAdd
    from matmul_a16wx import MatmulA16Wx
    examples = {"vector_add": VectorAdd(), "matmul_v0": MatmulV0(), "matmul_v1": MatmulV1(), "matmul_v2": MatmulV2(),
                "matmul_v3": MatmulV3(), "matmul_tma": MatmulTma(), "softmax": Softmax(), "layer_norm": LayerNorm(),
                "tma_copy": TmaCopy(), "conv2d": Conv2d(),
                # the quantized matmul's small-m kernel (uint4 weights, its default tile)
                "matmul_a16wx": MatmulA16Wx(tilus.uint4)}
    if arch.startswith("sm_90"):  # the wgmma examples (f16; their bf16 twins compile alike)
        import importlib
        for v in range(7):
            examples[f"hopper_matmul_v{v}"] = getattr(importlib.import_module(f"hopper_matmul_v{v}"), f"HopperMatmulV{v}")()
        from conv2d_wgmma import Conv2dWgmma, Conv2dWgmmaPersistent
        from matmul_a16wx import MatmulA16WxHopper
        examples.update(conv2d_wgmma=Conv2dWgmma(), conv2d_wgmma_persistent=Conv2dWgmmaPersistent(),
                        # its large-m wgmma kernel, as the example picks it at m = 4096
                        matmul_a16wx_hopper=MatmulA16WxHopper(tilus.uint4, block_n=128, consumers=2, block_m=256,
                                                              block_k=64, stages=4))
    out = []
    for name, script in examples.items():
        cls = type(script)
        program = tilus.trace(script)
        runtime = [p for p in inspect.signature(cls.__call__).parameters.values()
                   if p.name != "self" and p.annotation not in (int, float, bool, str)]
        program.specialize({i: 16 for i in range(len(runtime))})
        out.append(("py/" + name, program.kernel_name, _C.compile_cuda_source(program, arch)))
    return out


def cpp_kernels(print_ir, arch):
    if not print_ir or not os.path.exists(print_ir):
        print(f"(no C++ examples: {print_ir or 'print_ir'} not found; build it or pass --print-ir)", file=sys.stderr)
        return []
    text = subprocess.run([print_ir, "--cuda", arch, "--divisible"], check=True, capture_output=True,
                          text=True).stdout
    parts = re.split(r"^==================== (\w+) ====================\n", text, flags=re.M)
    out = []
    for name, source in zip(parts[1::2], parts[2::2]):
        kernel = re.search(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(', source).group(1)
        out.append(("cpp/" + name, kernel, source))
    return out


def sass(cubin):
    """The .text sections of an ELF cubin (the kernels' SASS), by name."""
    import struct
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    entsize, count, names = struct.unpack_from("<HHH", cubin, 0x3a)

    def section(i):
        return struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize)
    strtab = section(names)
    out = {}
    for i in range(count):
        s = section(i)
        at = strtab[4] + s[0]
        name = cubin[at:cubin.index(b"\0", at)].decode()
        if name.startswith(".text"):
            out[name] = cubin[s[4]:s[4] + s[5]]
    return out


def median(xs):
    xs = [x for x in xs if x is not None and x >= 0]
    return statistics.median(xs) if xs else float("nan")


def bench_kernels(kernels, arch, repeat, extra_options=()):
    pch_dir = tempfile.mkdtemp(prefix="tilus-bench-pch-")
    rows = []
    try:
        for label, name, source in kernels:
            # The untimed compile that makes the process's PCH for this kernel's header variant
            # (once per variant: later kernels of the same variant find it).
            _C.nvrtc_compile(source, name, arch, pch_dir=pch_dir, extra_options=list(extra_options))
            times = {m: {"total": [], "front_end": [], "optimizer": [], "ptxas": []} for m in MODES}
            code = {}
            for _ in range(repeat):
                for mode in MODES:
                    r = _C.nvrtc_compile(source, name, arch, pch_dir=pch_dir if mode == "warm" else "",
                                         minimal_header=mode != "full", time_phases=True,
                                         extra_options=list(extra_options))
                    if mode == "warm" and r["pch"] != "used":
                        raise SystemExit(f"{label}: the warm compile did not use the PCH ({r['pch']}): {r['log']}")
                    t = times[mode]
                    t["total"].append(r["wall_ms"])
                    t["front_end"].append(r["front_end_ms"])
                    t["optimizer"].append(r["optimizer_ms"])
                    t["ptxas"].append(r["ptxas_ms"])
                    code.setdefault(mode, sass(r["cubin"]))
            if not (code["full"] == code["cold"] == code["warm"]):
                raise SystemExit(f"{label}: the SASS differs between the ways of compiling")
            rows.append({"kernel": label, "lines": source.count("\n"), "sass_bytes": sum(map(len, code["warm"].values())),
                         **{m: {k: median(v) for k, v in times[m].items()} for m in MODES}})
            r = rows[-1]
            print(f"{label:22s} {r['lines']:5d} {r['full']['total']:8.0f} {r['cold']['total']:8.0f} "
                  f"{r['warm']['total']:8.0f}   {r['full']['front_end']:6.0f} {r['cold']['front_end']:6.0f} "
                  f"{r['warm']['front_end']:6.0f} {r['warm']['optimizer']:7.0f} {r['warm']['ptxas']:7.0f}"
                  f"   {r['full']['total'] / r['warm']['total']:5.2f}x {r['sass_bytes']:8d}", flush=True)
    finally:
        shutil.rmtree(pch_dir, ignore_errors=True)
    return rows


AUTOTUNE_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "examples", "python"))
import numpy as np
import tilus
import tilus.tuning as T
from matmul_autotune import AutotunedMatmul
T.Tuner.compile_only_arch = "sm_90a"
T.Tuner.timer = staticmethod(lambda config, repeat: 1.0)
m = n = k = 1024
a = np.zeros((m, k), np.float16); b = np.zeros((k, n), np.float16); c = np.zeros((m, n), np.float16)
t0 = time.perf_counter()
AutotunedMatmul()(m, n, k, a, b, c)
print(json.dumps({"tune_s": time.perf_counter() - t0}))
"""


def bench_autotune(repeat):
    settings = [("whole header, no PCH", {"TILUS_NVRTC_PCH": "0", "TILUS_NVRTC_MINIMAL_HEADER": "0"}),
                ("minimal header, no PCH", {"TILUS_NVRTC_PCH": "0"}), ("minimal header + PCH", {})]
    if not hasattr(_C, "nvrtc_compile"):
        settings = [("before issue 18", {})]
    runs = {label: [] for label, _ in settings}
    for _ in range(repeat):  # interleaved, so a change of the machine's load hits every setting alike
        for label, extra in settings:
            cache = tempfile.mkdtemp(prefix="tilus-bench-cache-")
            try:
                env = {k: v for k, v in os.environ.items() if not k.startswith("TILUS_NVRTC_")}
                env.update(TILUS_CACHE_DIR=cache, **extra)
                r = subprocess.run([sys.executable, "-c", AUTOTUNE_CHILD, ROOT], env=env, check=True,
                                   capture_output=True, text=True)
                runs[label].append(json.loads(r.stdout.strip().splitlines()[-1])["tune_s"])
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    out = {}
    for label, _ in settings:
        out[label] = {"runs_s": runs[label], "median_s": statistics.median(runs[label])}
        print(f"autotune 16 configs, compile-only, {label:24s}: {out[label]['median_s']:6.2f} s "
              f"(runs: {', '.join(f'{x:.2f}' for x in runs[label])})", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--print-ir", default=os.path.join(ROOT, "build", "examples", "cpp", "print_ir"))
    ap.add_argument("--only", nargs="*", help="kernels whose label contains one of these")
    ap.add_argument("--autotune", action="store_true", help="also time a 16-config autotuning (compile-only)")
    ap.add_argument("--autotune-repeat", type=int, default=2)
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--nvrtc-option", action="append", default=[], help="an extra NVRTC option for every compile")
    ap.add_argument("--driver-cache", action="store_true",
                    help="leave the driver's compute cache on: NVRTC then skips its optimizer and ptxas for a "
                         "kernel compiled before (on a machine with a CUDA driver)")
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"tilus compile time: NVRTC {_C.nvrtc_version()}, {args.arch}, {os.cpu_count()} cores, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; medians of {args.repeat}, ms; "
          f"driver compute cache {'on' if args.driver_cache else 'off'}")
    result = {"arch": args.arch, "nvrtc": _C.nvrtc_version(), "cores": os.cpu_count(), "load": load,
              "nvrtc_options": args.nvrtc_option, "driver_cache": args.driver_cache}
    if hasattr(_C, "nvrtc_compile"):
        kernels = python_kernels(args.arch) + cpp_kernels(args.print_ir, args.arch)
        if args.only:
            kernels = [k for k in kernels if any(o in k[0] for o in args.only)]
        print(f"{'kernel':22s} {'lines':>5s} {'full':>8s} {'cold':>8s} {'warm':>8s}   "
              f"{'front end: full':>20s} {'cold':>6s} {'warm':>6s} {'opt':>7s} {'ptxas':>7s}   full/warm {'sass':>8s}")
        rows = bench_kernels(kernels, args.arch, args.repeat, args.nvrtc_option)
        total = {m: sum(r[m]["total"] for r in rows) for m in MODES}
        if rows:
            print(f"{'all ' + str(len(rows)) + ' kernels':22s} {'':5s} {total['full']:8.0f} {total['cold']:8.0f} "
                  f"{total['warm']:8.0f}   {'':20s}{'':14s}{'':16s}   {total['full'] / total['warm']:5.2f}x")
        result["kernels"] = rows
    else:
        print("(this build has no tilus._C.nvrtc_compile: a build from before issue 18; only --autotune runs)")
    if args.autotune or not hasattr(_C, "nvrtc_compile"):
        result["autotune"] = bench_autotune(args.autotune_repeat)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
