"""Hopper matmul v6: v5 (clusters of two sharing b by TMA multicast) with v4's epilogue through
shared memory and TMA stores, keeping v5's four stages. Four stages of a 128x256x64 tile take
192 KB of the 227 KB of shared memory, so the output tile (64 KB) cannot have a shared tile of
its own as in v4. Instead the accumulator is kept as two column halves (two wgmma per step, each
[128, 128]), and each half goes out through one 32 KB shared tile: written by the consumers, sent
by one thread as two TMA store boxes of 64 columns; before writing the second half the consumers
wait until the first has been read out of shared memory. The stores then complete while the next
tile multiplies. TMA clips the boxes at c's edges (no predicates) and needs c's rows to be a
multiple of 16 bytes (n a multiple of 8: a launch that breaks this is an ArgumentError).
c = a @ b.T with a [m, k], b [n, k]; `hopper_matmul_v6(dtype)` makes the class for float16 or
bfloat16 operands."""
import tilus
from tilus import bfloat16, float16, float32, int32


def hopper_matmul_v6(dt):
    class HopperMatmulV6(tilus.Script):
        def __init__(self, block_m=128, block_n=256, block_k=64, stages=4, group=8, blocks=132):
            super().__init__()
            assert blocks % 2 == 0, "blocks come in clusters of two"
            self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
            self.stages, self.group, self.blocks = stages, group, blocks

        def pair_origin(self, t, pairs_m, tiles_n):
            """The (row, column) of the pair of output tiles t (2 * block_m rows) in the grouped order."""
            span = self.group * tiles_n
            first_m = t // span * self.group
            rows = tilus.min(pairs_m - first_m, self.group)
            return (first_m + t % rows) * 2 * self.block_m, t % span // rows * self.block_n

        def release(self, barrier, peer):
            """One arrival per consumer warp group on this block's barrier and one on the peer's."""
            for wg in tilus.static_range(2):
                with self.thread_group(thread_begin=wg * 128, num_threads=1):
                    self.mbarrier.arrive(barrier)
                    self.mbarrier_arrive(barrier, cta_id=peer)

        def __call__(self, m: int32, n: int32, k: int32, a: ~dt, b: ~dt, c: ~dt):
            bm, bn, bk, stages, blocks = self.block_m, self.block_n, self.block_k, self.stages, self.blocks
            half = bn // 2
            box = 64  # columns of one TMA store box: one 128-byte swizzled row of 16-bit elements
            clusters = blocks // 2
            self.attrs.blocks = [blocks]
            self.attrs.cluster_blocks = [2, 1, 1]
            self.attrs.warps = 9  # two consumer warp groups and the producer warp
            rank = self.cluster.blockRank
            peer = rank ^ 1
            cluster = self.blockIdx.x // 2
            pairs_m, tiles_n = tilus.cdiv(m, 2 * bm), tilus.cdiv(n, bn)
            pairs = pairs_m * tiles_n
            steps = tilus.cdiv(k, bk)
            ga = self.global_view(a, shape=[m, k])
            gb = self.global_view(b, shape=[n, k])
            gc = self.global_view(c, shape=[m, n])
            sa = self.shared_tensor(dtype=dt, shape=[stages, bm, bk])
            sb = self.shared_tensor(dtype=dt, shape=[stages, bn, bk])
            sc = self.shared_tensor(dtype=dt, shape=[half // box, bm, box])  # the boxes of one column half
            full = self.mbarrier.alloc(counts=[1] * stages)
            empty = self.mbarrier.alloc(counts=[4] * stages)  # both blocks' two consumer warp groups
            self.cluster.sync()  # the peer's barriers are initialized before anything arrives on them
            with self.thread_group(thread_begin=256, num_threads=32):  # the producer warp
                for t in range(cluster, pairs, clusters):
                    pair_m, offset_n = self.pair_origin(t, pairs_m, tiles_n)
                    first = (t - cluster) // clusters * steps
                    for step in range(steps):
                        g = first + step
                        stage = g % stages
                        self.mbarrier.wait(empty[stage], phase=g // stages % 2 ^ 1)
                        with self.single_thread():
                            self.mbarrier.arrive_and_expect_tx(full[stage], transaction_bytes=(bm + bn) * bk * 2)
                            self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[pair_m + rank * bm, step * bk],
                                                     mbarrier=full[stage])
                            self.tma.global_to_shared(src=gb, dst=self.slice_shared(sb[stage], [rank * half, 0], [0, 1],
                                                                                   [half, bk]),
                                                     offsets=[offset_n + rank * half, step * bk], mbarrier=full[stage],
                                                     multicast_mask=3)
            with self.thread_group(thread_begin=0, num_threads=256):  # the consumer warp groups
                for t in range(cluster, pairs, clusters):
                    pair_m, offset_n = self.pair_origin(t, pairs_m, tiles_n)
                    offset_m = pair_m + rank * bm
                    first = (t - cluster) // clusters * steps
                    left = self.register_tensor(dtype=float32, shape=[bm, half], init=0.0)
                    right = self.register_tensor(dtype=float32, shape=[bm, half], init=0.0)
                    for step in range(steps):
                        g = first + step
                        stage = g % stages
                        self.mbarrier.wait(full[stage], phase=g // stages % 2)
                        self.wgmma.fence()
                        self.wgmma.mma(sa[stage], self.slice_shared(sb[stage], [0, 0], [0, 1], [half, bk]).transpose(),
                                       left)
                        self.wgmma.mma(sa[stage], self.slice_shared(sb[stage], [half, 0], [0, 1], [half, bk]).transpose(),
                                       right)
                        self.wgmma.commit_group()
                        self.wgmma.wait_group(1)
                        if step > 0:
                            self.release(empty[(g + stages - 1) % stages], peer)
                    self.wgmma.wait_group(0)
                    self.release(empty[(first + steps - 1) % stages], peer)
                    for h, acc in enumerate([left, right]):  # a Python loop: traced once per half
                        with self.single_thread():  # the stores before have read sc
                            self.tma.wait_group(0, read=True)
                        # [bm, half] -> [bm, boxes, box] -> the shared boxes seen as [bm, boxes, box]
                        self.store_shared(sc.permute([1, 0, 2]), self.reshape(acc.to(dt), [bm, half // box, box]))
                        with self.single_thread():
                            for j in tilus.static_range(half // box):
                                self.tma.shared_to_global(sc[j], gc, offsets=[offset_m, offset_n + h * half + j * box])
                            self.tma.commit_group()
            self.cluster.sync()  # no block leaves while its peer may still write to it

    HopperMatmulV6.__name__ = HopperMatmulV6.__qualname__ = "HopperMatmulV6" + ("Bf16" if dt == bfloat16 else "")
    return HopperMatmulV6


HopperMatmulV6 = hopper_matmul_v6(float16)
HopperMatmulV6Bf16 = hopper_matmul_v6(bfloat16)


if __name__ == "__main__":
    from common import matmul_main, on_gpu
    if not on_gpu():
        print("hopper_matmul_v6: skipped (clusters and warp-specialized kernels need the GPU)")
    else:
        import torch
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        matmul_main("hopper_matmul_v6", HopperMatmulV6(blocks=sms // 2 * 2),
                    sizes=((301, 520, 200), (128, 256, 64), (1000, 3000, 1024)), b_nk=True)  # c's rows: 16-byte multiples
