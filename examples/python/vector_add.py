"""Vector add: c = a + b, one tile of `block` elements per thread block.

    python examples/python/vector_add.py            # on the GPU (torch), or the CPU backend (numpy)
"""
import time

import tilus
from tilus import float32, int32


class VectorAdd(tilus.Script):
    def __init__(self, block=1024, warps=4):
        super().__init__()
        self.block = block
        self.warps = warps

    def __call__(self, n: int32, a: ~float32, b: ~float32, c: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, self.block)]
        self.attrs.warps = self.warps
        ga = self.global_view(a, shape=[n])
        gb = self.global_view(b, shape=[n])
        gc = self.global_view(c, shape=[n])
        offset = self.blockIdx.x * self.block
        x = self.load_global(ga, offsets=[offset], shape=[self.block])
        y = self.load_global(gb, offsets=[offset], shape=[self.block])
        self.store_global(gc, x + y, offsets=[offset])


def main():
    from common import arrays, check, timed
    n = 1000003
    kernel = VectorAdd()
    xp, device, a, b = arrays("float32", (n,), (n,))
    c = xp.empty_like(a)
    kernel(n, a, b, c)
    check("vector_add", c, a + b, 0, 0)
    ms = timed(lambda: kernel(n, a, b, c), device)
    print(f"vector_add: {3 * n * 4 / ms / 1e6:.1f} GB/s on {device} ({ms * 1e3:.1f} us)")


if __name__ == "__main__":
    main()
