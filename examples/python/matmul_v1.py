"""Matmul v1 (shared memory): tiles go global -> registers -> shared memory, and the dot reads
them back from shared memory; `sync` separates the writes from the reads."""
import tilus
from tilus import float16, float32, int32


class MatmulV1(tilus.Script):
    def __init__(self, block_m=64, block_n=64, block_k=32, warps=4):
        super().__init__()
        self.block_m, self.block_n, self.block_k, self.warps = block_m, block_n, block_k, warps

    def __call__(self, m: int32, n: int32, k: int32, a: ~float16, b: ~float16, c: ~float16):
        self.attrs.blocks = [tilus.cdiv(m, self.block_m), tilus.cdiv(n, self.block_n)]
        self.attrs.warps = self.warps
        offset_m = self.blockIdx.x * self.block_m
        offset_n = self.blockIdx.y * self.block_n
        ga = self.global_view(a, shape=[m, k])
        gb = self.global_view(b, shape=[k, n])
        sa = self.shared_tensor(dtype=float16, shape=[self.block_m, self.block_k])
        sb = self.shared_tensor(dtype=float16, shape=[self.block_k, self.block_n])
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        for k0 in range(0, k, self.block_k):
            self.store_shared(sa, self.load_global(ga, offsets=[offset_m, k0], shape=[self.block_m, self.block_k]))
            self.store_shared(sb, self.load_global(gb, offsets=[k0, offset_n], shape=[self.block_k, self.block_n]))
            self.sync()
            acc = self.dot(self.load_shared(sa), self.load_shared(sb), acc)
            self.sync()
        self.free_shared(sa)
        self.free_shared(sb)
        self.store_global(self.global_view(c, shape=[m, n]), acc.to(float16), offsets=[offset_m, offset_n])


if __name__ == "__main__":
    from common import matmul_main
    matmul_main("matmul_v1", MatmulV1())
