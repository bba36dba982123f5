"""Counter-based random numbers (randint4x / randint / rand / randn, NVIDIA Tilus's and Triton's
Philox-4x32) on both backends against a numpy Philox, and against Triton where it is installed."""
import numpy as np
import pytest

import tilus
from tilus import float32, int64, uint32
from tilus.utils import cdiv

B = 128  # offsets per block


def philox(seed, offsets, n_rounds=10):
    """Philox-4x32: counter (offset, 0, 0, 0), key (low, high 32 bits of seed)."""
    m = np.uint64(0xFFFFFFFF)
    c0 = offsets.astype(np.uint64) & m
    c1, c2, c3 = np.zeros_like(c0), np.zeros_like(c0), np.zeros_like(c0)
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64((seed >> 32) & 0xFFFFFFFF)
    a, b = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    for _ in range(n_rounds):
        p0, p2 = c0, c2
        c0 = (((b * p2) >> np.uint64(32)) ^ c1 ^ k0) & m
        c2 = (((a * p0) >> np.uint64(32)) ^ c3 ^ k1) & m
        c1, c3 = (b * p2) & m, (a * p0) & m
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m, (k1 + np.uint64(0xBB67AE85)) & m
    return [c.astype(np.uint32) for c in (c0, c1, c2, c3)]


def uniform(bits):
    x = bits.view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x)
    return x.astype(np.float32) * np.float32(4.6566127342e-10)


class Random(tilus.Script):
    """out[i, :] for offsets start + arange(n): the four randint4x words, then rand and randn (as
    their bits); the seed is a run-time scalar, or a compile-time constant with `const_seed`."""

    def __init__(self, n_rounds=10, const_seed=None):
        super().__init__()
        self.n_rounds, self.const_seed = n_rounds, const_seed

    def __call__(self, n: int, seed: int64, start: int, out: ~uint32):
        self.attrs.blocks = [cdiv(n, B)]
        self.attrs.warps = 4
        s = seed if self.const_seed is None else self.const_seed
        offset = self.register_tensor(dtype=uint32, shape=[B], init=lambda i: self.blockIdx.x * B + i + start)
        words = self.randint4x(s, offset, n_rounds=self.n_rounds)
        go = self.global_view(out, shape=[7, n])
        at = [0, self.blockIdx.x * B]
        for w, r in enumerate(list(words) + [self.randint(s, offset, self.n_rounds)]):
            self.store_global(go, self.unsqueeze(r, 0), offsets=[w, at[1]])
        self.store_global(go, self.unsqueeze(self.view(self.rand(s, offset, self.n_rounds), dtype=uint32), 0),
                          offsets=[5, at[1]])
        self.store_global(go, self.unsqueeze(self.view(self.randn(s, offset, self.n_rounds), dtype=uint32), 0),
                          offsets=[6, at[1]])


@pytest.mark.parametrize("seed, n_rounds, const", [(12345, 10, False), ((7 << 40) + 99, 7, False), (2**64 - 3, 10, True)])
def test_philox_matches_numpy(arrays, seed, n_rounds, const):
    n, start = 3 * B + 17, 1000
    out = arrays.put(np.zeros((7, n), np.uint32))
    signed = seed - (1 << 64) if seed >= 1 << 63 else seed  # an int64 argument holds the same bits
    Random(n_rounds, seed if const else None)(n, signed, start, out)
    got = arrays.host(out).view(np.uint32)
    offsets = np.arange(n, dtype=np.uint64) + start
    words = philox(seed, offsets, n_rounds)
    for w in range(4):
        np.testing.assert_array_equal(got[w], words[w], err_msg=f"word {w}")
    np.testing.assert_array_equal(got[4], words[0])
    u = got[5].view(np.float32)
    np.testing.assert_array_equal(u, uniform(words[0]))
    assert (u >= 0).all() and (u < 1).all()
    u1 = np.maximum(uniform(words[0]), np.float32(1e-7))
    want_n = np.sqrt(-2 * np.log(u1.astype(np.float64))) * np.cos(2 * np.pi * uniform(words[1]).astype(np.float64))
    np.testing.assert_allclose(got[6].view(np.float32), want_n, rtol=1e-4, atol=1e-4)


def test_philox_agrees_with_triton():
    torch = pytest.importorskip("torch")
    triton = pytest.importorskip("triton")
    import triton.language as tl
    if not __import__("conftest").HAS_GPU:
        pytest.skip("no GPU")

    @triton.jit
    def words(out, seed, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        a, b, c, d = tl.randint4x(seed, i + 1000)
        tl.store(out + i, a, mask=i < n)
        tl.store(out + n + i, b, mask=i < n)
        tl.store(out + 2 * n + i, c, mask=i < n)
        tl.store(out + 3 * n + i, d, mask=i < n)

    n, seed = 3 * B + 17, 12345
    ref = torch.zeros(4 * n, dtype=torch.int32, device="cuda")
    words[(cdiv(n, B),)](ref, seed, n, BLOCK=B)
    out = torch.zeros((7, n), dtype=torch.int32, device="cuda")
    Random()(n, seed, 1000, tilus.view_torch(out, dtype=uint32, shape=[7, n]))  # the int32 storage as uint32
    torch.testing.assert_close(out[:4].flatten().cpu(), ref.cpu(), rtol=0, atol=0)


def test_random_errors():
    class Bad(tilus.Script):
        def __call__(self, out: ~uint32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            self.randint4x(1, self.register_tensor(dtype=uint32, shape=[32], init=0), n_rounds=0)

    with pytest.raises(tilus.CompileError, match=r"test_random.py:\d+: .*randint4x: n_rounds must be a positive"):
        Bad().source(np.zeros(4, np.uint32), arch="sm_90a")
