"""``self.wgmma``: warp-group MMA (NVIDIA Tilus's group)."""

from typing import Union

from .._C import CompileError
from ..tracing import RegisterTensor, SharedTensor, _builder, _here, _where
from ._args import _int, _tensor


class WgmmaGroup:
    """Warp-group matrix multiply-accumulate (``self.wgmma``, sm_90a). Every instruction runs on whole
    warp groups: the current thread group's threads (a multiple of 128, starting at one)."""

    def fence(self) -> None:
        """Orders the warp group's earlier register and shared-memory accesses before the ``mma`` that
        follow: needed before the first ``mma`` and whenever the accumulator was touched since."""
        _builder().wgmma_fence(_here())

    def mma(self, a: Union[SharedTensor, RegisterTensor], b: SharedTensor, d: RegisterTensor,
            enable_input_d: bool = True) -> None:
        """``d += a @ b``, asynchronously (``d = a @ b`` where ``enable_input_d`` is False: d's
        values are ignored, as by wgmma's scale-d 0 on the first k step; a Python bool, decided
        when the kernel is traced, as NVIDIA Tilus's ``tcgen05.mma`` names it). A fresh accumulator
        this way needs no zeroing, and one register tensor can serve several products in turn:
        the compiler then keeps the next product's registers those of the last, so it cannot start
        it before the last one's values are used. ``b`` [k, n] is shared and K-major (usually a transposed
        [n, k] tile, ``sb.transpose()``), stored in rows of 32, 64 or 128 bytes (what TMA writes and
        layout inference chooses), or, for 16-bit operands, a row-major [k, n] tile exactly one such
        row wide (MN-major: 64 f16 columns in 128-byte rows; wgmma transposes it); ``a`` [m, k]
        K-major as ``b``, or a float16/bfloat16 register tensor,
        whose layout becomes the wgmma A-fragment layout. ``d`` is a float32 register tensor whose
        layout becomes the wgmma accumulator layout. f16, bf16 and fp8 operands (e4m3 and e5m2 in any
        pairing, both from shared memory); m a multiple of 64 per warp group, n of 8, k of 16 (32
        for fp8). ``d`` and the operands may be
        touched again only after ``commit_group`` and a ``wait_group`` that covers it (a CompileError
        names both lines otherwise)."""
        loc = _here()
        a = _tensor(a, "wgmma.mma: a", loc, RegisterTensor if isinstance(a, RegisterTensor) else SharedTensor)
        if not isinstance(enable_input_d, bool):
            raise CompileError(f"{_where(loc)}wgmma.mma: enable_input_d must be a Python bool (decided when the "
                               f"kernel is traced), got {type(enable_input_d).__name__} {enable_input_d!r}")
        _builder().wgmma_mma(a, _tensor(b, "wgmma.mma: b", loc, SharedTensor),
                             _tensor(d, "wgmma.mma: d", loc, RegisterTensor), loc, enable_input_d)

    def commit_group(self) -> None:
        """Closes the group of ``mma`` issued since the last commit."""
        _builder().wgmma_commit_group(_here())

    def wait_group(self, n: int) -> None:
        """Waits until at most ``n`` (0 to 7) committed groups of this warp group are pending."""
        loc = _here()
        _builder().wgmma_wait_group(_int(n, "wgmma.wait_group: n", loc), loc)
