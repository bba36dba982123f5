"""Conv2d as an implicit GEMM (NHWC, f16, f32 accumulation): out[n, oh, ow, f] =
sum over (kh, kw, c) of img[n, oh*s + kh*d - p, ow*s + kw*d - p, c] * weight[f, kh, kw, c].
Each block computes a [block_m pixels, block_n filters] tile; per k step, c2d_im2col gathers
the [block_m, block_k] tile of the im2col matrix into shared memory (zero outside the image)
and the weights are a [block_n, block_k] tile of weight viewed as [F, kernel * kernel * C].
With c_multiple (the kernel assumes C is a multiple of it; a launch where it is not is refused),
a tile's channels stay in one kernel position when c_multiple is a multiple of block_k, and on
sm_90 c2d_im2col is one TMA load in im2col mode."""
import tilus
from tilus import float16, float32, int32


class Conv2d(tilus.Script):
    def __init__(self, kernel=3, stride=1, dilation=1, pad=1, block_m=64, block_n=64, block_k=32, warps=4,
                 c_multiple=None):
        super().__init__()
        self.kernel, self.stride, self.dilation, self.pad, self.c_multiple = kernel, stride, dilation, pad, c_multiple
        self.block_m, self.block_n, self.block_k, self.warps = block_m, block_n, block_k, warps

    def __call__(self, n: int32, h: int32, w: int32, c: int32, f: int32, img: ~float16, weight: ~float16,
                 out: ~float16):
        ks, s, d, p = self.kernel, self.stride, self.dilation, self.pad
        bm, bn, bk = self.block_m, self.block_n, self.block_k
        if self.c_multiple:
            self.assume(c % self.c_multiple == 0)
        oh = (h + 2 * p - d * (ks - 1) - 1) // s + 1
        ow = (w + 2 * p - d * (ks - 1) - 1) // s + 1
        pixels = n * oh * ow
        depth = ks * ks * c
        self.attrs.blocks = [tilus.cdiv(pixels, bm), tilus.cdiv(f, bn)]
        self.attrs.warps = self.warps
        gimg = self.global_view(img, shape=[n, h, w, c])
        gw = self.global_view(weight, shape=[f, depth])
        col = self.shared_tensor(dtype=float16, shape=[bm, bk])
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        for step in range(tilus.cdiv(depth, bk)):
            self.c2d_im2col(gimg, col, self.blockIdx.x, step, ks, s, d, p)
            wt = self.load_global(gw, offsets=[self.blockIdx.y * bn, step * bk], shape=[bn, bk])
            acc = self.dot(self.load_shared(col), wt.transpose(), acc)
        self.store_global(self.global_view(out, shape=[pixels, f]), acc.to(float16),
                          offsets=[self.blockIdx.x * bm, self.blockIdx.y * bn])


def reference(img, weight, stride, dilation, pad):
    """numpy conv2d, NHWC x [F, KH, KW, C] -> NHWC, in float64."""
    import numpy as np
    x = np.pad(img.astype("float64"), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    f, ks = weight.shape[0], weight.shape[1]
    n, hp, wp, _ = x.shape
    oh = (hp - dilation * (ks - 1) - 1) // stride + 1
    ow = (wp - dilation * (ks - 1) - 1) // stride + 1
    out = np.zeros((n, oh, ow, f))
    for kh in range(ks):
        for kw in range(ks):
            patch = x[:, kh * dilation:kh * dilation + stride * (oh - 1) + 1:stride,
                      kw * dilation:kw * dilation + stride * (ow - 1) + 1:stride, :]
            out += np.einsum("nhwc,fc->nhwf", patch, weight[:, kh, kw, :].astype("float64"))
    return out


def check_conv(name, kernel, n, h, w, c, f, ks, s, d, p):
    """Runs `kernel` on random data and checks it against torch's conv2d (GPU) or `reference`;
    returns the device."""
    from common import arrays, check, to_numpy
    xp, device, img, weight = arrays("float16", (n, h, w, c), (f, ks, ks, c))
    oh = (h + 2 * p - d * (ks - 1) - 1) // s + 1
    ow = (w + 2 * p - d * (ks - 1) - 1) // s + 1
    out = xp.zeros((n, oh, ow, f), dtype=img.dtype) if xp.__name__ == "numpy" else \
        xp.zeros((n, oh, ow, f), dtype=img.dtype, device=device)
    kernel(n, h, w, c, f, img, weight, out)
    if device == "cuda":
        import torch
        want = torch.nn.functional.conv2d(img.permute(0, 3, 1, 2).float(), weight.permute(0, 3, 1, 2).float(),
                                          stride=s, padding=p, dilation=d).permute(0, 2, 3, 1)
    else:
        want = reference(to_numpy(img), to_numpy(weight), s, d, p)
    check(f"{name} {n}x{h}x{w}x{c} -> {f}, kernel {ks} stride {s} dilation {d} pad {p}", out, want, 2e-2, 2e-2)
    return device


def main():
    import os
    from common import arrays, timed
    for (n, h, w, c, f, ks, s, d, p, cm) in ((2, 13, 11, 24, 40, 3, 1, 1, 1, None), (1, 17, 19, 8, 16, 5, 2, 2, 3, None),
                                             (2, 13, 11, 64, 40, 3, 2, 1, 1, 32)):
        device = check_conv("conv2d", Conv2d(ks, s, d, p, c_multiple=cm), n, h, w, c, f, ks, s, d, p)
    if os.environ.get("TILUS_EXAMPLES_QUICK"):
        return
    n, h, w, c, f = (32, 56, 56, 64, 64) if device == "cuda" else (2, 16, 16, 32, 32)
    kernel = Conv2d(3, 1, 1, 1, c_multiple=32)
    xp, device, img, weight = arrays("float16", (n, h, w, c), (f, 3, 3, c))
    out = xp.zeros((n, h, w, f), dtype=img.dtype) if xp.__name__ == "numpy" else \
        xp.zeros((n, h, w, f), dtype=img.dtype, device=device)
    flops = 2 * n * h * w * f * 9 * c
    unit, scale = ("TFLOP/s", 1e9) if device == "cuda" else ("GFLOP/s", 1e6)
    # C % block_k == 0 assumed (TMA im2col on sm_90), and not (SIMT gathers).
    for what, k in (("", kernel), (", no assumption on C", Conv2d(3, 1, 1, 1))):
        ms = timed(lambda: k(n, h, w, c, f, img, weight, out), device)
        print(f"conv2d {n}x{h}x{w}x{c} -> {f} 3x3{what}: {ms:.3f} ms = {flops / ms / scale:.1f} {unit} on {device}")


if __name__ == "__main__":
    main()
