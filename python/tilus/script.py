"""tilus.Script: kernels as Python classes, traced into the tile IR by the C++ core.

The instruction methods come from their families' modules (tilus/instructions/: a mixin of
flat methods per family, a class per group such as ``self.mbarrier``), and the methods of the
definition-driven instructions from their definitions in the C++ core (instructions/defined.py).
Every instruction method goes through one wrapper (`_instruction`): a mistake in how it is
called (a wrong type, a missing or repeated argument) is a CompileError that names the method,
the arguments as the user gave them and the user's file:line, never a pybind11 dump. The rules
about shapes and dtypes are the C++ verifier's."""
import inspect

from . import launch as _launch_module
from .artifacts import Artifacts
from .classes import _traced
from .instructions import defined as _defined
from .instructions._args import MappedBarrier, _barrier, _exprs, _instruction, _ints, _scalar, _tensor  # noqa: F401
from .instructions.atomic import AtomicGroup
from .instructions.builtins import SeedBuiltins
from .instructions.clc import ClcGroup
from .instructions.cluster import Dim3, _Cluster, _block_idx  # noqa: F401
from .instructions.compute import _UNARY, ComputeInstructions, _unary_method
from .instructions.cuda import AtomicMmaConfig, AtomicMmaConfigs, CudaHelpers, DotConfig  # noqa: F401
from .instructions.debug import DebugInstructions
from .instructions.fence import FenceGroup
from .instructions.mbarrier import MbarrierGroup
from .instructions.memory import MemoryInstructions
from .instructions.tensors import TensorInstructions
from .instructions.thread import ThreadInstructions
from .instructions.tcgen05 import Tcgen05Group
from .instructions.tma import TmaGroup
from .instructions.wgmma import WgmmaGroup
from .launch import launch as _launch
from .launch import shared_of as _shared_of
from .tracing import (GlobalTensor, Region, RegisterTensor, SharedTensor, TensorBase, TMemoryTensor,  # noqa: F401
                      Unusable, _builder, _describe, _fail, _here, _set_attribute, _tracing, _where)
from . import _C
from ._C import CompileError, Expr


class Attrs:
    """The kernel's launch attributes, ``self.attrs`` in a Script body; each is handed to the
    tracer as soon as it is set:

    - ``blocks``: the grid, 1 to 3 block counts (Python ints or integer expressions of the
      kernel's parameters, evaluated at every launch), e.g. ``[tilus.cdiv(n, 1024)]``;
    - ``warps``: warps per block, a Python int from 1 to 32;
    - ``cluster_blocks``: the thread-block cluster, 1 to 3 positive Python ints;
    - ``min_blocks``: blocks each SM must be able to hold at once, a Python int from 1 to 32
      (``__launch_bounds__``' second argument: ptxas keeps the registers a thread within
      65536 / (min_blocks x the block's threads)).

    Any other name is a CompileError.
    """

    def __init__(self):
        object.__setattr__(self, "_values", {})

    def __setattr__(self, name, value):
        loc = _here()
        if name not in ("blocks", "warps", "cluster_blocks", "min_blocks"):
            raise CompileError(f"{_where(loc)}unknown kernel attribute '{name}' (blocks, warps, cluster_blocks, "
                               "min_blocks)")
        self._values[name] = value
        b = getattr(_tracing, "builder", None)
        if b is None:
            return
        if name == "blocks":
            b.set_blocks(_exprs(value, "attrs.blocks", loc), loc)
        elif name == "warps":
            if not isinstance(value, int) or isinstance(value, bool):
                raise CompileError(f"{_where(loc)}attrs.warps must be a Python int, got {_describe(value)}")
            b.set_warps(value, loc)
        elif name == "min_blocks":
            if not isinstance(value, int) or isinstance(value, bool):
                raise CompileError(f"{_where(loc)}attrs.min_blocks must be a Python int, got {_describe(value)}")
            b.set_min_blocks(value, loc)
        else:
            b.set_cluster(_ints(value, "attrs.cluster_blocks", loc), loc)

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None


