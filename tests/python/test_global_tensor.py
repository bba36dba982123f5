"""global_tensor (memory the runtime provides at every launch), item_ptr and the semaphores
(lock_semaphore / release_semaphore) on both backends: NVIDIA Tilus's split-K over semaphores,
the clean contract, scratch memory, and the errors."""
import numpy as np
import pytest

import tilus
from tilus import float16, float32, int32
from tilus.utils import cdiv


class SplitKMatmul(tilus.Script):
    """c = a @ b with k split over blockIdx.z: block z waits until the tile's semaphore holds z,
    adds what blocks 0..z-1 stored, stores, and hands on to z + 1 (the last back to 0)."""

    def __init__(self, split, bm=32, bn=32, bk=16):
        super().__init__()
        self.split, self.bm, self.bn, self.bk = split, bm, bn, bk

    def __call__(self, m: int32, n: int32, k: int32, a: ~float16, b: ~float16, c: ~float32):
        self.attrs.blocks = [cdiv(m, self.bm), cdiv(n, self.bn), self.split]
        self.attrs.warps = 4
        ga = self.global_view(a, dtype=float16, shape=[m, k])
        gb = self.global_view(b, dtype=float16, shape=[k, n])
        gc = self.global_view(c, dtype=float32, shape=[m, n])
        acc = self.register_tensor(dtype=float32, shape=[self.bm, self.bn], init=0.0)
        per_block = cdiv(cdiv(k, self.split), self.bk) * self.bk
        start = self.blockIdx.z * per_block
        end = min(start + per_block, k)
        om, on = self.blockIdx.x * self.bm, self.blockIdx.y * self.bn
        for ko in self.range(start, end, self.bk):
            ra = self.load_global(ga, offsets=[om, ko], shape=[self.bm, self.bk])
            rb = self.load_global(gb, offsets=[ko, on], shape=[self.bk, self.bn])
            self.dot(ra, rb, acc, out=acc)
        semaphores = self.global_tensor(dtype=int32, shape=[cdiv(m, self.bm), cdiv(n, self.bn)], requires_clean=True)
        semaphore: ~int32 = semaphores[self.blockIdx.x, self.blockIdx.y].item_ptr()
        if self.blockIdx.z > 0:
            self.lock_semaphore(semaphore, value=self.blockIdx.z)
            before = self.load_global(gc, offsets=[om, on], shape=[self.bm, self.bn])
            self.add(acc, before, out=acc)
        self.store_global(gc, acc, offsets=[om, on])
        self.release_semaphore(semaphore, value=(self.blockIdx.z + 1) % self.split)


@pytest.mark.parametrize("split", [1, 3, 8])
def test_split_k_over_semaphores_matches_numpy_and_leaves_them_clean(arrays, split):
    rng = np.random.default_rng(split)
    m, n, k = 77, 45, 301  # ragged in every dim
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    want = a.astype(np.float32) @ b.astype(np.float32)
    kernel = SplitKMatmul(split)
    # Twice: the second launch finds the semaphores where the first left them (all zero).
    for _ in range(2):
        c = arrays.put(np.full((m, n), np.nan, np.float32))
        kernel(m, n, k, arrays.put(a), arrays.put(b), c)
        np.testing.assert_allclose(arrays.host(c), want, rtol=1e-3, atol=1e-3)
    # A bigger problem needs more semaphores: the runtime grows the memory (zeroed).
    m2, n2 = 150, 130
    a2 = rng.standard_normal((m2, k)).astype(np.float16)
    b2 = rng.standard_normal((k, n2)).astype(np.float16)
    c2 = arrays.put(np.zeros((m2, n2), np.float32))
    kernel(m2, n2, k, arrays.put(a2), arrays.put(b2), c2)
    np.testing.assert_allclose(arrays.host(c2), a2.astype(np.float32) @ b2.astype(np.float32), rtol=1e-3, atol=1e-3)


