"""Matmul v3 (pipelined, no manual syncs): `stages` tiles of a and b in flight with cp.async;
the kernel writes no wait and no sync: the passes insert the async-copy waits (keeping
stages - 1 groups in flight) and the barriers. Tiles are numbered in groups of `group` rows
so that neighbouring blocks share tiles of b in L2."""
import tilus
from tilus import float16, float32, int32


class MatmulV3(tilus.Script):
    def __init__(self, block_m=128, block_n=128, block_k=32, warps=4, stages=3, group=8):
        super().__init__()
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
        self.warps, self.stages, self.group = warps, stages, group

    def __call__(self, m: int32, n: int32, k: int32, a: ~float16, b: ~float16, c: ~float16):
        bm, bn, bk, stages = self.block_m, self.block_n, self.block_k, self.stages
        tiles_m = tilus.cdiv(m, bm)
        tiles_n = tilus.cdiv(n, bn)
        self.attrs.blocks = [tiles_m * tiles_n]
        self.attrs.warps = self.warps
        first_m = self.blockIdx.x // (self.group * tiles_n) * self.group
        rows = tilus.min(tiles_m - first_m, self.group)
        offset_m = (first_m + self.blockIdx.x % rows) * bm
        offset_n = self.blockIdx.x % (self.group * tiles_n) // rows * bn
        ga = self.global_view(a, shape=[m, k])
        gb = self.global_view(b, shape=[k, n])
        sa = self.shared_tensor(dtype=float16, shape=[stages, bm, bk])
        sb = self.shared_tensor(dtype=float16, shape=[stages, bk, bn])
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        for s in tilus.static_range(stages - 1):  # the prologue, unrolled while tracing
            self.copy_async(ga, sa[s], offsets=[offset_m, s * bk])
            self.copy_async(gb, sb[s], offsets=[s * bk, offset_n])
            self.copy_async_commit_group()
        for step in range(tilus.cdiv(k, bk)):
            nxt = step + (stages - 1)
            self.copy_async(ga, sa[nxt % stages], offsets=[offset_m, nxt * bk])
            self.copy_async(gb, sb[nxt % stages], offsets=[nxt * bk, offset_n])
            self.copy_async_commit_group()
            acc = self.dot(self.load_shared(sa[step % stages]), self.load_shared(sb[step % stages]), acc)
        self.store_global(self.global_view(c, shape=[m, n]), acc.to(float16), offsets=[offset_m, offset_n])


if __name__ == "__main__":
    from common import matmul_main
    matmul_main("matmul_v3", MatmulV3())
