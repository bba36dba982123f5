"""reshape_shared (NVIDIA Tilus's name): a shared_tensor allocation read under another row-major
shape; the view shares the allocation's bytes and swizzle, and the barrier / async-wait passes
order accesses through it against accesses of the allocation. Both backends, against numpy."""
import numpy as np
import pytest

import tilus
from tilus import float16, float32

NVRTC = tilus._C.nvrtc_available()


class ReshapeThroughShared(tilus.Script):
    """x [64, 32] f16 lands in a shared tile by cp.async (so it is swizzled: 64-byte rows), is read
    back as [rows, cols] through reshape_shared (and, from a second reshape, as [16, 128]); each
    result is stored. In a loop of `steps` tiles the buffer is rewritten every trip."""

    def __init__(self, rows, cols, steps=1):
        super().__init__()
        self.rows, self.cols, self.steps = rows, cols, steps

    def __call__(self, a: ~float16, y: ~float16, z: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        ga = self.global_view(a, shape=[64 * self.steps, 32])
        gy = self.global_view(y, shape=[self.steps * self.rows, self.cols])
        gz = self.global_view(z, shape=[self.steps * 16, 128])
        s = self.shared_tensor(dtype=float16, shape=[64, 32])
        for i in range(self.steps):
            self.copy_async(src=ga, dst=s, offsets=[i * 64, 0])
            self.copy_async_wait_all()
            r = self.reshape_shared(s, [self.rows, self.cols])
            self.store_global(gy, self.load_shared(r), offsets=[i * self.rows, 0])
            r2 = self.reshape_shared(r, [16, 128])
            self.store_global(gz, self.load_shared(r2).to(float32), offsets=[i * 16, 0])
        self.free_shared(s)


@pytest.mark.parametrize("rows, cols, steps", [(32, 64, 1), (2048, 1, 1), (128, 16, 3), (8, 256, 2)])
def test_reshape_shared(arrays, rows, cols, steps):
    a = (np.arange(64 * 32 * steps) % 2039).astype(np.float16).reshape(64 * steps, 32)
    y = arrays.put(np.zeros((steps * rows, cols), np.float16))
    z = arrays.put(np.zeros((steps * 16, 128), np.float32))
    ReshapeThroughShared(rows, cols, steps)(arrays.put(a), y, z)
    tiles = a.reshape(steps, 64 * 32)
    np.testing.assert_array_equal(arrays.host(y), tiles.reshape(steps * rows, cols))
    np.testing.assert_array_equal(arrays.host(z), tiles.reshape(steps * 16, 128).astype(np.float32))


@pytest.mark.skipif(not NVRTC, reason="NVRTC is not available")
def test_reshape_shared_in_the_ir():
    """The view keeps the allocation's swizzle in its own row-major shape, and a barrier orders
    the cp.async writes of `s` before the reads through the reshape."""
    args = (np.zeros((64, 32), np.float16), np.zeros((32, 64), np.float16), np.zeros((16, 128), np.float32))
    ir = ReshapeThroughShared(32, 64).ir(*args, arch="sm_90a")
    traced = ir["traced"]
    assert "reshape_shared(src=s) : shared float16[32, 64]" in traced, traced
    lines = [ln.strip() for ln in ir["insert_barriers"].splitlines()]
    view = next(ln for ln in lines if "= reshape_shared(src=s)" in ln)
    assert view.endswith("shared float16[32, 64] shared_layout(shape=[32, 64], strides=[64, 1], swizzle=(2, 3, 3))"), view
    alloc = next(ln for ln in lines if ln.startswith("s = shared_tensor("))
    assert "swizzle=(2, 3, 3)" in alloc, alloc
    at = lines.index(view)
    read = next(i for i in range(at, len(lines)) if "load_shared(" in lines[i])
    assert any(ln.startswith("sync()") or "wait" in ln for ln in lines[lines.index(alloc):read]), lines


def _trace(body):
    """Traces a one-warp kernel whose body is `body(script)` (compile-only through the passes when
    NVRTC is present, so that layout-time errors show)."""

    class K(tilus.Script):
        def __call__(self, a: ~float32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            body(self)

    return K().ir(np.zeros(4, np.float32), arch="sm_90a") if NVRTC else tilus.trace(K())


def test_reshape_shared_errors():
    trace = _trace
    with pytest.raises(tilus.CompileError, match=r"reshape_shared: shared float32\[4, 8\] has 32 elements, the shape "
                                                 r"\[5, 6\] has 30"):
        trace(lambda k: k.reshape_shared(k.shared_tensor(dtype=float32, shape=[4, 8]), [5, 6]))
    with pytest.raises(tilus.CompileError, match="is a slice or view of a shared tensor; only a shared_tensor "
                                                 "allocation itself"):
        trace(lambda k: k.reshape_shared(k.shared_tensor(dtype=float32, shape=[4, 8])[1], [2, 4]))
    with pytest.raises(tilus.CompileError, match=r"test_reshape_shared.py:[0-9]+: reshape_shared: tensor: expects a shared tensor, got register"):
        trace(lambda k: k.reshape_shared(k.register_tensor(dtype=float32, shape=[4, 8], init=0.0), [32]))

    def annotated(k):
        s = k.shared_tensor(dtype=float32, shape=[8, 8])
        k.reshape_shared(s, [64])
        k.annotate_layout(s, tilus.SharedLayout.column_major([8, 8]))

    if NVRTC:
        with pytest.raises(tilus.CompileError, match="only a row-major tensor can be reshaped"):
            trace(annotated)


# --- SharedTensor.item_ptr ----------------------------------------------------------------------

class SharedAddresses(tilus.Script):
    """Generic addresses of shared elements (NVIDIA Tilus's SharedTensor.item_ptr()): the byte
    distances from s's first element to s[2] (a row view), s[1, 3] (an element) and the first
    element of a reshape of s are stored as int64."""

    def __call__(self, out: ~tilus.int64):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=tilus.int32, shape=[4, 8])
        p0 = tilus.int64(s.item_ptr())
        ends = [s[2].item_ptr(), s[1, 3].item_ptr(), self.reshape_shared(s, [32]).item_ptr()]
        for i, p in enumerate(ends):
            d = self.register_tensor(dtype=tilus.int64, shape=[1], init=tilus.int64(p) - p0)
            self.store_global(self.global_view(out, shape=[3]), d, offsets=[i])


def test_shared_item_ptr(arrays):
    out = arrays.put(np.full(3, -1, np.int64))
    SharedAddresses()(out)
    assert arrays.host(out).tolist() == [2 * 8 * 4, (8 + 3) * 4, 0]


def test_shared_item_ptr_errors():
    trace = _trace

    with pytest.raises(tilus.CompileError, match=r"item_ptr: the elements of shared int4\[64\] are packed below a byte"):
        trace(lambda k: k.shared_tensor(dtype=tilus.int4, shape=[64]).item_ptr())
    with pytest.raises(tilus.CompileError, match=r"item_ptr\(\): only an element of a global tensor has an address"):
        trace(lambda k: k.shared_tensor(dtype=float32, shape=[4, 8])[0:2, 1].item_ptr())  # a region, not an element
