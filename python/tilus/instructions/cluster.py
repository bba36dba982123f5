"""Thread-block clusters: ``self.cluster`` (NVIDIA Tilus's group) and the ``Dim3`` of block indices."""

from typing import Any

from .. import _C
from .._C import CompileError, Expr
from ..tracing import Region, RegisterTensor, SharedTensor, _builder, _describe, _here, _where
from ._args import MappedBarrier, _barrier, _scalar


class Dim3:
    """Three values ``x``, ``y``, ``z`` (NVIDIA Tilus's ``tilus.Dim3``): ``self.blockIdx``,
    ``self.gridDim`` and the cluster's ``blockIdx`` and ``clusterDim`` are Dim3s of int32 scalars.
    ``x, y, z = dim3`` unpacks it; ``dim3[0]`` is ``x``."""
    __slots__ = ("_values",)

    def __init__(self, x: Any = 1, y: Any = 1, z: Any = 1):
        self._values = (x, y, z)

    @property
    def x(self) -> Any:
        """The first value."""
        return self._values[0]

    @property
    def y(self) -> Any:
        """The second value."""
        return self._values[1]

    @property
    def z(self) -> Any:
        """The third value."""
        return self._values[2]

    def __iter__(self):
        """``x, y, z = ...``: the three values in order."""
        return iter(self._values)

    def __getitem__(self, i):
        """``[0]``, ``[1]``, ``[2]``: ``x``, ``y``, ``z``."""
        return self._values[i]

    def __len__(self):
        """3."""
        return 3

    def __repr__(self):
        return f"Dim3({', '.join(repr(v) for v in self._values)})"


def _block_idx() -> Dim3:
    return Dim3(_C.block_idx(0), _C.block_idx(1), _C.block_idx(2))


def _Dim3(make) -> Dim3:
    return Dim3(make(0), make(1), make(2))


class _Cluster:
    """``self.cluster``: the thread-block cluster instructions, under NVIDIA Tilus's names.

    ``self.attrs.cluster_blocks`` sets the cluster's shape (without it every block is a cluster of
    one); clusters need sm_90 on the GPU.
    """

    def sync(self) -> None:
        """A barrier of every thread of every block of the cluster (barrier.cluster.arrive + wait).

        On the CPU backend the blocks of a cluster run together (as fibers): each arrives and
        waits for the others; for clusters of one block it is a no-op.
        """
        _builder().cluster_sync(_here())

    @property
    def blockIdx(self) -> _Dim3:
        """The block's index in its cluster (``%cluster_ctaid``): ``.x``, ``.y``, ``.z``, int32 scalars."""
        return _Dim3(_C.cluster_block_idx)

    @property
    def clusterDim(self) -> _Dim3:
        """The cluster's shape (``attrs.cluster_blocks``, 1 where unset): ``.x``, ``.y``, ``.z``."""
        return _Dim3(_C.cluster_dim)

    @property
    def blockRank(self) -> Expr:
        """The block's rank in its cluster (``%cluster_ctarank``), an int32 scalar from 0 to the cluster's size - 1."""
        return _C.cluster_block_rank()

    def map_shared_addr(self, addr: Any, target_rank: "_Int") -> "MappedBarrier":
        """The barrier at ``addr``'s offset in block ``target_rank`` of the cluster (NVIDIA Tilus's name;
        PTX ``mapa.shared::cluster``). ``addr`` is a barrier (``bars[i]`` of ``mbarrier.alloc``): tilus
        keeps barriers as shared tensors, where Tilus has uint32 addresses, so the passes can follow
        them. The result goes to ``mbarrier.arrive`` and ``mbarrier.arrive_and_expect_tx`` (and the
        seed's ``mbarrier_arrive``), which then arrive on the peer's barrier; a block waits only on
        its own barriers. Raw addresses (uint32 register tensors) are a CompileError."""
        loc = _here()
        if isinstance(addr, MappedBarrier):
            addr = addr.source
        if isinstance(addr, (RegisterTensor, Expr)) or not isinstance(addr, (SharedTensor, Region)):
            raise CompileError(f"{_where(loc)}cluster.map_shared_addr: addr must be a barrier (bars[i] of "
                               f"mbarrier.alloc), got {_describe(addr)}; tilus keeps barriers as shared tensors, so "
                               f"raw uint32 shared addresses cannot be mapped")
        return MappedBarrier(_barrier(addr, "cluster.map_shared_addr: addr", loc),
                             _scalar(target_rank, "cluster.map_shared_addr: target_rank", loc), source=addr)