class _ScriptType(type):
    """The type of Script classes. Making an instance looks its constructor arguments up first:
    an instance made with the same arguments (of the same types) as an earlier one, whose
    constructor set the same attributes, joins that one's Shared state (compiled kernels and the
    fast path) at once, so that ``Kernel()(x, y)`` made anew for every call, as NVIDIA Tilus's
    examples write it, launches through the fast path; an autotuned class's instance is made
    straight onto its tuner (its constructor only picks the tuner)."""

    def _construct(cls, *args, **kw):
        """What __call__ (tilus._C.script_construct_call, in C) does for every call but the
        common one: an instance made with the positional arguments of an earlier one."""
        if "_tilus_signature" not in cls.__dict__:
            return type.__call__(cls, *args, **kw)  # never called yet (or no kernel body): nothing to share
        known = _launch_module.by_constructor
        key = (cls, args, tuple(map(type, args)), tuple(kw.items()), tuple(map(type, kw.values()))) if kw else \
            (cls, args, tuple(map(type, args)))
        try:
            hit = known.get(key)
        except TypeError:  # an unhashable argument: nothing is looked up
            return type.__call__(cls, *args, **kw)
        if hit is not None and hit.tuner is not None:
            inst = cls.__new__(cls)
            d = inst.__dict__
            d["_tilus_tuner"] = hit.tuner
            if hit.entry is not None:
                d["_tilus_fast"] = hit.entry
            return inst
        inst = type.__call__(cls, *args, **kw)
        d = inst.__dict__
        if hit is not None:
            if d == hit.attrs:  # the constructor set the same attributes (else it is not a function of its arguments)
                d["_tilus_shared"] = hit
                if hit.entry is not None:
                    d["_tilus_fast"] = hit.entry
            return inst
        tuner = d.get("_tilus_tuner")
        if tuner is not None:
            known[key] = tuner.shared
            if tuner.shared.entry is not None:
                d["_tilus_fast"] = tuner.shared.entry
        elif all(k not in d for k in ("attrs", "blockIdx", "cluster")):
            shared = _shared_of(inst)
            if shared.attrs is not None:
                known[key] = shared
            if shared.entry is not None:
                d["_tilus_fast"] = shared.entry
        return inst


_ScriptType.__call__ = _C.script_construct_call(_ScriptType._construct, vars(_launch_module))
_ScriptType.__call__.__wrapped__ = _ScriptType._construct  # inspect.signature(a Script class) as before

_MBARRIER, _TMA, _FENCE, _WGMMA = MbarrierGroup(), TmaGroup(), FenceGroup(), WgmmaGroup()
_ATOMIC, _CUDA, _TCGEN05, _CLC = AtomicGroup(), CudaHelpers(), Tcgen05Group(), ClcGroup()


def _group(instance, doc):
    """A Script property that gives an instruction group (the same object to every Script)."""
    return property(lambda self: instance, doc=doc)


