"""NVIDIA Tilus's decode benchmark, fused GDN gating part, run against tilus: Tilus's own example
files (its Script `FusedGdnGatingKernel`, its Triton kernel and its torch reference), each
wrapper timed the way that benchmark times it (tilus.utils.benchmark_func: median of 50 calls
after 10 warm-ups, L2 flushed before each, the calls queued behind a GPU sleep so that host cost
is not timed) over the same (batch, heads) shapes, in one run.

    PYTHONPATH=build/python python bench/tilus_decode_gating.py --tilus-examples carry/flash_attention_decode

The folder holds three files of NVIDIA Tilus's repository, examples/flash_attention_decode/:
tilus_kernel.py, triton_kernel.py and torch_kernel.py (they are not part of tilus; copy them
there, e.g. `git -C <Tilus clone> show HEAD:examples/flash_attention_decode/tilus_kernel.py >
carry/flash_attention_decode/tilus_kernel.py`). Each call of the tilus wrapper makes a new
instance of the autotuned Script with a bf16 tensor and Python float constants; the wrapper also
allocates its output, like Triton's.
"""
import argparse
import os
import sys

import torch

from tilus.utils import benchmark_func

SHAPES = [(1, 8), (1, 16), (1, 32), (1, 64), (1, 128), (1, 256), (2, 128), (4, 128), (8, 128)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tilus-examples", default="carry/flash_attention_decode",
                   help="the folder with Tilus's tilus_kernel.py, triton_kernel.py and torch_kernel.py")
    args = p.parse_args()
    sys.path.insert(0, os.path.abspath(args.tilus_examples))
    from tilus_kernel import fused_gdn_gating_tilus
    from torch_kernel import fused_gdn_gating_torch
    from triton_kernel import fused_gdn_gating

    print(f"fused GDN gating (NVIDIA Tilus's decode benchmark), {torch.cuda.get_device_name()}, ms per call")
    print(f"{'(batch, heads)':16s} {'torch':>9s} {'triton':>9s} {'tilus':>9s} {'tilus/triton':>13s}")
    worst = 0.0
    for batch, heads in SHAPES:
        kw = dict(A_log=torch.randn(heads, device="cuda") * 0.1,
                  a=torch.randn(batch, heads, device="cuda", dtype=torch.bfloat16),
                  dt_bias=torch.randn(heads, device="cuda") * 0.1, beta=1.0, threshold=20.0)
        want = fused_gdn_gating_torch(**kw)
        torch.testing.assert_close(fused_gdn_gating(**kw), want, atol=1e-3, rtol=1e-3)
        torch.testing.assert_close(fused_gdn_gating_tilus(**kw), want, atol=1e-3, rtol=1e-3)
        ms = [benchmark_func(lambda f=f: f(**kw), warmup=10, repeat=50)
              for f in (fused_gdn_gating_torch, fused_gdn_gating, fused_gdn_gating_tilus)]
        worst = max(worst, ms[2] / ms[1])
        print(f"{str((batch, heads)):16s} {ms[0]:9.4f} {ms[1]:9.4f} {ms[2]:9.4f} {ms[2] / ms[1]:12.2f}x")
    print(f"worst tilus / triton: {worst:.2f}x (goal <= 1.0)")


if __name__ == "__main__":
    main()
