"""tilus kernels as torch operators: ``torch.compile(fullgraph=True)`` without graph breaks,
autograd through backward kernels, CUDA-graph capture.

A Python function that launches tilus kernels on torch tensors becomes a ``torch.library``
custom op; torch.compile then treats it as one opaque node (it neither traces into the launch
nor breaks the graph) and calls it at run time::

    import torch, tilus, tilus.torch

    @tilus.torch.custom_op("mylib::scale", mutates_args=())
    def scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
        y = torch.empty_like(x)
        Scale()(x.numel(), x, y, alpha)          # a tilus Script writing y
        return y

    def scale_backward(ctx, grad):
        return scale(grad, ctx.alpha), None      # the backward is a tilus op too

    def scale_setup(ctx, inputs, output):
        ctx.alpha = inputs[1]

    scale.register_autograd(scale_backward, setup_context=scale_setup)
    torch.compile(model, fullgraph=True)         # model calls scale(...): no graph break

The op's **fake** (meta) function, which torch.compile runs on FakeTensors to learn the outputs'
shapes and dtypes, is by default the function itself with every tilus launch skipped: its
``torch.empty_like`` / ``torch.empty`` calls make the outputs and the kernels do nothing. Pass
``fake=`` when the function does more than allocate and launch (reads values, calls numpy).

Under CUDA-graph capture (``torch.cuda.graph``, ``torch.compile(mode="reduce-overhead")``) a
launch goes to torch's current stream, the capturing one; compile the kernel (call the op once)
before capturing. The same op runs on CPU tensors through the CPU backend. docs/python.md,
"torch integration", has the details.
"""
from . import launch as _launch

__all__ = ["custom_op", "launches_skipped"]


def launches_skipped():
    """A context manager under which tilus launches do nothing (what the default fake function
    runs under; arguments are not read)."""
    return _launch.skipped_launches()


def custom_op(name, fn=None, *, mutates_args=(), fake=None, backward=None, setup_context=None,
              device_types=None, schema=None):
    """Makes ``fn`` (a function of torch tensors and Python scalars with type annotations, that
    launches tilus kernels) the torch custom op ``name`` ("namespace::op") and returns it (a
    ``torch.library.CustomOpDef``: call it like ``fn``).

    Args:
        mutates_args: the names of the tensor arguments ``fn`` writes (``()`` when it only
            returns new tensors), as torch.library.custom_op takes them.
        fake: the fake function; default: ``fn`` with tilus launches skipped.
        backward, setup_context: registered with ``register_autograd`` (backward may launch tilus
            kernels itself, or call other tilus ops).
        device_types, schema: passed to torch.library.custom_op.

    Used as a decorator when ``fn`` is left out.
    """
    import torch

    def make(fn):
        op = torch.library.custom_op(name, fn, mutates_args=mutates_args, device_types=device_types, schema=schema)

        def skipped(*args, **kwargs):
            with _launch.skipped_launches():
                return fn(*args, **kwargs)

        op.register_fake(fake if fake is not None else skipped)
        if backward is not None:
            op.register_autograd(backward, setup_context=setup_context)
        return op

    return make if fn is None else make(fn)
