"""The cost of one call of a one-block kernel on the CPU backend from Python (numpy arrays): the
arguments' checks, the specialization lookup, the launch on the worker threads and the block.

    PYTHONPATH=build/python python3 bench/cpu_call_overhead.py [--calls 2000]

Prints the median and the best of 7 loops of calls, in microseconds per call, of the wall time
and of the process's CPU time (all its threads: less sensitive to a shared machine's load).
"""
import argparse
import time

import numpy as np

import tilus
from tilus import float32, int32


class OneBlock(tilus.Script):
    def __call__(self, n: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        g = self.global_view(x, shape=[n])
        self.store_global(self.global_view(y, shape=[n]), self.load_global(g, offsets=[0], shape=[128]) + 1.0,
                          offsets=[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    calls = ap.parse_args().calls
    x, y = np.arange(128, dtype=np.float32), np.zeros(128, dtype=np.float32)
    k = OneBlock()
    k(128, x, y)
    assert (y == x + 1).all()
    wall, cpu = [], []
    for _ in range(7):
        t, c = time.perf_counter(), time.process_time()
        for _ in range(calls):
            k(128, x, y)
        wall.append((time.perf_counter() - t) / calls * 1e6)
        cpu.append((time.process_time() - c) / calls * 1e6)
    print(f"one-block CPU call: wall median {sorted(wall)[3]:.0f} us, best {min(wall):.0f} us; CPU time median "
          f"{sorted(cpu)[3]:.0f} us, best {min(cpu):.0f} us")


if __name__ == "__main__":
    main()
