"""Matmul with TMA (sm_90): tiles of a and b loaded by the Tensor Memory Accelerator into a ring
of `stages` shared buffers, each completing on its own mbarrier; the block waits on the
barrier of the stage it computes (parity = how many times the ring came round, mod 2) and
multiplies with mma.sync. One thread issues the copies; the passes add the barrier that keeps
a stage from being refilled while it is read. a [m, k] and b [k, n] row-major with rows of
multiples of 16 bytes (k and n multiples of 8); ragged edges are zero-filled by TMA."""
import tilus
from tilus import float16, float32, int32


class MatmulTma(tilus.Script):
    def __init__(self, block_m=128, block_n=64, block_k=64, warps=4, stages=4, group=8):
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
        bars = self.mbarrier.alloc(counts=[1] * stages)
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        steps = tilus.cdiv(k, bk)
        tile_bytes = (bm * bk + bk * bn) * 2
        for s in tilus.static_range(stages - 1):  # the prologue, unrolled while tracing
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(bars[s], transaction_bytes=tile_bytes)
                self.tma.global_to_shared(src=ga, dst=sa[s], offsets=[offset_m, s * bk], mbarrier=bars[s])
                self.tma.global_to_shared(src=gb, dst=sb[s], offsets=[s * bk, offset_n], mbarrier=bars[s])
        for step in range(steps):
            nxt = step + (stages - 1)
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(bars[nxt % stages], transaction_bytes=tile_bytes)
                self.tma.global_to_shared(src=ga, dst=sa[nxt % stages], offsets=[offset_m, nxt * bk],
                                         mbarrier=bars[nxt % stages])
                self.tma.global_to_shared(src=gb, dst=sb[nxt % stages], offsets=[nxt * bk, offset_n],
                                         mbarrier=bars[nxt % stages])
            self.mbarrier.wait(bars[step % stages], phase=step // stages % 2)
            acc = self.dot(self.load_shared(sa[step % stages]), self.load_shared(sb[step % stages]), acc)
        # The loads past the last step (zero-filled) complete before the block exits.
        for s in tilus.static_range(stages - 1):
            self.mbarrier.wait(bars[(steps + s) % stages], phase=(steps + s) // stages % 2)
        self.store_global(self.global_view(c, shape=[m, n]), acc.to(float16), offsets=[offset_m, offset_n])


if __name__ == "__main__":
    from common import matmul_main
    matmul_main("matmul_tma", MatmulTma(), sizes=((296, 520, 200), (128, 64, 64)))
