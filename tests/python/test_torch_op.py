"""tilus kernels as torch custom ops (tilus.torch.custom_op, issue 41): torch.compile(fullgraph=True)
runs them with no graph break, autograd runs a backward Script, CUDA graphs capture and replay
them. CPU tensors run on the CPU backend, so the compile and autograd tests need no GPU; all
skip without torch."""
import pytest

import tilus
from tilus import float32, int32

from conftest import HAS_CPU, HAS_GPU

torch = pytest.importorskip("torch")
import tilus.torch  # noqa: E402

needs_cpu = pytest.mark.skipif(not HAS_CPU, reason="no CPU backend (tilus built without LLVM)")


class Axpby(tilus.Script):
    """z = alpha * x + beta * y"""

    def __call__(self, n: int32, alpha: float32, beta: float32, x: ~float32, y: ~float32, z: ~float32):
        self.attrs.blocks = [tilus.cdiv(n, 128)]
        self.attrs.warps = 4
        o = self.blockIdx.x * 128
        a = self.load_global(self.global_view(x, shape=[n]), offsets=[o], shape=[128])
        b = self.load_global(self.global_view(y, shape=[n]), offsets=[o], shape=[128])
        self.store_global(self.global_view(z, shape=[n]), a * alpha + b * beta, offsets=[o])


calls = []


@tilus.torch.custom_op("tilus_test::axpby", mutates_args=())
def axpby(x: torch.Tensor, y: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    calls.append(x.device.type)
    z = torch.empty_like(x)
    Axpby()(x.numel(), alpha, beta, x, y, z)  # a new instance per call, as Tilus writes it
    return z


def _axpby_setup(ctx, inputs, output):
    ctx.alpha, ctx.beta = inputs[2], inputs[3]


def _axpby_backward(ctx, grad):
    # The backward runs tilus kernels too: d/dx = alpha * grad, d/dy = beta * grad.
    zero = torch.zeros_like(grad)
    return axpby(grad, zero, ctx.alpha, 0.0), axpby(zero, grad, 0.0, ctx.beta), None, None


axpby.register_autograd(_axpby_backward, setup_context=_axpby_setup)


def _model(x, y):
    h = torch.relu(x) + 1.0
    z = axpby(h, y, 2.0, -3.0)
    return (z * z).sum()


def _reference(x, y):
    h = torch.relu(x) + 1.0
    z = 2.0 * h - 3.0 * y
    return (z * z).sum()


def _check_against_reference(loss, x, y):
    """loss (of _model) and the gradients it left in x and y against eager torch's."""
    x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    want = _reference(x2, y2)
    want.backward()
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(y.grad, y2.grad)


def test_the_default_fake_function_skips_launches():
    from torch._subclasses.fake_tensor import FakeTensorMode
    calls.clear()
    with FakeTensorMode():
        x = torch.empty(1000)
        z = axpby(x, x, 1.0, 1.0)
    assert z.shape == (1000,) and z.dtype == torch.float32
    assert calls == ["cpu"], "the fake function is the op's own body, launches skipped"


@needs_cpu
def test_eager_op_and_autograd_through_a_backward_script():
    x = torch.randn(1000, requires_grad=True)
    y = torch.randn(1000, requires_grad=True)
    loss = _model(x, y)
    loss.backward()
    _check_against_reference(loss, x, y)


@needs_cpu
def test_torch_compile_fullgraph_has_no_graph_break_and_runs_the_kernel():
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(_model, fullgraph=True)
    x = torch.randn(1000, requires_grad=True)
    y = torch.randn(1000, requires_grad=True)
    calls.clear()
    loss = compiled(x, y)
    assert "cpu" in calls, "the compiled graph calls the tilus op"
    loss.backward()
    _check_against_reference(loss, x, y)
    assert sum(counters["graph_break"].values()) == 0
    explained = torch._dynamo.explain(_model)(x.detach(), y.detach())
    assert explained.graph_break_count == 0 and explained.graph_count == 1


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_cuda_graph_captures_and_replays_the_op():
    x = torch.randn(4097, device="cuda")
    y = torch.randn(4097, device="cuda")
    z = axpby(x, y, 2.0, 3.0)  # compiles the kernel and registers the fast path before capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        z = axpby(x, y, 2.0, 3.0)
        w = axpby(z, x, 1.0, -1.0)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        y.copy_(torch.randn_like(y))
        g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(z, 2 * x + 3 * y)
        torch.testing.assert_close(w, 2 * x + 3 * y - x)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU")
def test_torch_compile_reduce_overhead_on_the_gpu():
    """fullgraph torch.compile with CUDA graphs (mode="reduce-overhead") around a tilus op, with
    its backward."""
    torch._dynamo.reset()
    compiled = torch.compile(_model, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):
        x = torch.randn(3000, device="cuda", requires_grad=True)
        y = torch.randn(3000, device="cuda", requires_grad=True)
        loss = compiled(x, y)
        loss.backward()
        x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
        want = _reference(x2, y2)
        want.backward()
        torch.testing.assert_close(loss, want, rtol=1e-4, atol=1e-2)
        torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-3)
        torch.testing.assert_close(y.grad, y2.grad, rtol=1e-4, atol=1e-3)
