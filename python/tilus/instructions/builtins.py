"""Seed 004's flat names for instructions of the mbarrier, TMA, fence and wgmma groups."""

from typing import Any, Optional

from ..tracing import RegisterTensor, SharedTensor, _builder, _here
from ._args import _Scalar, _barrier, _choice, _peer, _scalar, _tensor


class SeedBuiltins:
    """Seed 004's flat names for the mbarrier, TMA, fence and wgmma groups' instructions. A mixin of
    ``tilus.Script``."""

    def mbarrier_wait_parity(self, mbarrier: SharedTensor, parity: _Scalar) -> None:
        """Waits until the phase of parity ``parity`` (0 or 1) of ``mbarrier`` has completed (seed 004)."""
        self.mbarrier.wait(mbarrier, parity)

    def mbarrier_arrive(self, mbarrier: SharedTensor, cta_id: Optional[_Scalar] = None, scope: str = "cta") -> None:
        """Every thread of the group arrives once at ``mbarrier`` (seed 004); with ``cta_id``, at the
        barrier at the same offset in block ``cta_id`` of the cluster. ``scope="cluster"`` makes the
        arrival a release at cluster scope (the thread's earlier writes to the peer's memory become
        visible to its waiters); the default, as the seed's, releases at block scope only, which is
        enough to hand back a buffer the peer overwrites."""
        loc = _here()
        scope = _choice(scope, ("cta", "cluster"), "mbarrier_arrive: scope", loc)
        cta = None if cta_id is None else _scalar(cta_id, "mbarrier_arrive: cta_id", loc)
        b, cta = _peer(mbarrier, cta, "mbarrier_arrive", loc)
        _builder().mbarrier("arrive", b, 1, "release", scope, cta, loc)

    def mbarrier_expect_tx(self, mbarrier: SharedTensor, tx: _Scalar) -> None:
        """Adds ``tx`` bytes to the transaction count of ``mbarrier``'s current phase, without arriving (seed 004)."""
        loc = _here()
        _builder().mbarrier("expect_tx", _barrier(mbarrier, "mbarrier_expect_tx: mbarrier", loc),
                            _scalar(tx, "mbarrier_expect_tx: tx", loc), "relaxed", "cta", None, loc)

    def cp_async_barrier_noinc(self, barrier: SharedTensor) -> None:
        """Every thread of the group arrives once at ``barrier`` when all the cp.async copies it issued
        before (``copy_async``, ``async_copy``) have landed (seed 004; PTX
        ``cp.async.mbarrier.arrive.noinc``): the arrival counts toward the barrier's expected count,
        so allocate it with one count per arriving thread. A wait on the barrier then covers those
        copies: the passes add no ``copy_async_wait_group`` for the waiting threads. sm_80."""
        loc = _here()
        _builder().mbarrier("cp_async_arrive", _barrier(barrier, "cp_async_barrier_noinc: barrier", loc), 1,
                            "release", "cta", None, loc)

    def barrier_wait(self, mbarrier: SharedTensor, parity: _Scalar) -> None:
        """``mbarrier_wait_parity`` under its other seed name."""
        self.mbarrier.wait(mbarrier, parity)

    def barrier_arrive(self, mbarrier: SharedTensor) -> None:
        """``mbarrier_arrive`` under its other seed name."""
        self.mbarrier.arrive(mbarrier)

    def fence_proxy_async(self) -> None:
        """``fence.proxy.async.shared::cta`` (seed 004): orders this thread's generic shared-memory
        accesses with TMA's (``self.fence.proxy_async()``)."""
        self.fence.proxy_async()

    def tma_store_arrive(self) -> None:
        """Commits the TMA stores issued since the last commit (seed 004; ``self.tma.commit_group()``)."""
        self.tma.commit_group()

    def tma_store_wait(self) -> None:
        """Waits until every committed TMA store has read its shared source (seed 004;
        ``self.tma.wait_group(0, read=True)``)."""
        self.tma.wait_group(0, read=True)

    def warpgroup_arrive(self) -> None:
        """``wgmma.fence`` (seed 004; ``self.wgmma.fence()``)."""
        self.wgmma.fence()

    def warpgroup_commit_batch(self) -> None:
        """``wgmma.commit_group`` (seed 004; ``self.wgmma.commit_group()``)."""
        self.wgmma.commit_group()

    def warpgroup_wait(self, num_mma: int) -> None:
        """``wgmma.wait_group(num_mma)`` (seed 004; ``self.wgmma.wait_group(num_mma)``)."""
        self.wgmma.wait_group(num_mma)

    def wait_wgmma(self, id: int) -> None:  # noqa: A002 (the seed's parameter name)
        """``wgmma.wait_group(id)`` (seed 004)."""
        self.wgmma.wait_group(id)

    def warpgroup_fence_operand(self, buffer_or_ptr: Any, offset: Any = 0, num_regs: Any = None,
                                dtype: Any = None) -> None:
        """Seed 004's accumulator fence. tilus ties every wgmma accumulator to each ``wgmma.wait_group``
        itself, so there is nothing to record: accepted for TileLang-style kernels, a no-op."""
        loc = _here()
        _tensor(buffer_or_ptr, "warpgroup_fence_operand: buffer_or_ptr", loc, RegisterTensor)