class Script(TensorInstructions, MemoryInstructions, ComputeInstructions, ThreadInstructions,
             SeedBuiltins, DebugInstructions, Artifacts, metaclass=_ScriptType):
    """Base class of tilus kernels (see docs/python.md).

    Subclasses take hyperparameters in ``__init__`` (calling ``super().__init__()``) and define
    the kernel body, one thread block's work, as ``__call__`` with annotated parameters
    (``int32`` etc.: runtime scalars; ``~float16`` etc.: arrays; ``int``/``float``/``bool``/
    ``str``: compile-time constants). Calling an instance launches the kernel, tracing and
    compiling it on the first call of each specialization: CUDA arrays run on the GPU, host
    arrays (numpy) on the CPU backend. ``source``, ``ptx``, ``sass``, ``ir`` and ``compiled``
    show what a call compiles to without launching it.

    In the body:

    - ``self.attrs.blocks`` / ``.warps`` / ``.cluster_blocks``: the launch attributes (Attrs);
    - ``self.blockIdx.x`` / ``.y`` / ``.z``: the block index (int32 scalars);
    - ``self.cluster``: the thread-block cluster group (``sync()``, ``blockIdx``, ``clusterDim``,
      ``blockRank``), under NVIDIA Tilus's names;
    - the instruction methods (``global_view``, ``load_global``, ``copy_async``, ``dot``, ...,
      docs/instructions.md) record the kernel's tile instructions; they may only be called
      while the body is traced. A wrong call (a wrong argument type, a missing, repeated or
      unknown argument, shapes or dtypes that do not fit) raises ``tilus.CompileError`` at the
      caller's ``file:line``.
    """

    def __init__(self):
        pass  # attrs, blockIdx and cluster are made at their first use (__getattr__)

    def __setattr__(self, name, value):
        # An instance whose attributes change after its construction no longer shares the
        # kernels compiled for the attributes it had.
        d = self.__dict__
        if "_tilus_shared" in d and not name.startswith("_tilus") and getattr(_tracing, "builder", None) is None:
            for k in ("_tilus_shared", "_tilus_fast"):
                d.pop(k, None)
        # While tracing, an attribute holding a kernel variable (``self.i: int32 = 0``) is assigned.
        _set_attribute(self, name, value)

    def __call__(self, *args, **kw):
        """Launches the kernel (a subclass defines the body as ``__call__``; this base class has none)."""
        raise CompileError(f"{type(self).__name__} has no kernel body: a tilus.Script subclass defines __call__")

    def __getattr__(self, name):
        # A subclass whose __init__ forgot super().__init__() still has its attrs, blockIdx, cluster.
        if name in ("attrs", "blockIdx", "cluster"):
            value = Attrs() if name == "attrs" else _block_idx() if name == "blockIdx" else _Cluster()
            self.__dict__[name] = value
            return value
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Helper methods are normalized like the body when it calls them (as NVIDIA Tilus
        # does): `if` on kernel values, `for ... in range(...)` and `x: int32 = 0` work in them.
        for name, value in list(vars(cls).items()):
            if inspect.isfunction(value) and not name.startswith("__") and not getattr(value, "_tilus_traced", False):
                setattr(cls, name, _traced(value, plain_outside=True))
        body = cls.__dict__.get("__call__")
        if body is None:
            return
        cls._tilus_body = body
        # The names visible where the class statement ran (a factory function's arguments and
        # locals): string annotations (PEP 563) are evaluated with them (arguments._annotations).
        frame = inspect.currentframe().f_back
        if frame is not None and frame.f_locals is not frame.f_globals:
            cls._tilus_scope = dict(frame.f_locals)
        else:
            cls._tilus_scope = {}

        # Launches through the instance's fast path (its _tilus_fast entry, arguments.make_fast) in C,
        # without a Python frame; else launch.launch(self, args, kw).
        __call__ = _C.script_launch_call(_launch)
        __call__.__doc__ = body.__doc__
        __call__.__wrapped__ = body
        cls.__call__ = __call__

    # The instruction groups, NVIDIA Tilus's self.mbarrier, self.tma, ... (tilus/instructions/<group>.py).
    mbarrier = _group(_MBARRIER, "mbarrier instructions (NVIDIA Tilus's ``self.mbarrier``): alloc, arrive, "
                                 "arrive_and_expect_tx, wait.")
    tma = _group(_TMA, "TMA instructions (NVIDIA Tilus's ``self.tma``): global_to_shared, shared_to_global, "
                       "commit_group, wait_group.")
    fence = _group(_FENCE, "Proxy fences (NVIDIA Tilus's ``self.fence``): proxy_async.")
    cuda = _group(_CUDA, "Layout helpers (NVIDIA Tilus's ``self.cuda``): resolve_dot_config, default_register_layout.")
    atomic = _group(_ATOMIC, "Element-wise atomics on shared and global tiles (NVIDIA Tilus's ``self.atomic``): "
                             "global_/shared_ add, sub, min, max, exch, cas.")
    wgmma = _group(_WGMMA, "Warp-group MMA (NVIDIA Tilus's ``self.wgmma``, sm_90a): fence, mma, commit_group, "
                           "wait_group.")
    tcgen05 = _group(_TCGEN05, "Tensor memory and Blackwell's tensor cores (NVIDIA Tilus's ``self.tcgen05``, sm_100a): "
                               "alloc, dealloc, relinquish_alloc_permit, slice, view, load, store, wait_load, "
                               "wait_store, copy, commit, mma.")
    clc = _group(_CLC, "Cluster launch control (NVIDIA Tilus's ``self.clc``, sm_100): try_cancel, query_response.")


for _op in _UNARY:
    setattr(ComputeInstructions, _op, _unary_method(_op))

# Every public method of the families is an instruction method (checked arguments, errors at the user's line);
# those that only compute a new tensor are pure.
_PURE = {"global_view", "shared_tensor", "register_tensor", "load_global", "load_shared", "dot", "cast", "view",
         "repeat_interleave", "flatten", "add", "fast_divmod", "randint", "rand", "randn",
         "reshape", "squeeze", "unsqueeze", "transpose", "repeat", "where", "clip", "maximum", "minimum", "sum", "max",
         "min", "any", "all", "get_lane_idx", "get_warp_idx_sync", "get_warp_idx", "get_warp_group_idx",
         "shuffle_elect", "shfl_xor", "shfl_down", "shfl_up", "shfl_sync", "ldg32", "ldg64", "ldg128", "ldg256",
         "gelu", *_UNARY}


def _wrap_methods(cls, pure, prefix=""):
    """Wraps every public method of a family's class as an instruction method; a group's (`prefix`:
    "mbarrier", ...) report their errors as `prefix.name`."""
    for name, fn in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(fn):
            if prefix:
                fn.__name__ = f"{prefix}.{name}"
            wrapped = _instruction(fn, pure(name))
            wrapped.__name__ = name
            setattr(cls, name, wrapped)


for _family in (TensorInstructions, MemoryInstructions, ComputeInstructions, ThreadInstructions, SeedBuiltins,
                DebugInstructions):
    _wrap_methods(_family, _PURE.__contains__)
for _group, _prefix in ((MbarrierGroup, "mbarrier"), (TmaGroup, "tma"), (FenceGroup, "fence"), (WgmmaGroup, "wgmma"),
                        (AtomicGroup, "atomic")):
    _wrap_methods(_group, lambda name: name == "alloc", _prefix)
_wrap_methods(Tcgen05Group, {"alloc", "slice", "view", "load"}.__contains__, "tcgen05")
_wrap_methods(ClcGroup, lambda name: name == "query_response", "clc")



def static_range(*args: int) -> range:
    """``range(*args)`` for a loop that runs in Python while tracing (its body unrolled into the IR).

    ``for s in tilus.static_range(3):`` in a kernel body is a Python loop, where
    ``for i in range(3):`` is an IR loop. The bounds must be Python ints.
    """
    for a in args:
        if isinstance(a, (Expr, TensorBase, Unusable)):
            _fail(f"static_range: its bounds must be Python ints (it runs while tracing), got {_describe(a)}; "
                  "a loop over run-time bounds is `for ... in range(...)`")
    try:
        return range(*args)
    except TypeError as e:
        _fail(f"static_range: {e}")


# --- the definition-driven instructions (tilus/instructions/defined.py) ----------------------------

class _DefinedArgs:
    """How the methods made from instruction definitions take their arguments."""
    here = staticmethod(_here)
    builder = staticmethod(_builder)
    scalar = staticmethod(_scalar)

    @staticmethod
    def tensor(x, operand, what, loc):
        if operand["scopes"] == "shared" and operand["dtype"] == "uint64" and operand["numel"] == 1:
            return _barrier(x, what, loc)
        cls = {"shared": SharedTensor, "global": GlobalTensor, "tmem": TMemoryTensor}.get(operand["scopes"],
                                                                                           RegisterTensor)
        return _tensor(x, what, loc, cls)


_defined.install(Script, {"mbarrier": MbarrierGroup, "tma": TmaGroup, "fence": FenceGroup, "wgmma": WgmmaGroup,
                          "atomic": AtomicGroup, "cluster": _Cluster, "tcgen05": Tcgen05Group, "clc": ClcGroup},
                 _instruction, _DefinedArgs)
