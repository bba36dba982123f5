"""Hopper matmul v5: v3 in clusters of two blocks that share their tile of b. The two blocks of
a cluster take two output tiles one above the other (the same columns of c, so the same [bn, bk]
tiles of b); each loads its own tile of a and half of the tile of b, and multicasts that half
into the shared memory of both blocks (TMA multicast), so every block reads a third less from L2.
A stage of the ring is free again only when the consumers of both blocks have released it: each
consumer warp group arrives on the `empty` barrier of its own block and of its peer's.
c = a @ b.T with a [m, k], b [n, k]; `hopper_matmul_v5(dtype)` makes the class for float16 or
bfloat16 operands."""
import tilus
from tilus import bfloat16, float16, float32, int32


def hopper_matmul_v5(dt):
    class HopperMatmulV5(tilus.Script):
        def __init__(self, block_m=128, block_n=256, block_k=64, stages=4, consumers=2, group=8, blocks=132):
            super().__init__()
            assert blocks % 2 == 0, "blocks come in clusters of two"
            self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
            self.stages, self.consumers, self.group, self.blocks = stages, consumers, group, blocks

        def pair_origin(self, t, pairs_m, tiles_n):
            """The (row, column) of the pair of output tiles t (2 * block_m rows) in the grouped order."""
            span = self.group * tiles_n
            first_m = t // span * self.group
            rows = tilus.min(pairs_m - first_m, self.group)
            return (first_m + t % rows) * 2 * self.block_m, t % span // rows * self.block_n

        def release(self, barrier, peer):
            """One arrival per consumer warp group on this block's barrier and one on the peer's."""
            for wg in tilus.static_range(self.consumers):
                with self.thread_group(thread_begin=wg * 128, num_threads=1):
                    self.mbarrier.arrive(barrier)
                    self.mbarrier_arrive(barrier, cta_id=peer)

        def __call__(self, m: int32, n: int32, k: int32, a: ~dt, b: ~dt, c: ~dt):
            bm, bn, bk, stages, blocks = self.block_m, self.block_n, self.block_k, self.stages, self.blocks
            half = bn // 2
            workers = 128 * self.consumers
            clusters = blocks // 2
            self.attrs.blocks = [blocks]
            self.attrs.cluster_blocks = [2, 1, 1]
            self.attrs.warps = 4 * self.consumers + 1
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
            full = self.mbarrier.alloc(counts=[1] * stages)
            empty = self.mbarrier.alloc(counts=[2 * self.consumers] * stages)  # both blocks' consumers
            self.cluster.sync()  # the peer's barriers are initialized before anything arrives on them
            with self.thread_group(thread_begin=workers, num_threads=32):  # the producer warp
                for t in range(cluster, pairs, clusters):
                    pair_m, offset_n = self.pair_origin(t, pairs_m, tiles_n)
                    first = (t - cluster) // clusters * steps
                    for step in range(steps):
                        g = first + step
                        stage = g % stages
                        self.mbarrier.wait(empty[stage], phase=g // stages % 2 ^ 1)
                        with self.single_thread():
                            # this block's a, and both halves of b (its own and the peer's multicast)
                            self.mbarrier.arrive_and_expect_tx(full[stage], transaction_bytes=(bm + bn) * bk * 2)
                            self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[pair_m + rank * bm, step * bk],
                                                     mbarrier=full[stage])
                            self.tma.global_to_shared(src=gb, dst=self.slice_shared(sb[stage], [rank * half, 0], [0, 1],
                                                                                   [half, bk]),
                                                     offsets=[offset_n + rank * half, step * bk], mbarrier=full[stage],
                                                     multicast_mask=3)
            with self.thread_group(thread_begin=0, num_threads=workers):  # the consumer warp groups
                for t in range(cluster, pairs, clusters):
                    pair_m, offset_n = self.pair_origin(t, pairs_m, tiles_n)
                    first = (t - cluster) // clusters * steps
                    acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
                    for step in range(steps):
                        g = first + step
                        stage = g % stages
                        self.mbarrier.wait(full[stage], phase=g // stages % 2)
                        self.wgmma.fence()
                        self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
                        self.wgmma.commit_group()
                        self.wgmma.wait_group(1)
                        if step > 0:
                            self.release(empty[(g + stages - 1) % stages], peer)
                    self.wgmma.wait_group(0)
                    self.release(empty[(first + steps - 1) % stages], peer)
                    self.store_global(gc, acc.to(dt), offsets=[pair_m + rank * bm, offset_n])
            self.cluster.sync()  # no block leaves while its peer may still write to it

    HopperMatmulV5.__name__ = HopperMatmulV5.__qualname__ = "HopperMatmulV5" + ("Bf16" if dt == bfloat16 else "")
    return HopperMatmulV5


HopperMatmulV5 = hopper_matmul_v5(float16)
HopperMatmulV5Bf16 = hopper_matmul_v5(bfloat16)


if __name__ == "__main__":
    from common import matmul_main, on_gpu
    if not on_gpu():
        print("hopper_matmul_v5: skipped (clusters and warp-specialized kernels need the GPU)")
    else:
        import torch
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        matmul_main("hopper_matmul_v5", HopperMatmulV5(blocks=sms // 2 * 2),
                    sizes=((301, 517, 200), (128, 256, 64), (1000, 3000, 1024)), b_nk=True)
