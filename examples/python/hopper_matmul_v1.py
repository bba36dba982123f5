"""Hopper matmul v1: a ring of `stages` shared buffers filled by TMA ahead of the wgmma that
read them. Stage s completes on its own mbarrier (phase = how many times the ring came round,
mod 2); the warp group keeps one wgmma group in flight (wait_group(1)) while it issues the
next, and the load that refills a stage is issued only after the wgmma reading it retired.
c = a @ b.T with a [m, k], b [n, k]; k a multiple of 8."""
import tilus
from tilus import float16, float32, int32


class HopperMatmulV1(tilus.Script):
    def __init__(self, block_m=128, block_n=128, block_k=64, stages=4):
        super().__init__()
        self.block_m, self.block_n, self.block_k, self.stages = block_m, block_n, block_k, stages

    def __call__(self, m: int32, n: int32, k: int32, a: ~float16, b: ~float16, c: ~float16):
        bm, bn, bk, stages = self.block_m, self.block_n, self.block_k, self.stages
        self.attrs.blocks = [tilus.cdiv(m, bm), tilus.cdiv(n, bn)]
        self.attrs.warps = 4
        offset_m = self.blockIdx.x * bm
        offset_n = self.blockIdx.y * bn
        ga = self.global_view(a, shape=[m, k])
        gb = self.global_view(b, shape=[n, k])
        sa = self.shared_tensor(dtype=float16, shape=[stages, bm, bk])
        sb = self.shared_tensor(dtype=float16, shape=[stages, bn, bk])
        loaded = self.mbarrier.alloc(counts=[1] * stages)
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        steps = tilus.cdiv(k, bk)
        tile_bytes = (bm + bn) * bk * 2
        for s in tilus.static_range(stages - 1):  # the prologue: stages - 1 tiles in flight
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(loaded[s], transaction_bytes=tile_bytes)
                self.tma.global_to_shared(src=ga, dst=sa[s], offsets=[offset_m, s * bk], mbarrier=loaded[s])
                self.tma.global_to_shared(src=gb, dst=sb[s], offsets=[offset_n, s * bk], mbarrier=loaded[s])
        for step in range(steps):
            stage = step % stages
            self.mbarrier.wait(loaded[stage], phase=step // stages % 2)
            self.wgmma.fence()
            self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
            self.wgmma.commit_group()
            # The group of the previous step has retired: its stage is the one refilled next.
            self.wgmma.wait_group(1)
            nxt = step + stages - 1
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(loaded[nxt % stages], transaction_bytes=tile_bytes)
                self.tma.global_to_shared(src=ga, dst=sa[nxt % stages], offsets=[offset_m, nxt * bk],
                                         mbarrier=loaded[nxt % stages])
                self.tma.global_to_shared(src=gb, dst=sb[nxt % stages], offsets=[offset_n, nxt * bk],
                                         mbarrier=loaded[nxt % stages])
        self.wgmma.wait_group(0)
        # The loads past the last step (zero-filled) complete before the block exits.
        for s in tilus.static_range(stages - 1):
            self.mbarrier.wait(loaded[(steps + s) % stages], phase=(steps + s) // stages % 2)
        self.store_global(self.global_view(c, shape=[m, n]), acc.to(float16), offsets=[offset_m, offset_n])


if __name__ == "__main__":
    from common import matmul_main
    matmul_main("hopper_matmul_v1", HopperMatmulV1(), sizes=((301, 517, 200), (128, 128, 64), (256, 256, 1024)),
                b_nk=True)
