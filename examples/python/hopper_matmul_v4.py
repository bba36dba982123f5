"""Hopper matmul v4: v3 with its epilogue through shared memory and TMA stores. Each tile's
result goes from the accumulator registers into a shared tile (in 64-column boxes of 128-byte
rows, the layout TMA stores read), and one thread sends the boxes to global memory with TMA;
the consumers go on to the next tile at once, and wait for the stores to have read the shared
tile only before they write it again, a whole tile later. Rows and columns outside c are not
written (TMA clips its boxes), so ragged sizes need no predicates; TMA needs c's rows to be a
multiple of 16 bytes (n a multiple of 8), and a launch that breaks this is an ArgumentError.
c = a @ b.T with a [m, k], b [n, k]; `hopper_matmul_v4(dtype)` makes the class for float16 or
bfloat16 operands."""
import tilus
from tilus import bfloat16, float16, float32, int32


def hopper_matmul_v4(dt):
    class HopperMatmulV4(tilus.Script):
        def __init__(self, block_m=128, block_n=256, block_k=64, stages=3, consumers=2, group=8, blocks=132):
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
            """One arrival per consumer warp group, by its first thread."""
            for wg in tilus.static_range(self.consumers):
                with self.thread_group(thread_begin=wg * 128, num_threads=1):
                    self.mbarrier.arrive(barrier)

        def __call__(self, m: int32, n: int32, k: int32, a: ~dt, b: ~dt, c: ~dt):
            bm, bn, bk, stages, blocks = self.block_m, self.block_n, self.block_k, self.stages, self.blocks
            box = 64  # columns of one TMA store box: one 128-byte swizzled row of 16-bit elements
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
            sc = self.shared_tensor(dtype=dt, shape=[bn // box, bm, box])  # the boxes of one output tile
            full = self.mbarrier.alloc(counts=[1] * stages)
            empty = self.mbarrier.alloc(counts=[self.consumers] * stages)
            with self.thread_group(thread_begin=workers, num_threads=32):  # the producer warp
                for t in range(self.blockIdx.x, tiles, blocks):
                    offset_m, offset_n = self.tile_origin(t, tiles_m, tiles_n)
                    first = (t - self.blockIdx.x) // blocks * steps
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
                        self.wgmma.wait_group(1)
                        if step > 0:
                            self.release(empty[(g + stages - 1) % stages])
                    self.wgmma.wait_group(0)
                    self.release(empty[(first + steps - 1) % stages])
                    with self.single_thread():  # the last tile's stores have read sc
                        self.tma.wait_group(0, read=True)
                    # [bm, bn] -> [bm, boxes, box] -> the shared boxes seen as [bm, boxes, box]
                    out = self.reshape(acc.to(dt), [bm, bn // box, box])
                    self.store_shared(sc.permute([1, 0, 2]), out)
                    with self.single_thread():
                        for j in tilus.static_range(bn // box):
                            self.tma.shared_to_global(sc[j], gc, offsets=[offset_m, offset_n + j * box])
                        self.tma.commit_group()

    HopperMatmulV4.__name__ = HopperMatmulV4.__qualname__ = "HopperMatmulV4" + ("Bf16" if dt == bfloat16 else "")
    return HopperMatmulV4


HopperMatmulV4 = hopper_matmul_v4(float16)
HopperMatmulV4Bf16 = hopper_matmul_v4(bfloat16)


if __name__ == "__main__":
    from common import matmul_main, on_gpu
    if not on_gpu():
        print("hopper_matmul_v4: skipped (warp-specialized kernels need the GPU)")
    else:
        import torch
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        matmul_main("hopper_matmul_v4", HopperMatmulV4(blocks=sms),
                    sizes=((301, 520, 200), (128, 256, 64), (1000, 3000, 1024)), b_nk=True)  # c's rows: 16-byte multiples
