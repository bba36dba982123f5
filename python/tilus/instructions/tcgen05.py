"""``self.tcgen05``: Blackwell's tensor memory and fifth-generation tensor cores, under NVIDIA Tilus's
names and parameters (docs/instructions.md, "Blackwell"). The instructions that define a tensor
(``alloc``, ``slice``, ``view``, ``load``) are written here; the others are definition-driven
(``tilus._C.instruction_defs()``): their methods are made from their definitions in the C++ core,
except where a signature of Tilus's needs more than the definition says (``mma``, ``commit``,
``relinquish_alloc_permit``), which are written here and record the same instruction.

Every method checks its arguments at the call, with errors at the user's line; what the
instruction requires of its operands (shapes, dtypes, the thread group that issues it) the core
checks when it is recorded.
"""
from typing import Optional, Sequence, Union

from .._C import CompileError, DataType, Expr
from ..tracing import RegisterTensor, SharedTensor, TMemoryTensor, _builder, _dtype, _here, _where
from ._args import _barrier, _exprs, _int, _ints, _scalar, _tensor



def _cta_group(x, what, loc):
    g = _int(x, f"{what}: cta_group", loc)
    if g not in (1, 2):
        raise CompileError(f"{_where(loc)}{what}: cta_group must be 1 or 2, got {g}")
    return g


