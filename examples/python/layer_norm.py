"""Layer norm over the last dim: y = (x - mean) / sqrt(var + eps) * weight + bias, for rows of
x[m, n] with n <= block_n; statistics in float32. Columns past n read as 0 and are excluded
from the variance by a mask."""
import tilus
from tilus import float32, int32


class LayerNorm(tilus.Script):
    def __init__(self, block_m=4, block_n=1024, warps=4, eps=1e-5):
        super().__init__()
        self.block_m, self.block_n, self.warps, self.eps = block_m, block_n, warps, eps

    def __call__(self, m: int32, n: int32, x: ~float32, weight: ~float32, bias: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(m, self.block_m)]
        self.attrs.warps = self.warps
        offset_m = self.blockIdx.x * self.block_m
        gx = self.global_view(x, shape=[m, n])
        gy = self.global_view(y, shape=[m, n])
        rows = self.load_global(gx, offsets=[offset_m, 0], shape=[self.block_m, self.block_n])
        w = self.load_global(self.global_view(weight, shape=[n]), offsets=[0], shape=[self.block_n])
        b = self.load_global(self.global_view(bias, shape=[n]), offsets=[0], shape=[self.block_n])
        count = tilus.cast(n, float32)
        mean = self.sum(rows, dim=1, keepdim=True) / count
        cols = self.register_tensor(dtype=int32, shape=[self.block_m, self.block_n], init=lambda i, j: j)
        centered = self.where(cols < n, rows - mean, 0.0)
        var = self.sum(centered * centered, dim=1, keepdim=True) / count
        self.store_global(gy, centered * self.rsqrt(var + self.eps) * w + b, offsets=[offset_m, 0])


def main():
    import numpy as np
    from common import arrays, check, timed, to_numpy
    m, n = 45, 771
    xp, device, x, w, b = arrays("float32", (m, n), (n,), (n,), scale=3.0)
    y = xp.empty_like(x)
    kernel = LayerNorm()
    kernel(m, n, x, w, b, y)
    h = to_numpy(x)
    mu = h.mean(axis=1, keepdims=True)
    var = ((h - mu) ** 2).mean(axis=1, keepdims=True)
    check("layer_norm", y, (h - mu) / np.sqrt(var + 1e-5) * to_numpy(w) + to_numpy(b), 1e-4, 1e-4)
    ms = timed(lambda: kernel(m, n, x, w, b, y), device)
    print(f"layer_norm {m}x{n}: {ms * 1e3:.1f} us on {device}")


if __name__ == "__main__":
    main()
