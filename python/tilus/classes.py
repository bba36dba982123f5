"""``tilus.Class``: helper classes whose constructor and methods are traced into the Script that
uses them (NVIDIA Tilus's ``tilus.Class``), and ``tilus.Pipeline``, the mbarrier pipeline of its
examples, written as one.

    class Counter(tilus.Class):
        def __init__(self, start):
            self.value: int32 = start          # a kernel variable, kept in the attribute

        def bump(self, by):
            self.value = self.value + by       # an IR assignment of that variable

    class K(tilus.Script):
        def __call__(self, n: int32, out: ~int32):
            c = Counter(1)                     # made while the body is traced
            for i in range(n):
                c.bump(i)
            ...

A Class is made and used only while a Script's body is traced. Its methods (``__init__``
included) are normalized like the body (docs/python.md, "Tracing and control flow"): ``if`` on a
kernel condition, ``for ... in range(...)``, ``x: int32 = 0`` declarations and Python's ``min`` /
``max`` work in them. ``self.<name>`` that the instance lacks is the traced Script's
(``self.mbarrier``, ``self.register_tensor``, ``self.sync()``, ``self.blockIdx``, ...).
Assigning an attribute that holds a kernel variable assigns the variable; one that holds a
register tensor made outside the current loop or branch has the new value written into it.
"""
import functools
import inspect

from ._C import CompileError, DataType
from .tracing import _set_attribute, _tracing
from .transform import normalize


def _traced(fn, plain_outside=False):
    """``fn``, a method of a tilus.Class (or a helper method of a Script), run normalized (its
    source rewritten as the body's is, once) with a name scope of its own while a body is traced.
    Outside tracing a Script helper runs as plain Python (`plain_outside`); a Class method is an
    error there."""
    cache = []

    @functools.wraps(fn)
    def method(self, *args, **kw):
        if getattr(_tracing, "script", None) is None:
            if plain_outside:
                return fn(self, *args, **kw)
            raise CompileError(f"{type(self).__name__}.{fn.__name__}: a tilus.Class is made and used only while a "
                               "Script's body is traced (inside its __call__)")
        if not cache:
            cache.append(normalize(fn))
        saved = _tracing.bound
        _tracing.bound = {}  # the method's names are its own (the body's stay as they are)
        try:
            return cache[0](self, *args, **kw)
        finally:
            _tracing.bound = saved

    method._tilus_traced = True
    return method


class Class:
    """Base class of helper classes traced into the calling Script (see the module docstring)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if inspect.isfunction(value) and (not name.startswith("__") or name in ("__init__", "__call__")) and \
                    not getattr(value, "_tilus_traced", False):
                setattr(cls, name, _traced(value))

    def __getattr__(self, name):
        # Only names the instance and its class lack get here: the traced Script's members.
        if name.startswith("__"):
            raise AttributeError(name)
        script = getattr(_tracing, "script", None)
        if script is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}' (a tilus.Class reaches "
                                 "the Script's members only while the Script is traced)")
        try:
            return getattr(script, name)
        except AttributeError:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}', nor has the Script "
                                 f"{type(script).__name__} being traced") from None

    def __setattr__(self, name, value):
        _set_attribute(self, name, value)


_INT32 = DataType.from_name("int32")
_UINT32 = DataType.from_name("uint32")


class Pipeline(Class):
    """A ring of ``num_stages`` buffers passed between a producer and a consumer thread group,
    synchronized by two mbarriers per stage (NVIDIA Tilus's ``tilus.Pipeline``, the same methods).

    The producer waits until its stage is free (``producer_acquire``), fills it, with its writes
    (a TMA copy's bytes, or ``producer_arrive_count`` arrivals) completing on
    ``producer_release_barrier()``, and moves on (``producer_advance``); the consumer waits until its
    stage is filled (``consumer_acquire``), reads it, arrives (``consumer_arrive_count`` arrivals) at
    ``consumer_release_barrier()`` and moves on (``consumer_advance``). ``producer_stage`` and
    ``consumer_stage`` are int32 kernel variables; ``debug=True`` prints every step.
    """

    def __init__(self, num_stages: int, producer_arrive_count: int = 1, consumer_arrive_count: int = 1,
                 debug: bool = False):
        self.num_stages: int = num_stages
        self._free = self.mbarrier.alloc([consumer_arrive_count for _ in range(num_stages)])
        self._filled = self.mbarrier.alloc([producer_arrive_count for _ in range(num_stages)])
        self.producer_stage: _INT32 = 0
        self.consumer_stage: _INT32 = 0
        self._producer_phase: _UINT32 = self.mbarrier.producer_initial_phase
        self._consumer_phase: _UINT32 = self.mbarrier.consumer_initial_phase
        self._debug: bool = debug

    def _trace(self, who, what, stage):
        if self._debug:
            self.printf(f"{type(self).__name__:>20}: {who}[%3d, %3d) {what} stage %d\n", self.current_thread_begin,
                        self.current_thread_end, stage)

    def producer_acquire(self):
        """Waits until the producer's stage is free (its consumer has released it)."""
        self._trace("Producer", "acquiring", self.producer_stage)
        self.mbarrier.wait(barrier=self._free[self.producer_stage], phase=self._producer_phase)
        self._trace("Producer", "acquired", self.producer_stage)

    def producer_advance(self):
        """Moves the producer to the next stage (its phase flips after the last)."""
        self._trace("Producer", "advancing", self.producer_stage)
        self.producer_stage = (self.producer_stage + 1) % self.num_stages
        self._producer_phase = self._producer_phase ^ (self.producer_stage == 0)

    def producer_release_barrier(self):
        """The mbarrier that the producer's writes of its stage complete on."""
        return self._filled[self.producer_stage]

    def consumer_acquire(self):
        """Waits until the consumer's stage is filled."""
        self._trace("Consumer", "acquiring", self.consumer_stage)
        self.mbarrier.wait(barrier=self._filled[self.consumer_stage], phase=self._consumer_phase)
        self._trace("Consumer", "acquired", self.consumer_stage)

    def consumer_advance(self):
        """Moves the consumer to the next stage (its phase flips after the last)."""
        self._trace("Consumer", "advancing", self.consumer_stage)
        self.consumer_stage = (self.consumer_stage + 1) % self.num_stages
        self._consumer_phase = self._consumer_phase ^ (self.consumer_stage == 0)

    def consumer_release_barrier(self):
        """The mbarrier the consumer arrives at when it is done with its stage."""
        return self._free[self.consumer_stage]
