"""A data-parallel training step whose model uses a tilus op, on several GPUs (torchrun, NCCL),
against the same step with the equivalent torch op (issue 41). Not a pytest file: run it with

    TILUS_CACHE_DIR=$(mktemp -d) PYTHONPATH=build/python torchrun --nproc_per_node 2 tests/python/dist_tilus_op.py

Each rank sees one GPU (tilus launches on the process's device 0: CUDA_VISIBLE_DEVICES is set
from LOCAL_RANK before torch starts). It checks that both steps give every rank the same
parameters and the same as the torch step, and that the ranks compiled the tilus kernel once
between them (a fresh TILUS_CACHE_DIR: one rank compiles, the others wait on the entry's lock
and load it). Rank 0 prints one line per check and exits non-zero when one fails.
"""
import os
import sys

os.environ.setdefault("CUDA_VISIBLE_DEVICES", os.environ.get("LOCAL_RANK", "0"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import tilus  # noqa: E402
import tilus.torch  # noqa: E402
from tilus import float32, int32  # noqa: E402
from tilus import launch as tilus_launch  # noqa: E402


class ScaleShift(tilus.Script):
    """y = x * alpha + beta, elementwise."""

    def __call__(self, n: int32, alpha: float32, beta: float32, x: ~float32, y: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 512)]
        self.attrs.warps = 4
        o = self.blockIdx.x * 512
        v = self.load_global(self.global_view(x, shape=[n]), offsets=[o], shape=[512])
        self.store_global(self.global_view(y, shape=[n]), v * alpha + beta, offsets=[o])


@tilus.torch.custom_op("tilus_dist::scale_shift", mutates_args=())
def scale_shift(x: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    y = torch.empty_like(x)
    ScaleShift()(x.numel(), alpha, beta, x.contiguous(), y)
    return y


def _setup(ctx, inputs, output):
    ctx.alpha = inputs[1]


def _backward(ctx, grad):
    return scale_shift(grad.contiguous(), ctx.alpha, 0.0), None, None


scale_shift.register_autograd(_backward, setup_context=_setup)


class Model(torch.nn.Module):
    def __init__(self, use_tilus):
        super().__init__()
        self.use_tilus = use_tilus
        self.a = torch.nn.Linear(256, 512)
        self.b = torch.nn.Linear(512, 16)

    def forward(self, x):
        h = self.a(x)
        h = scale_shift(h, 1.5, 0.25) if self.use_tilus else h * 1.5 + 0.25
        return self.b(torch.relu(h))


def step(use_tilus, rank):
    torch.manual_seed(0)
    model = Model(use_tilus).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator(device="cuda").manual_seed(100 + rank)
    x = torch.randn(64, 256, device="cuda", generator=g)
    target = torch.randn(64, 16, device="cuda", generator=g)
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), target)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return [p.detach().clone() for p in model.parameters()]


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    with_tilus = step(True, rank)
    with_torch = step(False, rank)
    ok = True

    def check(name, cond):
        nonlocal ok
        flag = torch.tensor([1 if cond else 0], device="cuda")
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        ok = ok and bool(flag.item())
        if rank == 0:
            print(f"{'ok  ' if flag.item() else 'FAIL'} {name}", flush=True)

    check("the tilus step matches the torch step on every rank",
          all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(with_tilus, with_torch)))
    flat = torch.cat([p.reshape(-1) for p in with_tilus])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    check("every rank holds the same parameters after the tilus step",
          all(torch.equal(gathered[0], t) for t in gathered))
    compiled = [c.kernel.from_cache for c in tilus_launch.shared_of(ScaleShift()).kernels.values()]
    fresh = torch.tensor([sum(1 for cached in compiled if not cached)], device="cuda")
    dist.all_reduce(fresh)
    check(f"the ranks compiled each tilus kernel once between them ({fresh.item()} compile(s) for "
          f"{len(compiled)} kernel(s) per rank)", fresh.item() == len(compiled))
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
