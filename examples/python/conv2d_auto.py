"""Conv2d as a plain implicit GEMM (NHWC, f16, f32 accumulation), made fast by the compiler:
out[n, oh, ow, f] = sum over (kh, kw, c) of img[n, oh*s + kh*d - p, ow*s + kw*d - p, c] *
weight[f, kh, kw, c]. Per k step the [block_m, block_k] tile of the im2col matrix and the
[block_n, block_k] tile of the weights (viewed as [F, kernel * kernel * C]) are copied to shared
memory and multiplied, and the k loop says `num_stages`: the pipeline_loops pass makes the ring
(on sm_90 one TMA im2col load and one TMA load per stage on an mbarrier, the dot a wgmma), as
matmul_auto.py. C must be a multiple of block_k (assumed; a launch where it is not is refused),
so that a tile's channels stay in one kernel position and TMA can load it.

The default tile is 256 pixels x 64 filters with two consumer warp groups (8 warps): on the H200
at 32x56x56x64 -> 64, 3x3 (bench/run.py's conv2d rows) it ran at 0.78x cuDNN, 128 x 64 with one
warp group (4 warps) at 0.60x: each k step's wgmma then covers twice the pixels per loaded
weight tile, and the persistent ring's tiles are half as many."""
import tilus
from tilus import float16, float32, int32


class Conv2dAuto(tilus.Script):
    def __init__(self, kernel=3, stride=1, dilation=1, pad=1, block_m=256, block_n=64, block_k=64, warps=8, stages=4,
                 warp_specialize=True, persistent=True):
        super().__init__()
        self.kernel, self.stride, self.dilation, self.pad = kernel, stride, dilation, pad
        self.block_m, self.block_n, self.block_k, self.warps, self.stages = block_m, block_n, block_k, warps, stages
        self.warp_specialize, self.persistent = warp_specialize, persistent

    def __call__(self, n: int32, h: int32, w: int32, c: int32, f: int32, img: ~float16, weight: ~float16,
                 out: ~float16):
        ks, s, d, p = self.kernel, self.stride, self.dilation, self.pad
        bm, bn, bk = self.block_m, self.block_n, self.block_k
        self.assume(c % bk == 0)
        oh = (h + 2 * p - d * (ks - 1) - 1) // s + 1
        ow = (w + 2 * p - d * (ks - 1) - 1) // s + 1
        pixels, depth = n * oh * ow, ks * ks * c
        self.attrs.blocks = [tilus.cdiv(pixels, bm), tilus.cdiv(f, bn)]
        self.attrs.warps = self.warps
        gimg = self.global_view(img, shape=[n, h, w, c])
        gw = self.global_view(weight, shape=[f, depth])
        col = self.shared_tensor(dtype=float16, shape=[bm, bk])
        wt = self.shared_tensor(dtype=float16, shape=[bn, bk])
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        for step in self.range(tilus.cdiv(depth, bk), num_stages=self.stages, warp_specialize=self.warp_specialize,
                               persistent=self.persistent):
            self.c2d_im2col(gimg, col, self.blockIdx.x, step, ks, s, d, p)
            self.copy(gw[self.blockIdx.y * bn, step * bk], wt)
            acc = self.dot(self.load_shared(col), self.load_shared(wt.transpose()), acc)
        self.store_global(self.global_view(out, shape=[pixels, f]), acc.to(float16),
                          offsets=[self.blockIdx.x * bm, self.blockIdx.y * bn])


def main():
    import os
    from conv2d import check_conv
    from common import arrays, timed
    for (n, h, w, c, f, ks, s, d, p) in ((2, 13, 11, 64, 40, 3, 1, 1, 1), (1, 17, 19, 128, 72, 5, 2, 2, 3)):
        device = check_conv("conv2d_auto", Conv2dAuto(ks, s, d, p), n, h, w, c, f, ks, s, d, p)
    if os.environ.get("TILUS_EXAMPLES_QUICK"):
        return
    n, h, w, c, f = (32, 56, 56, 64, 64) if device == "cuda" else (2, 16, 16, 64, 64)
    xp, device, img, weight = arrays("float16", (n, h, w, c), (f, 3, 3, c))
    out = xp.zeros((n, h, w, f), dtype=img.dtype) if xp.__name__ == "numpy" else \
        xp.zeros((n, h, w, f), dtype=img.dtype, device=device)
    kernel = Conv2dAuto()
    ms = timed(lambda: kernel(n, h, w, c, f, img, weight, out), device)
    unit, scale = ("TFLOP/s", 1e9) if device == "cuda" else ("GFLOP/s", 1e6)
    print(f"conv2d_auto {n}x{h}x{w}x{c} -> {f} 3x3: {ms:.3f} ms = {2 * n * h * w * f * 9 * c / ms / scale:.1f} {unit} "
          f"on {device}")


if __name__ == "__main__":
    main()
