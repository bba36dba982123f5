"""Hopper matmul v3: v2 made persistent. The grid is one block per SM; each block walks the
output tiles `blockIdx.x, blockIdx.x + blocks, ...` in a grouped order (`group` tiles down a
column of tiles before moving right, so that blocks running together share the tiles of a and b
in L2). The producer warp runs ahead across tile boundaries, so the next tile's loads overlap
the consumers' epilogue of this one; the mbarrier ring and its phases continue from tile to tile
(step g of the block's whole sequence uses stage g % stages, phase g // stages % 2).
c = a @ b.T with a [m, k], b [n, k]; `hopper_matmul_v3(dtype)` makes the class for float16 or
bfloat16 operands (the parameter annotations name the dtype)."""
import tilus
from tilus import bfloat16, float16, float32, int32


def hopper_matmul_v3(dt):
    class HopperMatmulV3(tilus.Script):
        def __init__(self, block_m=128, block_n=256, block_k=64, stages=4, consumers=2, group=8, blocks=132):
            super().__init__()
            self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
            self.stages, self.consumers, self.group, self.blocks = stages, consumers, group, blocks

        def tile_origin(self, t, tiles_m, tiles_n):
            """The (row, column) of output tile t in the grouped order."""
            span = self.group * tiles_n
            first_m = t // span * self.group
            rows = tilus.min(tiles_m - first_m, self.group)
            return (first_m + t % rows) * self.block_m, t % span // rows * self.block_n

        def release(self, barrier):
            """One arrival per consumer warp group, by its first thread: a warp group's
            wgmma.wait_group returning in any of its threads means its wgmma have retired."""
            for wg in tilus.static_range(self.consumers):
                with self.thread_group(thread_begin=wg * 128, num_threads=1):
                    self.mbarrier.arrive(barrier)

        def __call__(self, m: int32, n: int32, k: int32, a: ~dt, b: ~dt, c: ~dt):
            bm, bn, bk, stages, blocks = self.block_m, self.block_n, self.block_k, self.stages, self.blocks
            workers = 128 * self.consumers
            self.attrs.blocks = [blocks]
            self.attrs.warps = 4 * self.consumers + 1
            tiles_m, tiles_n = tilus.cdiv(m, bm), tilus.cdiv(n, bn)
            tiles = tiles_m * tiles_n
            steps = tilus.cdiv(k, bk)
            ga = self.global_view(a, shape=[m, k])
            gb = self.global_view(b, shape=[n, k])
            gc = self.global_view(c, shape=[m, n])
            sa = self.shared_tensor(dtype=dt, shape=[stages, bm, bk])
            sb = self.shared_tensor(dtype=dt, shape=[stages, bn, bk])
            full = self.mbarrier.alloc(counts=[1] * stages)
            empty = self.mbarrier.alloc(counts=[self.consumers] * stages)  # one arrival per consumer warp group
            with self.thread_group(thread_begin=workers, num_threads=32):  # the producer warp
                for t in range(self.blockIdx.x, tiles, blocks):
                    offset_m, offset_n = self.tile_origin(t, tiles_m, tiles_n)
                    first = (t - self.blockIdx.x) // blocks * steps  # the block's steps before this tile
                    for step in range(steps):
                        g = first + step
                        stage = g % stages
                        self.mbarrier.wait(empty[stage], phase=g // stages % 2 ^ 1)
                        with self.single_thread():
                            self.mbarrier.arrive_and_expect_tx(full[stage], transaction_bytes=(bm + bn) * bk * 2)
                            self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[offset_m, step * bk],
                                                     mbarrier=full[stage])
                            self.tma.global_to_shared(src=gb, dst=sb[stage], offsets=[offset_n, step * bk],
                                                     mbarrier=full[stage])
            with self.thread_group(thread_begin=0, num_threads=workers):  # the consumer warp groups
                for t in range(self.blockIdx.x, tiles, blocks):
                    offset_m, offset_n = self.tile_origin(t, tiles_m, tiles_n)
                    first = (t - self.blockIdx.x) // blocks * steps
                    acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
                    for step in range(steps):
                        g = first + step
                        stage = g % stages
                        self.mbarrier.wait(full[stage], phase=g // stages % 2)
                        self.wgmma.fence()
                        self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
                        self.wgmma.commit_group()
                        self.wgmma.wait_group(1)  # the previous step's wgmma retired: release its stage
                        if step > 0:
                            self.release(empty[(g + stages - 1) % stages])
                    self.wgmma.wait_group(0)
                    self.release(empty[(first + steps - 1) % stages])
                    self.store_global(gc, acc.to(dt), offsets=[offset_m, offset_n])

    HopperMatmulV3.__name__ = HopperMatmulV3.__qualname__ = "HopperMatmulV3" + ("Bf16" if dt == bfloat16 else "")
    return HopperMatmulV3


HopperMatmulV3 = hopper_matmul_v3(float16)
HopperMatmulV3Bf16 = hopper_matmul_v3(bfloat16)


if __name__ == "__main__":
    from common import matmul_main, on_gpu
    if not on_gpu():
        print("hopper_matmul_v3: skipped (warp-specialized kernels need the GPU)")
    else:
        import torch
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        matmul_main("hopper_matmul_v3", HopperMatmulV3(blocks=sms),
                    sizes=((301, 517, 200), (128, 256, 64), (1000, 3000, 1024)), b_nk=True)
