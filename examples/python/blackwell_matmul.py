"""Blackwell matmul (sm_100a): c = a @ b.T with a [m, k], b [n, k] float16, accumulated in float32 in
tensor memory by tcgen05.mma. No Blackwell GPU is needed to see it work: it compiles for sm_100a
with NVRTC (Script.sass shows its UTCHMMA) and runs on the CPU backend.

A persistent, warp-specialized kernel of three roles that meet only through mbarriers:

- the loader (warp 0) fills a ring of `stages` shared buffers with TMA, each stage completing on its
  `loaded` barrier, and, after each tile, asks cluster launch control for the next one: clc.try_cancel
  takes a block of the grid that has not started (it never will) and the loader publishes its index;
- the MMA warp (warp 1) multiplies each stage into one of two accumulators in tensor memory
  (tcgen05.mma), hands the stage back to the loader (tcgen05.commit on `freed`) and, once a tile's
  k loop is issued, the accumulator to the epilogue (`ready`);
- the epilogue (warps 4-7, a warp group: one thread per lane of tensor memory) reads an accumulator
  into registers (tcgen05.load), returns it to the MMA warp (`drained`) and stores the tile, so that
  the next tile's products run while this one is written.

Every role reads the next tile's index from the shared response after `published` completes and
arrives on `consumed`; a block stops when no block of the grid is left to take over."""
import tilus
from tilus import float16, float32, int32, uint32


