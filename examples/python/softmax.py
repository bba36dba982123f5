"""Row softmax: each block normalizes `block_m` rows of x[m, n] (n <= block_n) in registers.
Columns past n read as 0 (bounds predicates) and are masked to -inf before the max."""
import tilus
from tilus import float32, int32


class Softmax(tilus.Script):
    def __init__(self, block_m=4, block_n=1024, warps=4):
        super().__init__()
        self.block_m, self.block_n, self.warps = block_m, block_n, warps

    def __call__(self, m: int32, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(m, self.block_m)]
        self.attrs.warps = self.warps
        offset_m = self.blockIdx.x * self.block_m
        gx = self.global_view(x, shape=[m, n])
        gy = self.global_view(y, shape=[m, n])
        rows = self.load_global(gx, offsets=[offset_m, 0], shape=[self.block_m, self.block_n])
        cols = self.register_tensor(dtype=int32, shape=[self.block_m, self.block_n], init=lambda i, j: j)
        masked = self.where(cols < n, rows, -float("inf"))
        e = self.exp(masked - self.max(masked, dim=1, keepdim=True))
        self.store_global(gy, e / self.sum(e, dim=1, keepdim=True), offsets=[offset_m, 0])


def main():
    import numpy as np
    from common import arrays, check, timed, to_numpy
    m, n = 37, 1000
    xp, device, x = arrays("float32", (m, n), scale=4.0)
    y = xp.empty_like(x)
    kernel = Softmax()
    kernel(m, n, x, y)
    h = to_numpy(x)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    check("softmax", y, e / e.sum(axis=1, keepdims=True), 1e-6, 1e-4)
    ms = timed(lambda: kernel(m, n, x, y), device)
    print(f"softmax {m}x{n}: {ms * 1e3:.1f} us on {device}")


if __name__ == "__main__":
    main()
