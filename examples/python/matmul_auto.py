"""Matmul as a plain tile Script, made fast by the compiler: per k step the tiles of a and b are
copied to shared memory and multiplied, and the k loop says `num_stages`. The pipeline_loops pass
makes the ring (TMA loads on mbarriers on sm_90, cp.async on sm_80, the dot a wgmma with one
iteration in flight on sm_90a); `warp_specialize` adds a producer warp group, `persistent` one
block per SM walking the tiles in groups of rows that share L2, and there the store after the loop
goes through a shared tile and TMA stores that complete while the next tile multiplies (`epilogue`:
None lets the pass take it where legal and where the [128, 256] output tile's 64 KB fit beside the
stages: three stages of 48 KB do, four do not; "registers" keeps the store as written). No wait,
barrier, stage or thread role is written. c = a @ b.T with a [m, k], b [n, k]; `matmul_auto(dtype)`
makes the class."""
import tilus
from tilus import bfloat16, float16, float32, int32


def matmul_auto(dt):
    class MatmulAuto(tilus.Script):
        def __init__(self, block_m=128, block_n=256, block_k=64, warps=8, stages=3, warp_specialize=True,
                     persistent=True, epilogue=None):
            super().__init__()
            self.block_m, self.block_n, self.block_k, self.warps, self.stages = block_m, block_n, block_k, warps, stages
            self.warp_specialize, self.persistent, self.epilogue = warp_specialize, persistent, epilogue

        def __call__(self, m: int32, n: int32, k: int32, a: ~dt, b: ~dt, c: ~dt):
            bm, bn, bk = self.block_m, self.block_n, self.block_k
            self.attrs.blocks = [tilus.cdiv(m, bm), tilus.cdiv(n, bn)]
            self.attrs.warps = self.warps
            ga = self.global_view(a, shape=[m, k])
            gb = self.global_view(b, shape=[n, k])
            sa = self.shared_tensor(dtype=dt, shape=[bm, bk])
            sb = self.shared_tensor(dtype=dt, shape=[bn, bk])
            acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
            for ko in self.range(tilus.cdiv(k, bk), num_stages=self.stages, warp_specialize=self.warp_specialize,
                                 persistent=self.persistent, epilogue=self.epilogue if self.persistent else None):
                self.copy(ga[self.blockIdx.x * bm, ko * bk], sa)
                self.copy(gb[self.blockIdx.y * bn, ko * bk], sb)
                acc = self.dot(self.load_shared(sa), self.load_shared(sb.transpose()), acc)
            self.store_global(self.global_view(c, shape=[m, n]), acc.to(dt),
                              offsets=[self.blockIdx.x * bm, self.blockIdx.y * bn])

    MatmulAuto.__name__ = MatmulAuto.__qualname__ = "MatmulAuto" + ("Bf16" if dt == bfloat16 else "")
    return MatmulAuto


MatmulAuto = matmul_auto(float16)
MatmulAutoBf16 = matmul_auto(bfloat16)


if __name__ == "__main__":
    from common import matmul_main
    matmul_main("matmul_auto", MatmulAuto(), sizes=((301, 520, 200), (128, 256, 64), (1000, 3000, 1024)), b_nk=True)
