"""TMA copy (sm_90): y = x for a 2-D float32 tensor, tile by tile through shared memory with
no thread touching the data: one thread issues a TMA load completing on an mbarrier, the
block waits, the same thread issues a TMA store. Rows must be multiples of 16 bytes (TMA's
strides); tiles crossing the edges are zero-filled on load and clipped on store. On the CPU
backend the same kernel runs with the TMA copies as synchronous copies."""
import tilus
from tilus import float32, int32


class TmaCopy(tilus.Script):
    def __init__(self, block_m=32, block_n=256):
        super().__init__()
        self.block_m, self.block_n = block_m, block_n

    def __call__(self, m: int32, n: int32, x: ~float32, y: ~float32):
        bm, bn = self.block_m, self.block_n
        self.attrs.blocks = [tilus.cdiv(n, bn), tilus.cdiv(m, bm)]
        self.attrs.warps = 1
        offsets = [self.blockIdx.y * bm, self.blockIdx.x * bn]
        tile = self.shared_tensor(dtype=float32, shape=[bm, bn])
        bar = self.mbarrier.alloc(counts=[1])
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(bar, transaction_bytes=bm * bn * 4)
            self.tma.global_to_shared(src=self.global_view(x, shape=[m, n]), dst=tile, offsets=offsets, mbarrier=bar)
            self.mbarrier.wait(bar, phase=self.mbarrier.consumer_initial_phase)
            self.tma.shared_to_global(tile, self.global_view(y, shape=[m, n]), offsets=offsets)
            self.tma.commit_group()
            self.tma.wait_group(0, read=True)


def main():
    from common import arrays, check, timed
    kernel = TmaCopy()
    for m, n in ((300, 1000), (4099, 516)):
        xp, device, x = arrays("float32", (m, n))
        y = xp.zeros_like(x)
        kernel(m, n, x, y)
        check(f"tma_copy {m}x{n}", y, x, 0, 0)
    import os
    if os.environ.get("TILUS_EXAMPLES_QUICK"):  # correctness only (sanitizer runs)
        return
    m, n = (8192, 8192) if device == "cuda" else (1024, 1024)
    xp, device, x = arrays("float32", (m, n))
    y = xp.zeros_like(x)
    ms = timed(lambda: kernel(m, n, x, y), device)
    print(f"tma_copy: {2 * m * n * 4 / ms / 1e6:.1f} GB/s on {device} ({ms * 1e3:.1f} us)")


if __name__ == "__main__":
    main()