class Tcgen05Group:
    """Tensor memory and the tcgen05 instructions (``self.tcgen05``, sm_100a / sm_103a).

    Tensor memory is 128 lanes x 512 columns of 32 bits per block. ``alloc`` gives a tensor there
    (dim 0 over lanes, the others over columns); ``mma`` accumulates into one from shared (and
    tensor-memory) operands; ``load`` / ``store`` move rank-2 tiles to and from registers (warp w
    of the group takes lanes 32w..32w+31); ``copy`` moves a shared tile in. ``mma`` and ``copy``
    complete asynchronously: ``commit`` arrives on an mbarrier once they are done, and the kernel
    waits on it. ``load`` and ``store`` complete at ``wait_load`` / ``wait_store``. Every tensor
    allocated must be freed (``dealloc``) before the kernel ends.
    """

    def alloc(self, dtype: DataType, shape: Sequence[int], cta_group: int = 1) -> TMemoryTensor:
        """A tensor of ``dtype`` (8, 16 or 32 bits) and ``shape`` [lanes, columns...] in tensor memory
        (lanes 32, 64 or 128; the column dims row-major, rounded up to a power of two of at least 32
        columns of 32 bits). Issued by the first warp of the current thread group (whole warps), which
        every thread of the group then waits for. ``cta_group=2``: the same columns in both blocks of
        a pair of the cluster (for ``mma(..., cta_group=2)``)."""
        loc = _here()
        return TMemoryTensor(_builder().tcgen05_alloc(_dtype(dtype, "tcgen05.alloc: dtype", loc),
                                                      _ints(shape, "tcgen05.alloc: shape", loc),
                                                      _cta_group(cta_group, "tcgen05.alloc", loc), loc))

    def slice(self, tensor: TMemoryTensor, offsets: Sequence[Union[int, Expr]], dims: Sequence[int],
              shape: Sequence[int]) -> TMemoryTensor:
        """The view of ``tensor`` at ``offsets`` (one per dim of ``tensor``; the lane offset a constant
        multiple of 32) whose dims are ``tensor``'s dims ``dims`` (the lane dim 0 and the last dim
        among them), of extents ``shape``. No data moves."""
        loc = _here()
        return TMemoryTensor(_builder().tcgen05_slice(_tensor(tensor, "tcgen05.slice: tensor", loc, TMemoryTensor),
                                                      _exprs(offsets, "tcgen05.slice: offsets", loc),
                                                      _ints(dims, "tcgen05.slice: dims", loc),
                                                      _ints(shape, "tcgen05.slice: shape", loc), loc))

    def view(self, tensor: TMemoryTensor, dtype: DataType, shape: Sequence[int]) -> TMemoryTensor:
        """``tensor``'s columns as ``dtype`` and ``shape``: the dims but the last keep their extents,
        the last keeps its bits. No data moves."""
        loc = _here()
        return TMemoryTensor(_builder().tcgen05_view(_tensor(tensor, "tcgen05.view: tensor", loc, TMemoryTensor),
                                                     _dtype(dtype, "tcgen05.view: dtype", loc),
                                                     _ints(shape, "tcgen05.view: shape", loc), loc))

    def load(self, tensor: TMemoryTensor) -> RegisterTensor:
        """The rank-2 tensor-memory tile ``tensor`` [lanes, n] in registers: the current thread group
        has one thread per lane (thread t holds row t), starting on a multiple of 128 threads plus the
        tile's lane offset. Asynchronous: ``wait_load()`` before the registers are read (a read before
        it is a CompileError naming both lines)."""
        loc = _here()
        return RegisterTensor(_builder().tcgen05_load(_tensor(tensor, "tcgen05.load: tensor", loc,
                                                                   TMemoryTensor), loc))

    def relinquish_alloc_permit(self, cta_group: int = 1) -> None:
        """Gives up this block's (``cta_group=2``: the pair's) right to allocate tensor memory, so a
        block of another kernel on the SM may; ``alloc`` after it is an error."""
        loc = _here()
        _builder().defined("tcgen05.relinquish_alloc_permit", {}, {},
                           {"cta_group": _cta_group(cta_group, "tcgen05.relinquish_alloc_permit", loc)}, loc)

    def commit(self, mbarrier, cta_group: int = 1, multicast_mask: Optional[int] = None) -> None:
        """Arrives once on ``mbarrier`` (``bars[i]``) when the ``mma`` and ``copy`` this warp issued
        before have completed (issued by one warp: ``single_warp()``). ``multicast_mask`` (bit i: the
        cluster's block of rank i): arrives on the barrier at ``mbarrier``'s offset in each of those
        blocks instead (``cta_group=2``: the pair's MMA)."""
        loc = _here()
        mask = 0 if multicast_mask is None else _int(multicast_mask, "tcgen05.commit: multicast_mask", loc)
        if multicast_mask is not None and not 0 < mask < 1 << 16:
            raise CompileError(f"{_where(loc)}tcgen05.commit: multicast_mask must name 1 to 16 blocks (a Python int in "
                               f"[1, 2^16)), got {mask}")
        _builder().defined("tcgen05.commit", {"mbarrier": _barrier(mbarrier, "tcgen05.commit: mbarrier", loc)}, {},
                           {"cta_group": _cta_group(cta_group, "tcgen05.commit", loc), "multicast_mask": mask}, loc)

    def mma(self, a: Union[SharedTensor, TMemoryTensor], b: SharedTensor, d: TMemoryTensor,
            enable_input_d: Union[Expr, bool], cta_group: int = 1) -> None:
        """``d = a @ b + d`` (``d = a @ b`` where ``enable_input_d`` is false) on the tensor cores,
        asynchronously, issued by one warp (``single_warp()``). ``a`` [m, k] shared or in tensor
        memory, ``b`` [k, n] shared and K-major (a transposed [n, k] tile: ``s_b.transpose()``), both
        in rows of 32, 64 or 128 bytes with the matching swizzle (what TMA writes and layout inference
        chooses), ``d`` [m, n] float32 (or float16) in tensor memory. f16 / bf16 / tf32 / fp8 operands;
        m 128; n a multiple of 8; k a multiple of 16 (8 for tf32, 32 for fp8). ``cta_group=2``: the two
        blocks of a pair compute [a0; a1] @ [b0, b1] into [d0; d1], each holding its half of a's rows
        and of b's columns and its rows of d (issued by the pair's block of even rank). ``commit``
        and an mbarrier wait before ``d`` is read or an operand is written."""
        loc = _here()
        cls = TMemoryTensor if isinstance(a, TMemoryTensor) else SharedTensor
        tensors = {"a": _tensor(a, "tcgen05.mma: a", loc, cls), "b": _tensor(b, "tcgen05.mma: b", loc, SharedTensor),
                   "d": _tensor(d, "tcgen05.mma: d", loc, TMemoryTensor)}
        _builder().defined("tcgen05.mma", tensors,
                           {"enable_input_d": _scalar(enable_input_d, "tcgen05.mma: enable_input_d", loc)},
                           {"cta_group": _cta_group(cta_group, "tcgen05.mma", loc)}, loc)


