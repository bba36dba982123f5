"""Thread-level instructions (barriers, semaphores, per-thread indices, shuffles) and thread-group scopes."""

from typing import ContextManager, Iterable, Optional, Union

from .. import _C
from .._C import CompileError, Expr
from ..tracing import RegisterTensor, _builder, _describe, _fail, _here, _tracing, _where
from ._args import _INT32, _Int, _Operand, _exprs, _int, _scalar
from .cluster import Dim3


class _ThreadGroup:
    def __init__(self, kind, begin, n, loc):
        self.args = (kind, begin, n, loc)

    def __enter__(self):
        _builder().begin_thread_group(*self.args)
        # The open groups as (first thread in the block, threads), for current_thread_begin & co.
        groups = _tracing.__dict__.setdefault("thread_groups", [])
        groups.append(((groups[-1][0] if groups else 0) + self.args[1], self.args[2]))

    def __exit__(self, exc_type, exc, tb):
        _tracing.__dict__.get("thread_groups", [None]).pop()
        if exc_type is None:
            _builder().end_thread_group()
        return False


class ThreadInstructions:
    """Thread-level instructions: barriers, semaphores, per-thread indices, shuffles, thread groups. A
    mixin of ``tilus.Script``."""

    @property
    def gridDim(self) -> Dim3:
        """The grid's extents (``attrs.blocks``, 1 where not given) as int32 scalars ``.x``, ``.y``,
        ``.z``; ``attrs.blocks`` must be set before."""
        loc = _here()
        blocks = self.attrs._values.get("blocks")
        if blocks is None:
            raise CompileError(f"{_where(loc)}gridDim: set self.attrs.blocks before reading self.gridDim")
        blocks = list(blocks) if isinstance(blocks, (list, tuple)) else [blocks]
        blocks += [1] * (3 - len(blocks))
        return Dim3(*(_C.cast(v, _INT32) if isinstance(v, Expr) and v.dtype != _INT32 else v for v in blocks))

    def _block_threads(self, what):
        groups = _tracing.__dict__.get("thread_groups")
        if groups:
            return groups[-1]
        warps = self.attrs._values.get("warps")
        if not isinstance(warps, int):
            raise CompileError(f"{_where(_here())}{what}: set self.attrs.warps before it (the block's threads are "
                               "not known yet)")
        return 0, warps * 32

    @property
    def current_thread_begin(self) -> int:
        """The block thread index of the first thread of the current thread group (0 outside any), a
        Python int."""
        return self._block_threads("current_thread_begin")[0]

    @property
    def current_thread_end(self) -> int:
        """One past the block thread index of the last thread of the current thread group (the
        block's threads outside any), a Python int."""
        begin, n = self._block_threads("current_thread_end")
        return begin + n

    @property
    def current_num_threads(self) -> int:
        """The threads of the current thread group (the block's outside any), a Python int."""
        return self._block_threads("current_num_threads")[1]

    # --- synchronization, debugging, hints -----------------------------------------------------
    def sync(self) -> None:
        """A barrier of the current thread group (the whole block outside any thread group)."""
        _builder().sync(_here())

    def lock_semaphore(self, semaphore: Expr, value: _Int) -> None:
        """Waits until the int32 at ``semaphore`` holds ``value`` (NVIDIA Tilus's name).

        ``semaphore`` is an address (``~int32``), such as ``semaphores[i, j].item_ptr()`` of an
        int32 ``global_tensor``. The group's first thread spins on acquire loads at GPU scope; then
        the group meets at a barrier, so every thread sees what was written before the release that
        set the value. On the CPU backend a lock that no running block can release is an error,
        not a hang.
        """
        loc = _here()
        _builder().semaphore(True, semaphore, _scalar(value, "lock_semaphore: value", loc), loc)

    def release_semaphore(self, semaphore: Expr, value: _Int) -> None:
        """Stores ``value`` into the int32 at ``semaphore`` after the group's earlier writes
        (NVIDIA Tilus's name): the group meets at a barrier, then its first thread stores with
        release semantics at GPU scope."""
        loc = _here()
        _builder().semaphore(False, semaphore, _scalar(value, "release_semaphore: value", loc), loc)

    # --- thread-level builtins (seed 004, docs/instructions.md) -----------------------------------
    def sync_threads(self, barrier_id: Optional[int] = None, arrive_count: Optional[int] = None) -> None:
        """A barrier. Without ``barrier_id``: ``sync()``, the current thread group's barrier.

        With ``barrier_id`` (1 to 15; 0 is the block's own barrier): the named barrier
        ``bar.sync barrier_id, arrive_count``, which waits until ``arrive_count`` threads of the
        block (a multiple of 32, default: the current thread group's threads, at least those)
        have arrived at it; groups that meet at one barrier (warp specialization) all name it.
        """
        loc = _here()
        _builder().sync_threads(None if barrier_id is None else _int(barrier_id, "sync_threads: barrier_id", loc),
                                None if arrive_count is None else _int(arrive_count, "sync_threads: arrive_count", loc),
                                loc)

    def named_barrier_arrive(self, barrier_id: int, arrive_count: int) -> None:
        """``bar.arrive barrier_id, arrive_count`` (TileLang's name): the current thread group's
        threads count towards the named barrier ``barrier_id`` (1 to 15) and go on without
        waiting; it completes once ``arrive_count`` threads of the block (a multiple of 32, more
        than the group's) have arrived, the others waiting at it with
        ``sync_threads(barrier_id, arrive_count)``. Warp groups that take turns (FlashAttention-3's
        ping-pong): each waits at its own barrier, then arrives at the next one's.
        """
        loc = _here()
        _builder().named_barrier_arrive(_int(barrier_id, "named_barrier_arrive: barrier_id", loc),
                                        _int(arrive_count, "named_barrier_arrive: arrive_count", loc), loc)

    def sync_warp(self, mask: Optional[_Int] = None) -> None:
        """``__syncwarp(mask)``: waits for the lanes of ``mask`` (default: the current group's lanes)."""
        loc = _here()
        _builder().sync_warp(None if mask is None else _exprs(mask, "sync_warp: mask", loc)[0], loc)

    def sync_grid(self) -> None:
        """A barrier of every thread of the grid (as ``cooperative_groups::this_grid().sync()``).

        The kernel is launched cooperatively, and each launch checks that its blocks fit on the GPU
        at once. Not inside a thread group; not on the CPU backend (a CompileError: it runs blocks in
        batches).
        """
        _builder().sync_grid(_here())

    def sync_global(self) -> None:
        """The same as ``sync_grid()`` (the seed's other name)."""
        _builder().sync_grid(_here())

    def set_max_nreg(self, reg_count: int, is_inc: Union[bool, int]) -> None:
        """``setmaxnreg.inc`` (``is_inc`` true / 1) or ``.dec`` (false / 0) of the warp group's register budget.

        ``reg_count``: registers per thread, a multiple of 8 from 24 to 256. Needs an sm_90a target
        and a thread group of whole, aligned warp groups (128 threads); a no-op on the CPU backend.
        """
        loc = _here()
        if not isinstance(is_inc, (bool, int)) or is_inc not in (0, 1, True, False):
            raise CompileError(f"{_where(loc)}set_max_nreg: is_inc must be True / False (or 1 / 0), got "
                               f"{_describe(is_inc)}")
        _builder().set_max_nreg(_int(reg_count, "set_max_nreg: reg_count", loc), bool(is_inc), loc)

    def inc_max_nreg(self, reg_count: int) -> None:
        """``set_max_nreg(reg_count, True)``: raises the warp group's registers per thread to ``reg_count``."""
        loc = _here()
        _builder().set_max_nreg(_int(reg_count, "inc_max_nreg: reg_count", loc), True, loc)

    def dec_max_nreg(self, reg_count: int) -> None:
        """``set_max_nreg(reg_count, False)``: lowers the warp group's registers per thread to ``reg_count``."""
        loc = _here()
        _builder().set_max_nreg(_int(reg_count, "dec_max_nreg: reg_count", loc), False, loc)

    def _thread_index(self, op, loc, warp_size=None, warps_per_group=None, thread_extent=0):
        ws = 32 if warp_size is None else _int(warp_size, f"{op}: warp_size", loc)
        wpg = 4 if warps_per_group is None else _int(warps_per_group, f"{op}: warps_per_group", loc)
        return RegisterTensor(_builder().thread_index(op, ws, wpg, thread_extent, loc))

    def get_lane_idx(self, warp_size: Optional[int] = None) -> RegisterTensor:
        """Each thread's lane: an int32 tensor of one element per thread of the current group (element t:
        thread t's block thread index % ``warp_size``, default 32)."""
        return self._thread_index("get_lane_idx", _here(), warp_size)

    def get_warp_idx_sync(self, warp_size: Optional[int] = None) -> RegisterTensor:
        """Each thread's warp in the block (block thread index // ``warp_size``), one int32 element per
        thread of the current group; the warp is assumed converged."""
        return self._thread_index("get_warp_idx_sync", _here(), warp_size)

    def get_warp_idx(self, warp_size: Optional[int] = None) -> RegisterTensor:
        """Each thread's warp in the block (block thread index // ``warp_size``), one int32 element per
        thread of the current group."""
        return self._thread_index("get_warp_idx", _here(), warp_size)

    def get_warp_group_idx(self, warp_size: Optional[int] = None,
                           warps_per_group: Optional[int] = None) -> RegisterTensor:
        """Each thread's warp group (block thread index // (``warp_size`` * ``warps_per_group``), default
        32 * 4), one int32 element per thread of the current group."""
        return self._thread_index("get_warp_group_idx", _here(), warp_size, warps_per_group)

    def shuffle_elect(self, thread_extent: int) -> RegisterTensor:
        """One elected thread per ``thread_extent`` threads: a bool tensor of one element per thread of the
        current group, true for threads t with t % thread_extent == 0 (``thread_extent`` 0: thread 0 only)."""
        loc = _here()
        return self._thread_index("shuffle_elect", loc, thread_extent=_int(thread_extent, "shuffle_elect: "
                                                                                          "thread_extent", loc))

    def _shuffle(self, op, value, lane, mask, width, loc):
        if not isinstance(value, RegisterTensor):
            # A block-uniform scalar holds the same value in every thread: its shuffle is itself.
            return _scalar(value, f"{op}: value (a register tensor or a scalar)", loc)
        lane_name = "srcLane" if op == "shfl_sync" else "offset"
        return RegisterTensor(_builder().shuffle(op, value.t, _exprs(lane, f"{op}: {lane_name}", loc)[0],
                                                 None if mask is None else _exprs(mask, f"{op}: mask", loc)[0],
                                                 32 if width is None else _int(width, f"{op}: width", loc), loc))

    def shfl_xor(self, value: _Operand, offset: _Int) -> _Operand:
        """``__shfl_xor_sync``: slot s of each thread t of the result is slot s of lane t ^ ``offset``.

        ``value``: a register tensor (in whatever layout it has; its slots move between the threads
        of each warp) or a scalar (the same in every thread: returned unchanged). The current group
        must be whole warps.
        """
        return self._shuffle("shfl_xor", value, offset, None, None, _here())

    def shfl_down(self, value: _Operand, offset: _Int) -> _Operand:
        """``__shfl_down_sync``: each thread's slots from lane + ``offset`` (its own past the warp's end); see ``shfl_xor``."""
        return self._shuffle("shfl_down", value, offset, None, None, _here())

    def shfl_up(self, value: _Operand, offset: _Int) -> _Operand:
        """``__shfl_up_sync``: each thread's slots from lane - ``offset`` (its own below lane 0); see ``shfl_xor``."""
        return self._shuffle("shfl_up", value, offset, None, None, _here())

    def shfl_sync(self, mask: _Int, value: _Operand, srcLane: _Int, width: Optional[int] = None) -> _Operand:
        """``__shfl_sync(mask, value, srcLane, width)``: each thread's slots from lane ``srcLane`` of its
        ``width``-lane segment (default 32); see ``shfl_xor``."""
        return self._shuffle("shfl_sync", value, srcLane, mask, width, _here())

    def loop_break(self) -> None:
        """``break`` out of the innermost loop of the kernel (the same as Python's ``break`` there)."""
        _builder().emit_break(_here(), "loop_break")

    # --- control flow ----------------------------------------------------------------------------
    def range(self, *args: _Int, unroll: Union[bool, int, None] = None, num_stages: Optional[int] = None,
              warp_specialize: bool = False, persistent: bool = False,
              epilogue: Optional[str] = None) -> Iterable[Expr]:
        """``for i in self.range(end)`` / ``(begin, end[, step])``: an IR loop with ``unroll``.

        Valid only as the iterable of a ``for`` statement in ``__call__``: like
        ``for i in range(...)``, the body is traced once with a symbolic ``i``. ``unroll``:
        True unrolls fully, a positive int by that factor, None or False not at all.

        ``num_stages`` (TileLang's and Triton's name): the compiler software-pipelines the loop
        into a ring of that many stages (the ``pipeline_loops`` pass, docs/passes.md): the body's
        copies from global to shared memory run ``num_stages - 1`` iterations ahead, into
        stages of their shared tiles, with every wait and barrier derived; 1 or None: the loop
        as written. ``warp_specialize``: a producer warp group issues the ring's loads and the
        kernel's warps consume them. ``persistent``: one block per SM walks the output tiles
        (the grid's blocks) in an L2-friendly order, the ring running on across them.
        ``epilogue`` (persistent rings): how the tile is stored after the loop: ``"tma"``
        through a shared tile (``stmatrix``) and TMA stores that complete while the next tile's
        loop runs, ``"registers"`` as written, None: the compiler's choice (TMA where legal and
        the output tile fits in shared memory beside the stages).
        """
        _fail("self.range(...) is only valid as the iterable of a `for` loop in __call__")

    def thread_group(self, thread_begin: int, num_threads: int) -> ContextManager[None]:
        """``with self.thread_group(begin, n):``: the body runs on threads ``[begin, begin + n)`` only.

        Thread numbers count within the enclosing thread group (the block outside any), and the
        group must fit in it; ``sync()`` inside it is the group's barrier.
        """
        loc = _here()
        return _ThreadGroup("thread_group", _int(thread_begin, "thread_group: thread_begin", loc),
                            _int(num_threads, "thread_group: num_threads", loc), loc)

    def single_thread(self, thread: int = -1) -> ContextManager[None]:
        """``with self.single_thread():``: the body runs on one thread of the enclosing thread group
        only: thread ``thread`` of the group, or, for -1 (NVIDIA Tilus's "any thread"), the first."""
        loc = _here()
        thread = _int(thread, "single_thread: thread", loc)
        if thread < -1:
            raise CompileError(f"{_where(loc)}single_thread: thread must be -1 (any) or a thread of the group, got "
                               f"{thread}")
        return _ThreadGroup("single_thread", max(thread, 0), 1, loc)

    def single_warp(self, warp: int = 0) -> ContextManager[None]:
        """``with self.single_warp(w):``: the body runs on warp ``w`` of the enclosing thread group only."""
        loc = _here()
        return _ThreadGroup("single_warp", _int(warp, "single_warp: warp", loc) * 32, 32, loc)

    def warp_group(self, warp_begin: int, num_warps: int) -> ContextManager[None]:
        """``with self.warp_group(w, n):``: the body runs on warps ``[w, w + n)`` of the enclosing thread group only."""
        loc = _here()
        return _ThreadGroup("warp_group", _int(warp_begin, "warp_group: warp_begin", loc) * 32,
                            _int(num_warps, "warp_group: num_warps", loc) * 32, loc)