class Scratch(tilus.Script):
    """Each block stages its tile of x, doubled, in an uninitialized global tensor and reads it back
    reversed; two global tensors of different types live side by side."""

    def __call__(self, n: int32, x: ~float32, y: ~float32, tag: ~int32):
        self.attrs.blocks = [cdiv(n, 64)]
        self.attrs.warps = 2
        gx = self.global_view(x, dtype=float32, shape=[n])
        gy = self.global_view(y, dtype=float32, shape=[n])
        stage = self.global_tensor(float32, [cdiv(n, 64), 64], requires_clean=False)
        marks = self.global_tensor(int32, [cdiv(n, 64)], requires_clean=False)
        v = self.load_global(gx, offsets=[self.blockIdx.x * 64], shape=[64])
        self.store_global(stage, self.unsqueeze(v * 2.0, 0), offsets=[self.blockIdx.x, 0])
        self.release_semaphore(marks[self.blockIdx.x].item_ptr(), self.blockIdx.x + 7)
        self.sync()
        back = self.load_global(stage, offsets=[self.blockIdx.x, 0], shape=[1, 64])
        self.store_global(gy, self.squeeze(back, 0), offsets=[self.blockIdx.x * 64])
        self.lock_semaphore(marks[self.blockIdx.x].item_ptr(), self.blockIdx.x + 7)
        gt = self.global_view(tag, dtype=int32, shape=[cdiv(n, 64)])
        self.release_semaphore(gt[self.blockIdx.x].item_ptr(), self.blockIdx.x * 10)


def test_uninitialized_global_tensors_hold_what_the_block_stores(arrays):
    n = 5 * 64 + 9
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    y = arrays.put(np.zeros(n, np.float32))
    tag = arrays.put(np.full(cdiv(n, 64), -1, np.int32))
    Scratch()(n, arrays.put(x), y, tag)
    np.testing.assert_array_equal(arrays.host(y), 2 * x)
    # item_ptr of a kernel argument's element: release_semaphore stored there.
    np.testing.assert_array_equal(arrays.host(tag), np.arange(cdiv(n, 64)) * 10)


def test_the_ir_records_the_global_tensors():
    ir = Scratch().ir(100, np.zeros(100, np.float32), np.zeros(100, np.float32), np.zeros(2, np.int32))
    text = ir["simplify"]
    assert "global_tensor global_tensor_0: float32[(n + 63) / 64, 64]\n" in text, text
    assert "global_tensor global_tensor_1: int32[(n + 63) / 64]\n" in text, text
    assert "release_semaphore(semaphore=" in text and "lock_semaphore(semaphore=" in text, text


class Dirty(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = [2]
        self.attrs.warps = 1
        flags = self.global_tensor(int32, [n], requires_clean=True)
        self.release_semaphore(flags[self.blockIdx.x].item_ptr(), 5)  # never reset to 0


def test_cpu_reports_a_requires_clean_tensor_left_dirty():
    if not tilus.cpu_backend_available():
        pytest.skip("no CPU backend (tilus built without LLVM)")
    with pytest.raises(tilus.CpuCheckError, match=r"test_global_tensor.py:\d+: global_tensor int32\[n\] "
                                                 r"\(requires_clean=True\) is not all zero after the launch \(element 0"):
        Dirty()(4, np.zeros(1, np.int32))


class WaitsForever(tilus.Script):
    def __call__(self, out: ~int32):
        self.attrs.blocks = [3]
        self.attrs.warps = 1
        flags = self.global_tensor(int32, [1], requires_clean=True)
        self.lock_semaphore(flags[0].item_ptr(), 1)  # nobody ever stores 1


def test_cpu_reports_a_lock_nothing_releases_instead_of_hanging():
    if not tilus.cpu_backend_available():
        pytest.skip("no CPU backend (tilus built without LLVM)")
    with pytest.raises(tilus.CpuCheckError, match=r"test_global_tensor.py:\d+: lock_semaphore: block \(\d, 0, 0\) waits "
                                                 r"for the semaphore .* to hold 1, but it holds 0"):
        WaitsForever()(np.zeros(1, np.int32))
