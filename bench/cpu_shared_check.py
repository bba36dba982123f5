"""The CPU backend's check of shared tiles at run-time offsets (docs/cpu.md, "Checked mode"), in
every mode: what it costs. A loop of shared-tile loads at an offset the facts cannot bound
(checked before each load) against the same loop at an offset they can (`j & 1`: no check), on
the CPU backend, in process CPU time (best of 5), for tiles of 16 and 256 elements.

    PYTHONPATH=build/python python3 bench/cpu_shared_check.py
"""
import time

import numpy as np

import tilus
from tilus import float32, int32


class Loads(tilus.Script):
    def __init__(self, width, proven):
        super().__init__()
        self.width, self.proven = width, proven

    def __call__(self, steps: int32, start: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [64]
        self.attrs.warps = 4
        w = self.width
        s = self.shared_tensor(dtype=float32, shape=[2, w])
        self.store_shared(s, self.load_global(self.global_view(x, shape=[2, w]), offsets=[0, 0], shape=[2, w]))
        acc = self.register_tensor(dtype=float32, shape=[w], init=0.0)
        j = self.declare("j", int32, start)
        for i in range(steps):
            j = j ^ 1  # alternates; the facts do not know its range (start is a parameter)
            acc = acc + self.load_shared(s[j & 1] if self.proven else s[j])
        self.store_global(self.global_view(y, shape=[w]), acc, offsets=[0])


def cpu_ms(k, x, y, steps=2000):
    k(steps, 0, x, y)
    best = None
    for _ in range(5):
        t = time.process_time()
        for _ in range(5):
            k(steps, 0, x, y)
        v = (time.process_time() - t) / 5 * 1e3
        best = v if best is None else min(best, v)
    return best


if __name__ == "__main__":
    for w in (16, 256):
        x, y = np.arange(2 * w, dtype=np.float32), np.zeros(w, np.float32)
        checks = [tilus._C.compile_cpu(tilus.trace(Loads(w, p))).llvm_ir.count("%bad_index") for p in (False, True)]
        assert checks[0] > 0 and checks[1] == 0, checks
        unproven, proven = cpu_ms(Loads(w, False), x, y), cpu_ms(Loads(w, True), x, y)
        print(f"{w:4d}-element tiles, 64 blocks x 2000 loads: checked {unproven:.2f} ms, unchecked {proven:.2f} ms "
              f"(+{(unproven / proven - 1) * 100:.0f} %)")
