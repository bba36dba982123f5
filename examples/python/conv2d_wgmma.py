"""Conv2d as an implicit GEMM on the H100's data movers and tensor cores (NHWC, f16, f32
accumulation): out[n, oh, ow, f] = sum over (kh, kw, c) of img[n, oh*s + kh*d - p, ow*s + kw*d - p, c]
* weight[f, kh, kw, c]. As hopper_matmul_v1, a ring of `stages` shared buffers is filled ahead of
the wgmma that read them: per k step, a split-phase c2d_im2col (one TMA load in im2col mode) brings
the [block_m, block_k] tile of the im2col matrix and a tma_copy the [block_n, block_k] tile of the
weights viewed as [F, kernel * kernel * C], both completing on the stage's mbarrier. C must be a
multiple of block_k (the kernel assumes it, and a launch where it is not is refused), so that a
tile's channels stay in one kernel position; sm_90a. Conv2dWgmmaPersistent below is the same
conv made persistent and warp-specialized, as hopper_matmul_v3."""
import tilus
from tilus import float16, float32, int32


class Conv2dWgmma(tilus.Script):
    def __init__(self, kernel=3, stride=1, dilation=1, pad=1, block_m=128, block_n=64, block_k=64, stages=4):
        super().__init__()
        self.kernel, self.stride, self.dilation, self.pad = kernel, stride, dilation, pad
        self.block_m, self.block_n, self.block_k, self.stages = block_m, block_n, block_k, stages

    def __call__(self, n: int32, h: int32, w: int32, c: int32, f: int32, img: ~float16, weight: ~float16,
                 out: ~float16):
        ks, s, d, p = self.kernel, self.stride, self.dilation, self.pad
        bm, bn, bk, stages = self.block_m, self.block_n, self.block_k, self.stages
        self.assume(c % bk == 0)
        oh = (h + 2 * p - d * (ks - 1) - 1) // s + 1
        ow = (w + 2 * p - d * (ks - 1) - 1) // s + 1
        pixels = n * oh * ow
        depth = ks * ks * c
        self.attrs.blocks = [tilus.cdiv(pixels, bm), tilus.cdiv(f, bn)]
        self.attrs.warps = 4  # one warp group
        offset_n = self.blockIdx.y * bn
        gimg = self.global_view(img, shape=[n, h, w, c])
        gw = self.global_view(weight, shape=[f, depth])
        col = self.shared_tensor(dtype=float16, shape=[stages, bm, bk])
        wt = self.shared_tensor(dtype=float16, shape=[stages, bn, bk])
        loaded = self.mbarrier.alloc(counts=[2] * stages)  # the im2col load and the weight load
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        steps = tilus.cdiv(depth, bk)
        for st in tilus.static_range(stages - 1):  # the prologue: stages - 1 steps in flight
            with self.single_thread():
                self.c2d_im2col(gimg, col[st], self.blockIdx.x, st, ks, s, d, p, barrier=loaded[st])
                self.tma_copy(gw[offset_n:offset_n + bn, st * bk:(st + 1) * bk], wt[st], barrier=loaded[st])
        for step in range(steps):
            stage = step % stages
            self.mbarrier.wait(loaded[stage], phase=step // stages % 2)
            self.wgmma.fence()
            self.wgmma.mma(col[stage], wt[stage].transpose(), acc)
            self.wgmma.commit_group()
            # The previous step's group has retired: its stage is the one refilled next.
            self.wgmma.wait_group(1)
            nxt = step + stages - 1
            with self.single_thread():
                # Steps past the matrix load zeros (and complete all the same).
                self.c2d_im2col(gimg, col[nxt % stages], self.blockIdx.x, nxt, ks, s, d, p, barrier=loaded[nxt % stages])
                self.tma_copy(gw[offset_n:offset_n + bn, nxt * bk:(nxt + 1) * bk], wt[nxt % stages],
                              barrier=loaded[nxt % stages])
        self.wgmma.wait_group(0)
        for st in tilus.static_range(stages - 1):  # the loads past the last step land before the exit
            self.mbarrier.wait(loaded[(steps + st) % stages], phase=(steps + st) // stages % 2)
        self.store_global(self.global_view(out, shape=[pixels, f]), acc.to(float16),
                          offsets=[self.blockIdx.x * bm, offset_n])


class Conv2dWgmmaPersistent(tilus.Script):
    """Conv2dWgmma made warp-specialized and persistent, as hopper_matmul_v3: one block per SM
    walks the output tiles blockIdx.x, blockIdx.x + blocks, ...; a producer warp fills the ring
    (one split-phase c2d_im2col and one tma_copy per k step, both completing on the stage's
    `full` barrier) and runs ahead across tiles, so the next tile's loads overlap this tile's
    last steps and epilogue; two consumer warp groups split each tile's rows, and release a stage
    (`empty`) once their wgmma that read it retired. A conv's k loop is short (kernel * kernel * C
    / block_k steps: 9 for a 3x3 over 64 channels), which makes the pipeline's fill, paid once per
    tile by Conv2dWgmma, matter. Runs on the GPU only (its thread groups wait on each other)."""

    def __init__(self, kernel=3, stride=1, dilation=1, pad=1, block_m=256, block_n=64, block_k=64, stages=4,
                 blocks=132):
        super().__init__()
        self.kernel, self.stride, self.dilation, self.pad = kernel, stride, dilation, pad
        self.block_m, self.block_n, self.block_k, self.stages, self.blocks = block_m, block_n, block_k, stages, blocks

    def release(self, barrier):
        """One arrival per consumer warp group, by its first thread."""
        for wg in tilus.static_range(2):
            with self.thread_group(thread_begin=wg * 128, num_threads=1):
                self.mbarrier.arrive(barrier)

    def __call__(self, n: int32, h: int32, w: int32, c: int32, f: int32, img: ~float16, weight: ~float16,
                 out: ~float16):
        ks, s, d, p = self.kernel, self.stride, self.dilation, self.pad
        bm, bn, bk, stages, blocks = self.block_m, self.block_n, self.block_k, self.stages, self.blocks
        self.assume(c % bk == 0)
        oh = (h + 2 * p - d * (ks - 1) - 1) // s + 1
        ow = (w + 2 * p - d * (ks - 1) - 1) // s + 1
        pixels = n * oh * ow
        depth = ks * ks * c
        self.attrs.blocks = [blocks]
        self.attrs.warps = 9  # two consumer warp groups and the producer warp
        tiles_m, tiles_n = tilus.cdiv(pixels, bm), tilus.cdiv(f, bn)
        tiles = tiles_m * tiles_n
        steps = tilus.cdiv(depth, bk)
        gimg = self.global_view(img, shape=[n, h, w, c])
        gw = self.global_view(weight, shape=[f, depth])
        gout = self.global_view(out, shape=[pixels, f])
        col = self.shared_tensor(dtype=float16, shape=[stages, bm, bk])
        wt = self.shared_tensor(dtype=float16, shape=[stages, bn, bk])
        full = self.mbarrier.alloc(counts=[2] * stages)  # the im2col load and the weight load
        empty = self.mbarrier.alloc(counts=[2] * stages)  # one arrival per consumer warp group
        with self.thread_group(thread_begin=256, num_threads=32):  # the producer warp
            for t in range(self.blockIdx.x, tiles, blocks):
                tile_m, offset_n = t % tiles_m, t // tiles_m * bn
                first = (t - self.blockIdx.x) // blocks * steps  # the block's steps before this tile
                for step in range(steps):
                    g = first + step
                    stage = g % stages
                    self.mbarrier.wait(empty[stage], phase=g // stages % 2 ^ 1)
                    with self.single_thread():
                        self.c2d_im2col(gimg, col[stage], tile_m, step, ks, s, d, p, barrier=full[stage])
                        self.tma_copy(gw[offset_n:offset_n + bn, step * bk:(step + 1) * bk], wt[stage],
                                      barrier=full[stage])
        with self.thread_group(thread_begin=0, num_threads=256):  # the consumer warp groups
            for t in range(self.blockIdx.x, tiles, blocks):
                tile_m, offset_n = t % tiles_m, t // tiles_m * bn
                first = (t - self.blockIdx.x) // blocks * steps
                acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
                for step in range(steps):
                    g = first + step
                    stage = g % stages
                    self.mbarrier.wait(full[stage], phase=g // stages % 2)
                    self.wgmma.fence()
                    self.wgmma.mma(col[stage], wt[stage].transpose(), acc)
                    self.wgmma.commit_group()
                    self.wgmma.wait_group(1)  # the previous step's wgmma retired: release its stage
                    if step > 0:
                        self.release(empty[(g + stages - 1) % stages])
                self.wgmma.wait_group(0)
                self.release(empty[(first + steps - 1) % stages])
                self.store_global(gout, acc.to(float16), offsets=[tile_m * bm, offset_n])


def main():
    from conv2d import check_conv
    from common import on_gpu
    for (n, h, w, c, f, ks, s, d, p) in ((2, 13, 11, 64, 40, 3, 1, 1, 1), (1, 17, 19, 128, 72, 5, 2, 2, 3)):
        check_conv("conv2d_wgmma", Conv2dWgmma(ks, s, d, p), n, h, w, c, f, ks, s, d, p)
        if on_gpu():
            check_conv("conv2d_wgmma (persistent)", Conv2dWgmmaPersistent(ks, s, d, p, blocks=8), n, h, w, c, f,
                       ks, s, d, p)


if __name__ == "__main__":
    main()