class BlackwellMatmul(tilus.Script):
    def __init__(self, block_m=128, block_n=128, block_k=64, stages=4):
        super().__init__()
        self.block_m, self.block_n, self.block_k, self.stages = block_m, block_n, block_k, stages

    def tile_offsets(self, tile, tiles_m):
        """The first row and column of c of a tile index (tiles along m first)."""
        return tile % tiles_m * self.block_m, tile // tiles_m * self.block_n

    def next_tile(self, response, published, consumed, phase):
        """The index of the next tile of this block (and whether there is one) from the response the
        loader published: every thread of the role reads it, then hands the slot back."""
        self.mbarrier.wait(published, phase=phase)
        more, block = self.clc.query_response(response)
        self.mbarrier.arrive(consumed)
        return more, block.x

    def __call__(self, m: int32, n: int32, k: int32, a: ~float16, b: ~float16, c: ~float16):
        bm, bn, bk, stages = self.block_m, self.block_n, self.block_k, self.stages
        tiles_m = tilus.cdiv(m, bm)
        self.attrs.blocks = [tiles_m * tilus.cdiv(n, bn)]
        self.attrs.warps = 8
        steps = tilus.cdiv(k, bk)
        ga = self.global_view(a, shape=[m, k])
        gb = self.global_view(b, shape=[n, k])
        gc = self.global_view(c, shape=[m, n])
        sa = self.shared_tensor(dtype=float16, shape=[stages, bm, bk])
        sb = self.shared_tensor(dtype=float16, shape=[stages, bn, bk])
        response = self.shared_tensor(dtype=int32, shape=[4])
        # Two accumulators [bm, bn] side by side in tensor memory: acc[:, j, :].
        acc = self.tcgen05.alloc(dtype=float32, shape=[bm, 2, bn])
        loaded = self.mbarrier.alloc(counts=[1] * stages)  # the loader's expectation; TMA's bytes
        freed = self.mbarrier.alloc(counts=[1] * stages)  # the MMA warp's commit
        ready = self.mbarrier.alloc(counts=[1, 1])  # the MMA warp's commit of a whole tile
        drained = self.mbarrier.alloc(counts=[128, 128])  # every epilogue thread
        published = self.mbarrier.alloc(counts=1)  # the loader's expectation; the response's 16 bytes
        consumed = self.mbarrier.alloc(counts=32 + 32 + 128)  # every thread of the three roles
        tile_bytes = (bm + bn) * bk * 2
        self.sync()

        with self.single_warp(0):  # the loader
            tile: int32 = self.blockIdx.x
            stage: int32 = 0
            free_phase: uint32 = 1  # a stage starts free
            next_phase: uint32 = 0
            slot_phase: uint32 = 1  # the response slot starts free
            while True:
                om, on = self.tile_offsets(tile, tiles_m)
                for step in range(steps):
                    self.mbarrier.wait(freed[stage], phase=free_phase)
                    with self.single_thread():
                        self.mbarrier.arrive_and_expect_tx(loaded[stage], transaction_bytes=tile_bytes)
                    self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[om, step * bk], mbarrier=loaded[stage])
                    self.tma.global_to_shared(src=gb, dst=sb[stage], offsets=[on, step * bk], mbarrier=loaded[stage])
                    stage = (stage + 1) % stages
                    free_phase = free_phase ^ (stage == 0)
                # The next tile: a block of the grid that has not started, if any is left.
                self.mbarrier.wait(consumed, phase=slot_phase)
                slot_phase = slot_phase ^ 1
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(published, transaction_bytes=16)
                self.clc.try_cancel(response, mbarrier=published)
                more, tile = self.next_tile(response, published, consumed, next_phase)
                next_phase = next_phase ^ 1
                if not more:
                    break

        with self.single_warp(1):  # the MMA warp
            stage: int32 = 0
            load_phase: uint32 = 0
            j: int32 = 0  # the accumulator of this tile
            empty_phase: uint32 = 1  # both start drained
            next_phase: uint32 = 0
            while True:
                self.mbarrier.wait(drained[j], phase=empty_phase)
                for step in range(steps):
                    self.mbarrier.wait(loaded[stage], phase=load_phase)
                    self.tcgen05.mma(sa[stage], sb[stage].transpose(), acc[:, j, :], enable_input_d=step != 0)
                    self.tcgen05.commit(mbarrier=freed[stage])
                    stage = (stage + 1) % stages
                    load_phase = load_phase ^ (stage == 0)
                self.tcgen05.commit(mbarrier=ready[j])
                j = j ^ 1
                empty_phase = empty_phase ^ (j == 0)
                more = self.next_tile(response, published, consumed, next_phase)[0]
                next_phase = next_phase ^ 1
                if not more:
                    break

        with self.warp_group(warp_begin=4, num_warps=4):  # the epilogue
            tile: int32 = self.blockIdx.x
            j: int32 = 0
            full_phase: uint32 = 0
            next_phase: uint32 = 0
            while True:
                self.mbarrier.wait(ready[j], phase=full_phase)
                r = self.tcgen05.load(acc[:, j, :])
                self.tcgen05.wait_load()
                self.mbarrier.arrive(drained[j])
                j = j ^ 1
                full_phase = full_phase ^ (j == 0)
                om, on = self.tile_offsets(tile, tiles_m)
                self.store_global(gc, r.to(float16), offsets=[om, on])
                more, tile = self.next_tile(response, published, consumed, next_phase)
                next_phase = next_phase ^ 1
                if not more:
                    break

        self.sync()
        self.tcgen05.dealloc(acc)


def reference(a, b):
    """c = a @ b.T in float64."""
    return a.astype("float64") @ b.astype("float64").T


if __name__ == "__main__":
    import numpy as np

    kernel = BlackwellMatmul()
    rng = np.random.default_rng(0)
    for m, n, k in ((301, 517, 200), (128, 128, 64), (64, 300, 72)):
        a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
        b = rng.uniform(-1, 1, (n, k)).astype(np.float16)
        c = np.zeros((m, n), np.float16)
        kernel(m, n, k, a, b, c)  # host arrays: the CPU backend
        err = np.abs(c.astype(np.float64) - reference(a, b)).max()
        print(f"blackwell_matmul {m}x{n}x{k} on the CPU backend: max |error| {err:.4f}")
        assert err < 3e-2, err
    if tilus._C.nvrtc_available():
        sass = kernel.sass(4096, 4096, 4096, a, b, c, arch="sm_100a") if tilus.artifacts._cuobjdump() else ""
        ptx = kernel.ptx(4096, 4096, 4096, a, b, c, arch="sm_100a")
        print("sm_100a PTX: tcgen05.mma" if "tcgen05.mma" in ptx else "sm_100a PTX without tcgen05.mma?")
        if sass:
            print("sm_100a SASS: UTCHMMA" if "UTCHMMA" in sass else "sm_100a SASS without UTCHMMA?")
