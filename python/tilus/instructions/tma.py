"""``self.tma``: TMA tile copies and store groups (NVIDIA Tilus's group)."""

from typing import Any, Optional, Sequence

from .._C import CompileError
from ..tracing import GlobalTensor, SharedTensor, _builder, _here, _where
from ._args import MappedBarrier, _Dims, _Int, _barrier, _bool, _cache_policy, _exprs, _int, _ints, _scalar, _tensor


class TmaGroup:
    """Bulk tensor copies by the Tensor Memory Accelerator (``self.tma``, sm_90): one box between a
    global tensor and a shared tensor, issued once by the current thread group."""

    def global_to_shared(self, *, src: GlobalTensor, dst: SharedTensor, offsets: Sequence[_Int],
                         dims: _Dims = None, mbarrier: SharedTensor, cta_group: int = 1,
                         multicast_mask: Optional[_Int] = None, cache_policy: Any = None) -> None:
        """Copies the tile of ``src`` at ``offsets`` (one per dim of ``src``; the tile's dims are the
        global dims ``dims``, default the trailing ones) into ``dst``; its bytes complete on
        ``mbarrier``, whose expected transaction bytes the kernel sets
        (``mbarrier.arrive_and_expect_tx``) and on which it waits. Elements outside ``src`` are
        zero-filled. ``multicast_mask`` (an integer, bit i for the cluster's block of rank i): every
        block of the mask receives the tile at ``dst``'s offset in its shared memory, and its barrier
        at ``mbarrier``'s offset completes the bytes. ``cache_policy``: a raw 64-bit L2 cache policy
        (an integer, such as CUTLASS's ``0x12F0000000000000`` for evict-first, or a uint64 kernel
        parameter), issued with the ``.L2::cache_hint`` form of the load. ``cta_group=2`` (Blackwell,
        sm_100a): the load of one block of a pair, whose bytes may complete on the pair's barrier in the
        other block: ``mbarrier`` may then be ``cluster.map_shared_addr(bar, rank)``."""
        loc = _here()
        w = "tma.global_to_shared"
        group = _int(cta_group, f"{w}: cta_group", loc)
        mask = None if multicast_mask is None else _scalar(multicast_mask, f"{w}: multicast_mask", loc)
        rank = None
        if isinstance(mbarrier, MappedBarrier):
            if group != 2:
                raise CompileError(f"{_where(loc)}{w}: the mbarrier is another block's (cluster.map_shared_addr): a TMA "
                                   f"load completes on a peer's barrier only with cta_group=2, got cta_group={group}")
            bar, rank = mbarrier.barrier, mbarrier.rank
        else:
            bar = _barrier(mbarrier, f"{w}: mbarrier", loc)
        _builder().tma_copy_tile(_tensor(src, f"{w}: src", loc, GlobalTensor), _tensor(dst, f"{w}: dst", loc, SharedTensor),
                                 _exprs(offsets, f"{w}: offsets", loc), _ints(dims, f"{w}: dims", loc), bar, True, loc, mask,
                                 _cache_policy(cache_policy, w, loc), group, rank)

    def shared_to_global(self, src: SharedTensor, dst: GlobalTensor, offsets: Sequence[_Int], dims: _Dims = None,
                         cache_policy: Any = None) -> None:
        """Copies ``src`` into the tile of ``dst`` at ``offsets``; elements outside ``dst`` are not
        written. Asynchronous: ``commit_group`` then ``wait_group`` before ``src`` is written again
        (a write before the wait is a CompileError). ``cache_policy``: a raw 64-bit L2 cache policy, as
        for ``global_to_shared``."""
        loc = _here()
        _builder().tma_copy_tile(_tensor(dst, "tma.shared_to_global: dst", loc, GlobalTensor),
                                 _tensor(src, "tma.shared_to_global: src", loc, SharedTensor),
                                 _exprs(offsets, "tma.shared_to_global: offsets", loc),
                                 _ints(dims, "tma.shared_to_global: dims", loc), None, False, loc, None,
                                 _cache_policy(cache_policy, "tma.shared_to_global", loc))

    def commit_group(self) -> None:
        """Closes the group of TMA stores issued since the last commit."""
        _builder().tma_commit_group(_here())

    def wait_group(self, n: int, read: bool = False) -> None:
        """Waits until at most ``n`` committed TMA store groups are pending; ``read=True``: only until
        they have read their shared source."""
        loc = _here()
        _builder().tma_wait_group(_int(n, "tma.wait_group: n", loc), _bool(read, "tma.wait_group: read", loc), loc)
