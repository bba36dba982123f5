"""Hopper matmul v2: warp specialization. One producer warp issues the TMA loads of a ring of
`stages` buffers; the consumer warp groups (threads [0, 128 * consumers)) multiply with wgmma,
each taking block_m / consumers rows of the tile. Two mbarriers per stage make the ring:
`full[s]` completes when the stage's bytes land (the producer arrives with the expected byte
count), `empty[s]` when every consumer warp group has released it (after the wgmma that read it
retired). The producer starts on phase 1 of `empty` (a fresh barrier's previous phase counts
as complete), the consumers on phase 0 of `full`. c = a @ b.T with a [m, k], b [n, k]."""
import tilus
from tilus import float16, float32, int32


class HopperMatmulV2(tilus.Script):
    def __init__(self, block_m=128, block_n=256, block_k=64, stages=4, consumers=2):
        super().__init__()
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
        self.stages, self.consumers = stages, consumers

    def release(self, barrier):
        """One arrival per consumer warp group, by its first thread: a warp group's
        wgmma.wait_group returning in any of its threads means its wgmma have retired."""
        for wg in tilus.static_range(self.consumers):
            with self.thread_group(thread_begin=wg * 128, num_threads=1):
                self.mbarrier.arrive(barrier)

    def __call__(self, m: int32, n: int32, k: int32, a: ~float16, b: ~float16, c: ~float16):
        bm, bn, bk, stages = self.block_m, self.block_n, self.block_k, self.stages
        workers = 128 * self.consumers
        self.attrs.blocks = [tilus.cdiv(m, bm), tilus.cdiv(n, bn)]
        self.attrs.warps = 4 * self.consumers + 1
        offset_m = self.blockIdx.x * bm
        offset_n = self.blockIdx.y * bn
        ga = self.global_view(a, shape=[m, k])
        gb = self.global_view(b, shape=[n, k])
        sa = self.shared_tensor(dtype=float16, shape=[stages, bm, bk])
        sb = self.shared_tensor(dtype=float16, shape=[stages, bn, bk])
        full = self.mbarrier.alloc(counts=[1] * stages)
        empty = self.mbarrier.alloc(counts=[self.consumers] * stages)  # one arrival per consumer warp group
        steps = tilus.cdiv(k, bk)
        with self.thread_group(thread_begin=workers, num_threads=32):  # the producer warp
            for step in range(steps):
                stage = step % stages
                self.mbarrier.wait(empty[stage], phase=step // stages % 2 ^ 1)
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(full[stage], transaction_bytes=(bm + bn) * bk * 2)
                    self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[offset_m, step * bk], mbarrier=full[stage])
                    self.tma.global_to_shared(src=gb, dst=sb[stage], offsets=[offset_n, step * bk], mbarrier=full[stage])
        with self.thread_group(thread_begin=0, num_threads=workers):  # the consumer warp groups
            acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
            for step in range(steps):
                stage = step % stages
                self.mbarrier.wait(full[stage], phase=step // stages % 2)
                self.wgmma.fence()
                self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
                self.wgmma.commit_group()
                self.wgmma.wait_group(1)  # the previous step's wgmma retired: release its stage
                if step > 0:
                    self.release(empty[(step + stages - 1) % stages])
            self.wgmma.wait_group(0)
            self.store_global(self.global_view(c, shape=[m, n]), acc.to(float16), offsets=[offset_m, offset_n])


if __name__ == "__main__":
    from common import matmul_main, on_gpu
    if not on_gpu():
        # The producer and the consumers wait on each other: the CPU backend runs the groups of a
        # block one after the other, so this kernel needs the GPU.
        print("hopper_matmul_v2: skipped (warp-specialized kernels need the GPU)")
    else:
        matmul_main("hopper_matmul_v2", HopperMatmulV2(), sizes=((301, 517, 200), (128, 256, 64), (256, 512, 1024)),
                    b_nk=True)
