"""Register-tensor element indexing (``r[i]`` read as a rank-0 tensor, ``r[i] = v`` and
``r[i] ^= 1`` written), mbarrier waits on a phase kept in a register tensor, Script helper
methods normalized like the body, and annotated declarations in sibling scopes: the forms NVIDIA
Tilus's hopper examples use (issue 17). On the CPU backend (numpy) and the GPU (torch)."""
import numpy as np
import pytest

import tilus
from tilus import float16, int32, uint32


class Toggle(tilus.Script):
    """out[j] = the phases after toggling phases[j % 3] for j = 0..n-1, and the element read back."""

    def __call__(self, n: int32, out: ~int32, got: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        phases = self.register_tensor(dtype=uint32, shape=[3], init=lambda i: i * 10)
        for j in range(n):
            phases[j % 3] ^= 1
        seen = self.register_tensor(dtype=int32, shape=[1], init=0)
        seen[0] = phases[2].to(int32) + phases[n % 3].to(int32) * 100
        self.store_global(self.global_view(out, shape=[3]), phases.to(int32), offsets=[0])
        self.store_global(self.global_view(got, shape=[1]), seen, offsets=[0])


@pytest.mark.parametrize("n", [0, 1, 5, 7])
def test_register_elements_are_read_and_written(arrays, n):
    out = arrays.put(np.zeros(3, np.int32))
    got = arrays.put(np.zeros(1, np.int32))
    Toggle()(n, out, got)
    want = np.array([0, 10, 20], np.int64)
    for j in range(n):
        want[j % 3] ^= 1
    np.testing.assert_array_equal(arrays.host(out), want)
    assert arrays.host(got)[0] == want[2] + want[n % 3] * 100


def test_a_register_index_needs_one_integer_per_dim():
    class Bad(tilus.Script):
        def __call__(self, out: ~int32):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            r = self.register_tensor(dtype=int32, shape=[2, 2], init=0)
            r[0] = 1  # one index for a rank-2 tensor

    with pytest.raises(tilus.CompileError, match=r"test_register_indexing.py:\d+.*one integer index per dim"):
        tilus.trace(Bad())


class PhasedTma(tilus.Script):
    """y = x + 1 through a ring of 2 TMA stages whose waits take their phase from a register
    tensor (Tilus's `mbarrier.wait(bar, phase=phases[stage]); phases[stage] ^= 1`), in a helper
    method with an `if` on a kernel value."""

    def load(self, gx, s, bars, phases, stage, row, rows):
        if row < rows:  # a symbolic branch in a helper method: normalized like the body
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(bars[stage], transaction_bytes=s[stage].nbytes)
                self.tma.global_to_shared(src=gx, dst=s[stage], offsets=[row, 0], mbarrier=bars[stage])
            self.mbarrier.wait(bars[stage], phase=phases[stage])
            phases[stage] ^= 1

    def __call__(self, m: int32, x: ~float16, y: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        gx = self.global_view(x, shape=[m, 64])
        gy = self.global_view(y, shape=[m, 64])
        s = self.shared_tensor(dtype=float16, shape=[2, 16, 64])
        bars = self.mbarrier.alloc(counts=[1, 1])
        phases = self.register_tensor(dtype=uint32, shape=[2], init=0)
        for i in range(tilus.cdiv(m, 16)):
            stage: int32 = i % 2
            self.load(gx, s, bars, phases, stage, i * 16, m)
            self.store_global(gy, self.load_shared(s[stage]) + 1, offsets=[i * 16, 0])
            self.sync()


@pytest.mark.parametrize("m", [16, 53, 130])
def test_a_pipeline_waits_on_phases_kept_in_a_register_tensor(arrays, m):
    h = np.random.default_rng(0).uniform(-4, 4, (m, 64)).astype(np.float16)
    y = arrays.put(np.zeros((m, 64), np.float16))
    PhasedTma()(m, arrays.put(h), y)
    np.testing.assert_array_equal(arrays.host(y), h + np.float16(1))


def test_the_wait_names_its_register_phase_in_the_ir():
    ir = PhasedTma().ir(53, np.zeros((53, 64), np.float16), np.zeros((53, 64), np.float16), arch="sm_90a")
    waits = [ln for ln in ir["traced"].splitlines() if "mbarrier.wait(" in ln]
    assert waits and all("phase=" in w and "phase=floor_mod" not in w for w in waits), waits


class SiblingDeclarations(tilus.Script):
    """The same annotated name declared in two sibling thread groups (Tilus's hopper matmul v3)."""

    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 2
        o = self.global_view(out, shape=[2])
        with self.thread_group(thread_begin=0, num_threads=32):
            k: int32 = 1
            for i in range(n):
                k = k * 2
            with self.single_thread():
                self.store_global(o, self.register_tensor(dtype=int32, shape=[1], init=k), offsets=[0])
        with self.thread_group(thread_begin=32, num_threads=32):
            k: int32 = 3
            for i in range(n):
                k = k + 1
            with self.single_thread():
                self.store_global(o, self.register_tensor(dtype=int32, shape=[1], init=k), offsets=[1])


def test_sibling_scopes_declare_their_own_variables(arrays):
    out = arrays.put(np.zeros(2, np.int32))
    SiblingDeclarations()(4, out)
    np.testing.assert_array_equal(arrays.host(out), [16, 7])
