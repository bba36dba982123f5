"""Nsight Compute's view of the Hopper matmul against cuBLAS, at the GPU's own clocks.

    python bench/hopper_profile.py [--size 4096 | --shape M,N,K] [--dtype f16|bf16] [--launches 2] [--raw ncu.csv]

Runs itself under `ncu --clock-control none` (ncu's default would lock the clocks to base for
the profile; this measures the card as it runs) and prints, per kernel launch: the kernel,
its time, the SM clock and how much of the time the tensor pipes were busy
(`sm__pipe_tensor_cycles_active`, percent of elapsed cycles). The tilus kernel is
`examples/python/hopper_matmul_v6.py`; cuBLAS is `torch.matmul(a, b.T)`. Both are warmed up
(20 launches each) first, so the clocks are those of the steady state the bench measures.

The busy fraction is what bounds a kernel's ratio against another at equal clocks: a kernel
whose tensor pipes are busy p % of the time can run at most 100 / p times faster on the same
card at the same clock.
"""
import argparse
import csv
import io
import os
import shutil
import subprocess
import sys

METRICS = ("gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second",
           "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed")
_TIME = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0}
_RATE = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}


def _in_base_units(value, unit):
    """`value` with `unit` (ncu's: "nsecond", "usecond", "us", "msecond", "Ghz", "cycle/second",
    "%", ...) in seconds, hertz or percent."""
    v = float(value.replace(",", ""))
    u = unit.strip().lower()
    if u.endswith("hz"):
        return v * _RATE[u[:-2]]
    if u.endswith("/second") or u in ("%", ""):
        return v
    if u.endswith("second"):
        return v * _TIME[u[:-6]]
    if u.endswith("s") and u[:-1] in _TIME:
        return v * _TIME[u[:-1]]
    raise ValueError(f"ncu unit {unit!r} of value {value!r} is not one this script reads")


def parse_ncu_csv(text):
    """[{kernel, time_us, clock_ghz, tensor_pct}] per profiled launch, in order, from the output
    of `ncu --csv --page details --metrics <METRICS>` (one row per launch and metric); lines
    that are not part of the CSV table (the program's own output, ncu's notes) are skipped."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        raise ValueError("no ncu CSV table in the output (was the program run under ncu --csv?)")
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    launches = {}
    for row in rows:
        name = row.get("Metric Name")
        if name not in METRICS:
            continue
        launch = launches.setdefault(row["ID"], {"kernel": row["Kernel Name"]})
        launch[name] = _in_base_units(row["Metric Value"], row.get("Metric Unit", ""))
    out = []
    for key in sorted(launches, key=int):
        got = launches[key]
        missing = [m for m in METRICS if m not in got]
        if missing:
            raise ValueError(f"launch {key} ({got['kernel']}): ncu gave no {', '.join(missing)}")
        out.append({"kernel": got["kernel"], "time_us": got[METRICS[0]] * 1e6,
                    "clock_ghz": got[METRICS[1]] / 1e9, "tensor_pct": got[METRICS[2]]})
    return out


def parse_shape(text):
    """"M,N,K" as three positive ints (an argparse type: a bad one is a usage error)."""
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) <= 0:
        raise argparse.ArgumentTypeError(f"--shape takes three positive ints M,N,K, got {text!r}")
    return dims


def child(shape, dtype, launches):
    """The profiled program: warm-up, then `launches` launches of each kernel between
    cudaProfilerStart and Stop."""
    import torch
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "examples", "python"))
    import tilus
    from hopper_matmul_v6 import hopper_matmul_v6
    tdt, dt = {"f16": (torch.float16, tilus.float16), "bf16": (torch.bfloat16, tilus.bfloat16)}[dtype]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kernel = hopper_matmul_v6(dt)(blocks=sms // 2 * 2)
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=tdt)
    b = torch.randn(n, k, device="cuda", dtype=tdt)
    c = torch.empty(m, n, device="cuda", dtype=tdt)
    kernel(m, n, k, a, b, c)
    ref = torch.matmul(a, b.T)
    assert torch.allclose(c.float(), ref.float(), atol=1e-1, rtol=2e-2), "hopper_matmul_v6 is wrong"
    for _ in range(20):
        kernel(m, n, k, a, b, c)
        torch.matmul(a, b.T, out=c)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(launches):
        kernel(m, n, k, a, b, c)
        torch.matmul(a, b.T, out=c)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=4096, help="m = n = k (default 4096)")
    p.add_argument("--shape", type=parse_shape, help="m,n,k (instead of --size)")
    p.add_argument("--dtype", choices=("f16", "bf16"), default="f16")
    p.add_argument("--launches", type=int, default=2)
    p.add_argument("--raw", help="also write ncu's CSV output to this file")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    shape = args.shape or (args.size,) * 3
    if args.child:
        return child(shape, args.dtype, args.launches)
    ncu = shutil.which("ncu")
    if ncu is None:
        sys.exit("hopper_profile: ncu (Nsight Compute) is not on PATH")
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "details",
           "--metrics", ",".join(METRICS), sys.executable, os.path.abspath(__file__), "--child",
           "--shape", ",".join(map(str, shape)), "--dtype", args.dtype, "--launches", str(args.launches)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"hopper_profile: ncu failed ({run.returncode}):\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    if args.raw:
        with open(args.raw, "w") as f:
            f.write(run.stdout)
    rows = parse_ncu_csv(run.stdout)
    print(f"matmul {args.dtype} {'x'.join(map(str, shape))}, a @ b.T, ncu --clock-control none")
    print(f"{'kernel':60} {'time':>10} {'SM clock':>9} {'tensor pipes busy':>18}")
    for r in rows:
        print(f"{r['kernel'][:60]:60} {r['time_us']:8.1f} us {r['clock_ghz']:5.2f} GHz {r['tensor_pct']:16.1f} %")


if __name__ == "__main__":
    main()
