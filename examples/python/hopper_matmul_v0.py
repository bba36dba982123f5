"""Hopper matmul v0: TMA + wgmma, one stage. Each block computes a [block_m, block_n] tile of
c = a @ b.T (a [m, k], b [n, k], both K-major as wgmma reads them): one thread loads the
tiles of a and b with TMA onto an mbarrier, the warp group waits on it and multiplies the
shared tiles with wgmma (asynchronous until wgmma.wait_group), then the next tiles overwrite
them. Layout inference gives the shared tiles TMA's 128-byte swizzle, which is the one the
wgmma descriptors name; the passes add the barrier that keeps the next load from
overwriting tiles still being read. k must be a multiple of 8 (16-byte rows for TMA)."""
import tilus
from tilus import float16, float32, int32


class HopperMatmulV0(tilus.Script):
    def __init__(self, block_m=128, block_n=128, block_k=64):
        super().__init__()
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k

    def __call__(self, m: int32, n: int32, k: int32, a: ~float16, b: ~float16, c: ~float16):
        bm, bn, bk = self.block_m, self.block_n, self.block_k
        self.attrs.blocks = [tilus.cdiv(m, bm), tilus.cdiv(n, bn)]
        self.attrs.warps = 4  # one warp group
        offset_m = self.blockIdx.x * bm
        offset_n = self.blockIdx.y * bn
        ga = self.global_view(a, shape=[m, k])
        gb = self.global_view(b, shape=[n, k])
        sa = self.shared_tensor(dtype=float16, shape=[bm, bk])
        sb = self.shared_tensor(dtype=float16, shape=[bn, bk])
        loaded = self.mbarrier.alloc(counts=[1])
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        for ko in range(tilus.cdiv(k, bk)):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(loaded[0], transaction_bytes=(bm + bn) * bk * 2)
                self.tma.global_to_shared(src=ga, dst=sa, offsets=[offset_m, ko * bk], mbarrier=loaded[0])
                self.tma.global_to_shared(src=gb, dst=sb, offsets=[offset_n, ko * bk], mbarrier=loaded[0])
            self.mbarrier.wait(loaded[0], phase=ko % 2)
            self.wgmma.fence()
            self.wgmma.mma(sa, sb.transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
        self.store_global(self.global_view(c, shape=[m, n]), acc.to(float16), offsets=[offset_m, offset_n])


if __name__ == "__main__":
    from common import matmul_main
    matmul_main("hopper_matmul_v0", HopperMatmulV0(), sizes=((301, 517, 200), (128, 128, 64)), b_nk=True)
