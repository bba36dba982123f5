"""Kernels in a module with PEP 563 annotations (strings until evaluated)."""
from __future__ import annotations

import tilus
from tilus import float32, int32


class Scale(tilus.Script):
    def __call__(self, n: int32, factor: float, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 64)]
        self.attrs.warps = 2
        o = self.blockIdx.x * 64
        v = self.load_global(self.global_view(x, shape=[n]), offsets=[o], shape=[64])
        self.store_global(self.global_view(y, shape=[n]), v * factor, offsets=[o])


def make_negate(dtype):
    """A Script made in a factory, with its annotation a string naming the factory's argument."""

    class Negate(tilus.Script):
        def __call__(self, n: int32, x: ~dtype):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            g = self.global_view(x, shape=[n])
            self.store_global(g, -self.load_global(g, offsets=[0], shape=[8]), offsets=[0])

    return Negate
