"""A tilus kernel as a torch custom op (tilus.torch.custom_op) inside torch.compile and CUDA
graphs, against the same model with the equivalent torch op, in one run:

- torch.compile(fullgraph=True) of a small model calling the op: graphs and graph breaks
  (torch._dynamo.explain), and the result against eager torch;
- one CUDA graph of 20 calls of the op (captured with torch.cuda.graph), replayed: microseconds
  per replay, beside the same graph made of the torch op (torch.add(x, y, alpha=)).

    PYTHONPATH=build/python python bench/torch_op.py [--n 1048576] [--replays 200]
"""
import argparse
import time

import torch

import tilus
import tilus.torch
from tilus import float32, int32


class Axpy(tilus.Script):
    """z = x + alpha * y"""

    def __call__(self, n: int32, alpha: float32, x: ~float32, y: ~float32, z: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 1024)]
        self.attrs.warps = 4
        o = self.blockIdx.x * 1024
        a = self.load_global(self.global_view(x, shape=[n]), offsets=[o], shape=[1024])
        b = self.load_global(self.global_view(y, shape=[n]), offsets=[o], shape=[1024])
        self.store_global(self.global_view(z, shape=[n]), a + b * alpha, offsets=[o])


@tilus.torch.custom_op("tilus_bench::axpy", mutates_args=())
def axpy(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    z = torch.empty_like(x)
    Axpy()(x.numel(), alpha, x, y, z)
    return z


def chain(op, x, y, steps=20):
    for i in range(steps):
        x = op(x, y, 0.5 + i * 0.01)
    return x


def tilus_op(x, y, alpha):
    return axpy(x, y, alpha)


def torch_op(x, y, alpha):
    return torch.add(x, y, alpha=alpha)


def model(x, y):
    return torch.relu(chain(tilus_op, x, y, 4)).sum()


def replay_us(op, x, y, replays):
    for _ in range(2):
        chain(op, x, y)  # compile, warm up, register the fast path
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = chain(op, x, y)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, chain(torch_op, x, y), rtol=1e-5, atol=1e-5)
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(replays):
            g.replay()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / replays * 1e6)
    return sorted(times)[2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1 << 20)
    p.add_argument("--replays", type=int, default=200)
    args = p.parse_args()
    x = torch.randn(args.n, device="cuda")
    y = torch.randn(args.n, device="cuda")
    explained = torch._dynamo.explain(model)(x, y)
    compiled = torch.compile(model, fullgraph=True)
    got, want = compiled(x, y), torch.relu(chain(torch_op, x, y, 4)).sum()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-2)
    print(f"torch.compile(fullgraph=True) of a model calling the tilus op: {explained.graph_count} graph, "
          f"{explained.graph_break_count} graph breaks; result matches eager torch")
    t_tilus = replay_us(tilus_op, x, y, args.replays)
    t_torch = replay_us(torch_op, x, y, args.replays)
    print(f"CUDA graph of 20 calls, n = {args.n}, {torch.cuda.get_device_name()}, us per replay:")
    print(f"  tilus op (tilus.torch.custom_op) {t_tilus:9.2f}")
    print(f"  torch.add(x, y, alpha=)          {t_torch:9.2f}")
    print(f"  ratio {t_tilus / t_torch:.3f}x (goal <= 1.1)")


if __name__ == "__main__":
    main()
