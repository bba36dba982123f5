"""``self.mbarrier``: mbarriers in shared memory (NVIDIA Tilus's group)."""

from typing import Sequence, Union

from .._C import CompileError, Expr
from ..tracing import RegisterTensor, SharedTensor, _builder, _here, _where
from ._args import _Int, _barrier, _choice, _exprs, _int, _peer, _scalar
from .thread import _ThreadGroup


class MbarrierGroup:
    """mbarriers in shared memory (``self.mbarrier``): the arrival counters asynchronous copies and
    thread groups synchronize on. A barrier is one element of the tensor ``alloc`` returns
    (``bars[i]``; a tensor of one barrier may be passed whole)."""

    #: The phase a producer waits on first (the slot starts free).
    producer_initial_phase = 1
    #: The phase a consumer waits on first (the slot starts empty).
    consumer_initial_phase = 0

    def alloc(self, counts: Union[_Int, Sequence[_Int]]) -> SharedTensor:
        """Allocates and initializes ``len(counts)`` mbarriers (one for a single count): barrier i
        completes a phase after ``counts[i]`` arrivals (and its expected transaction bytes). Returns a
        uint64 shared tensor of shape [n]; pass ``bars[i]`` to the other methods."""
        loc = _here()
        counts = [counts] if isinstance(counts, (int, Expr)) else counts
        return SharedTensor(_builder().mbarrier_alloc(_exprs(counts, "mbarrier.alloc: counts", loc), loc))

    def arrive(self, barrier: SharedTensor, count: _Int = 1, sem: str = "release", scope: str = "cta") -> None:
        """Every thread of the current thread group arrives ``count`` times at ``barrier``."""
        loc = _here()
        b, peer = _peer(barrier, None, "mbarrier.arrive", loc)
        _builder().mbarrier("arrive", b, _scalar(count, "mbarrier.arrive: count", loc),
                            _choice(sem, ("release", "relaxed"), "mbarrier.arrive: sem", loc),
                            _choice(scope, ("cta", "cluster"), "mbarrier.arrive: scope", loc), peer, loc)

    def arrive_and_expect_tx(self, barrier: SharedTensor, transaction_bytes: _Int, sem: str = "release",
                             scope: str = "cta") -> None:
        """Every thread of the group arrives once at ``barrier`` and adds ``transaction_bytes`` to the
        bytes its current phase waits for (the TMA loads completing on it). Usually inside
        ``single_thread()``."""
        loc = _here()
        b, peer = _peer(barrier, None, "mbarrier.arrive_and_expect_tx", loc)
        _builder().mbarrier("arrive_and_expect_tx", b,
                            _scalar(transaction_bytes, "mbarrier.arrive_and_expect_tx: transaction_bytes", loc),
                            _choice(sem, ("release", "relaxed"), "mbarrier.arrive_and_expect_tx: sem", loc),
                            _choice(scope, ("cta", "cluster"), "mbarrier.arrive_and_expect_tx: scope", loc), peer, loc)

    def arrive_and_expect_tx_remote(self, barrier: SharedTensor, transaction_bytes: _Int, target_rank: _Int,
                                    sem: str = "release", scope: str = "cluster") -> None:
        """Every thread of the group arrives once at the barrier at ``barrier``'s offset in block
        ``target_rank`` of the cluster and adds ``transaction_bytes`` to the bytes its phase waits for
        (NVIDIA Tilus's name; ``scope="cta"`` releases at block scope only, which costs less)."""
        loc = _here()
        w = "mbarrier.arrive_and_expect_tx_remote"
        _builder().mbarrier("arrive_and_expect_tx", _barrier(barrier, f"{w}: barrier", loc),
                            _scalar(transaction_bytes, f"{w}: transaction_bytes", loc),
                            _choice(sem, ("release", "relaxed"), f"{w}: sem", loc),
                            _choice(scope, ("cta", "cluster"), f"{w}: scope", loc),
                            _scalar(target_rank, f"{w}: target_rank", loc), loc)

    def arrive_and_expect_tx_multicast(self, barrier: SharedTensor, transaction_bytes: _Int, multicast_mask: int,
                                       sem: str = "release", scope: str = "cluster") -> None:
        """For each block of the cluster in ``multicast_mask`` (bit i: rank i), one thread of the group
        (its i-th) arrives once at that block's barrier at ``barrier``'s offset and adds
        ``transaction_bytes`` to its expected bytes (NVIDIA Tilus's name): what every receiver of a
        multicast TMA load needs. A composition of ``arrive_and_expect_tx_remote``."""
        loc = _here()
        mask = _int(multicast_mask, "mbarrier.arrive_and_expect_tx_multicast: multicast_mask", loc)
        if not 0 < mask < 1 << 16:
            raise CompileError(f"{_where(loc)}mbarrier.arrive_and_expect_tx_multicast: multicast_mask must name 1 to 16 "
                               f"blocks (a Python int in [1, 2^16)), got {mask}")
        for rank in range(16):
            if mask >> rank & 1:
                with _ThreadGroup("thread_group", rank, 1, loc):
                    self.arrive_and_expect_tx_remote(barrier, transaction_bytes, rank, sem, scope)

    def wait(self, barrier: SharedTensor, phase: _Int, sem: str = "acquire", scope: str = "cta") -> None:
        """Every thread of the group waits until the phase of parity ``phase`` (0 or 1) of ``barrier``
        has completed. On the CPU backend a wait that can never complete is an error naming it."""
        loc = _here()
        if isinstance(phase, RegisterTensor):  # a phase kept in a one-element tensor (phases[stage])
            _builder().mbarrier_wait_tensor(_barrier(barrier, "mbarrier.wait: barrier", loc), phase.t,
                                            _choice(sem, ("acquire", "relaxed"), "mbarrier.wait: sem", loc),
                                            _choice(scope, ("cta", "cluster"), "mbarrier.wait: scope", loc), loc)
            return
        _builder().mbarrier("wait", _barrier(barrier, "mbarrier.wait: barrier", loc),
                            _scalar(phase, "mbarrier.wait: phase", loc),
                            _choice(sem, ("acquire", "relaxed"), "mbarrier.wait: sem", loc),
                            _choice(scope, ("cta", "cluster"), "mbarrier.wait: scope", loc), None, loc)
