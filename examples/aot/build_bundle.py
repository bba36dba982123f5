"""Builds the bundle the AOT example links: tilus Scripts compiled ahead of time into C.

    python3 examples/aot/build_bundle.py OUT_DIR

writes OUT_DIR/kernels.{h,c}, the runtime headers and CMakeLists.txt: the vector add and the
pipelined tensor-core matmul (two size buckets: 64x128 tiles up to m = 512, 128x128 above) for
sm_90a and sm_80 (each specialized and generic), and the
TMA + wgmma Hopper matmul (hopper_matmul_v3.py) for sm_90a. Needs NVRTC, not a GPU.
"""
import os
import sys
import time

sys.path.insert(0, os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python")))

import tilus  # noqa: E402
from hopper_matmul_v3 import hopper_matmul_v3  # noqa: E402
from matmul_v3 import MatmulV3  # noqa: E402
from vector_add import VectorAdd  # noqa: E402


def build(out_dir):
    bundle = tilus.aot.Bundle("kernels", archs=["sm_90a", "sm_80"])
    bundle.add(VectorAdd(), name="vector_add")
    # Two size buckets of one C function: smaller tiles while m is small, then the default config.
    bundle.add(MatmulV3(block_m=64, block_n=128), name="matmul", when={"m": (None, 512)})
    bundle.add(MatmulV3(), name="matmul")
    bundle.add(hopper_matmul_v3(tilus.float16)(), name="hopper_matmul", archs=["sm_90a"])
    return bundle.write(out_dir)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "kernels"
    t0 = time.perf_counter()
    paths = build(out_dir)
    print(f"bundle written in {time.perf_counter() - t0:.2f} s:")
    for p in paths:
        print(f"  {p} ({os.path.getsize(p)} bytes)")


if __name__ == "__main__":
    main()
