"""The pipelined matmul (matmul_v3) autotuned over tile sizes, warps and stages: 16 configs.
The first call for a size bucket tunes (all configs compiled in parallel, each timed); the
winner is saved in the cache directory, so the next process starts with it."""
import time

import tilus
from tilus import float16, float32, int32

from matmul_v3 import MatmulV3


@tilus.autotune("block_m, block_n", [(64, 64), (64, 128), (128, 128), (128, 256)])
@tilus.autotune("warps", [4, 8])
@tilus.autotune("stages", [2, 3])
class AutotunedMatmul(MatmulV3):
    def __init__(self, block_m, block_n, warps, stages, block_k=32):
        super().__init__(block_m=block_m, block_n=block_n, block_k=block_k, warps=warps, stages=stages)


if __name__ == "__main__":
    import sys
    from common import matmul_main
    t0 = time.perf_counter()
    kernel = AutotunedMatmul()
    matmul_main("matmul_autotune", kernel)
    print(f"matmul_autotune: whole run {time.perf_counter() - t0:.2f} s")
    tilus.autotune_report()
