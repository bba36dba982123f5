"""Autotuning: a hyperparameter space declared on a Script class, tuned on the first call for a
tuning key, the winner persisted so that a later process launches it with no tuning.

    @tilus.autotune("block_m, block_n", [(64, 128), (128, 128)])
    @tilus.autotune("stages", [2, 3, 4])
    class Matmul(tilus.Script):
        def __init__(self, block_m, block_n, stages, block_k=32): ...

    Matmul()(m, n, k, a, b, c)           # tunes block_m, block_n, stages (6 configs)
    Matmul(stages=3)(m, n, k, a, b, c)   # arguments the caller fixes are not tuned

The tuner is the C++ one (tilus/runtime/autotune.h), the same for C++ users: the space is a
C++ TuneSpace, the key, the tuning (parallel compiles, CUDA-event timing after an L2 flush,
skipped configs) and the entries in `<cache dir>/autotune/<hash>.txt` are C++'s. What stays
here is Python's: the decorator, tracing each config's Script instance, and mapping config
values (any Python constants) to and from their stored text, repr().

Tuning runs the kernel repeatedly on the call's own arguments: a kernel that reads what it
writes must not be autotuned on live data.
"""
import inspect
import os
import sys
import threading

from . import _C
from ._C import CompileError
from .launch import Shared, arguments, bind, fast_path_on, plain_key, prepare, register_fast, signature, trace
from .script import Script

_reports: dict = {}  # key -> TuneEntry (this process's tuning results, and entries loaded from disk)
_reports_lock = threading.Lock()


# --- spaces ---------------------------------------------------------------------------------

# The tuners of autotuned Script classes, per class and plain fixed arguments (launch.plain_key).
_tuners = {}
_tuners_lock = threading.Lock()


def autotune(names, values):
    """Class decorator: tune constructor arguments `names` ("a, b" or ["a", "b"]) over `values`
    (a list of tuples, one entry per name; for one name, a list of its values, which may be
    tuples themselves, as in NVIDIA Tilus: ``autotune("warp_spatial", [(1, 4), (2, 2)])``).
    Stack decorators for a product space."""
    frame = sys._getframe(1)
    where = (frame.f_code.co_filename, frame.f_lineno)
    text = names if isinstance(names, str) else ", ".join(names)
    try:
        values = list(values)
    except TypeError:
        raise CompileError(f"{where[0]}:{where[1]}: autotune: values must be a list, got {values!r}") from None
    one_name = len([n for n in text.split(",") if n.strip()]) == 1
    points = [(v,) if one_name or not isinstance(v, (tuple, list)) else tuple(v) for v in values]
    texts = [[repr(x) for x in p] for p in points]
    dimension = _C.TuneSpace()
    dimension.add(text, texts, where)  # CompileError at the decorator's line for a bad dimension
    names = dimension.names

    def decorate(cls):
        if not (isinstance(cls, type) and issubclass(cls, Script)):
            raise CompileError(f"{where[0]}:{where[1]}: autotune decorates a tilus.Script class")
        params = inspect.signature(cls.__init__).parameters
        for n in names:
            if n not in params:
                raise CompileError(f"{where[0]}:{where[1]}: autotune: {cls.__name__}.__init__ has no parameter '{n}' "
                                   f"(parameters: {', '.join(p for p in params if p != 'self')})")
        # Decorators apply bottom-up and C++ varies the first dimension fastest: the configs
        # come in the order of itertools.product over the decorators in source order.
        space = _C.TuneSpace(cls.__dict__.get("_tilus_space", _C.TuneSpace()))
        space.add(text, texts, where)
        cls._tilus_space = space
        by_text = dict(cls.__dict__.get("_tilus_values", {}))
        for i, n in enumerate(names):
            by_text[n] = {t[i]: p[i] for p, t in zip(points, texts)}
        cls._tilus_values = by_text
        if "_tilus_plain_init" not in cls.__dict__:
            cls._tilus_plain_init = cls.__init__
            plain = cls.__init__
            plain_signature = inspect.signature(plain)

            def __init__(self, *args, **kwargs):
                bound = plain_signature.bind_partial(self, *args, **kwargs)
                fixed = {k: v for k, v in bound.arguments.items() if k != "self"}
                if all(n in fixed for n in type(self)._tilus_space.names):
                    plain(self, *args, **kwargs)  # a plain instance: nothing left to tune
                    return
                Script.__init__(self)
                # One tuner per class and fixed arguments: an instance made for every call
                # (NVIDIA Tilus's examples do it) finds the winner already loaded and compiled.
                text = plain_key(fixed.items())
                if text is None:
                    self._tilus_tuner = Tuner(type(self), fixed, where)
                else:
                    with _tuners_lock:
                        tuner = _tuners.get((type(self), text))
                        if tuner is None:
                            tuner = _tuners[(type(self), text)] = Tuner(type(self), fixed, where)
                    self._tilus_tuner = tuner

            __init__.__wrapped__ = plain
            cls.__init__ = __init__
        return cls

    return decorate


def space_of(cls, fixed):
    """The configs (dicts of constructor arguments) of a class's space, the caller-fixed
    arguments projected out. A class with a ``debug_schedule`` (NVIDIA Tilus's) has that one
    config instead."""
    debug = getattr(cls, "debug_schedule", None)
    if debug:
        if not isinstance(debug, dict):
            raise CompileError(f"{cls.__name__}.debug_schedule: expects a dict of constructor arguments, got "
                               f"{type(debug).__name__}")
        clash = sorted(set(debug) & set(fixed))
        if clash:
            raise CompileError(f"{cls.__name__}: the caller fixes {', '.join(clash)}, which the class's "
                               "debug_schedule also sets")
        return [dict(debug)]
    by_text = cls._tilus_values
    configs = cls._tilus_space.configs({n: repr(v) for n, v in fixed.items() if n in by_text})
    return [{n: by_text[n][t] for n, t in c.items() if n not in fixed} for c in configs]


# --- the tuner -----------------------------------------------------------------------------------

class Tuner:
    """The tuning state of one autotuned Script instance."""

    # Tests replace these: timer(config, repeat) -> ms replaces the timing; compile_only_arch
    # compiles for that arch (no GPU needed) and launches nothing.
    timer = None
    compile_only_arch = None

    def __init__(self, cls, fixed, where):
        self.cls, self.fixed, self.where = cls, fixed, where
        self.configs = space_of(cls, fixed)
        self.texts = [{n: repr(v) for n, v in c.items()} for c in self.configs]  # their stored form
        self.space = _C.tune_space_id(self.texts)
        self.fixed_texts = {n: repr(v) for n, v in fixed.items()}
        self.script = f"{cls.__module__}.{cls.__qualname__}"
        self.winners = {}  # key -> configured Script instance
        self.lock = threading.Lock()
        # The instances on this tuner share a fast path to the winners (launch.Shared), keyed by
        # what the tuning key varies with in a process: specialization, constants, int buckets.
        self.shared = Shared(tuner=self)

    def instance(self, config):
        inst = object.__new__(self.cls)
        self.cls._tilus_plain_init(inst, **self.fixed, **config)
        return inst

    def config(self, text):
        return self.configs[self.texts.index(text)]

    def _key(self, args, kw):
        sig = signature(self.cls)
        call = arguments(sig, *bind(sig, args, kw))
        arch = self.compile_only_arch or ("cpu" if call.backend == "cpu" else "")
        constants = {n: repr(v) for n, v in call.constants.items()} if call.constants else {}
        return _C.tune_key(self.script, call.values, arch, self.space, self.fixed_texts, constants), call, arch

    def winner_for(self, args, kw):
        """The configured instance tuned for these arguments in this process (None: not yet)."""
        return self.winners.get(self._key(args, kw)[0])

    def call(self, script, args, kw):
        key, call, arch = self._key(args, kw)
        winner = self.winners.get(key)
        if winner is None:
            with self.lock:
                winner = self.winners.get(key)
                if winner is None:
                    entry = _C.load_tune_entry(key, _C.cache_dir())  # None: missing, stale or corrupt
                    if entry is None:
                        entry = self.tune(key, call, arch)
                        _C.store_tune_entry(entry, _C.cache_dir())
                    with _reports_lock:
                        _reports[key] = entry
                    winner = self.winners[key] = self.instance(self.config(entry.winner))
        if self.compile_only_arch is None:
            winner(*args, **kw)
            if fast_path_on():
                compiled, winner_call = prepare(winner, args, kw)
                register_fast(self.shared, signature(self.cls), compiled, winner_call)
                script.__dict__["_tilus_fast"] = self.shared.entry
        return None

    def tune(self, key, call, arch):
        repeat = int(os.environ.get("TILUS_AUTOTUNE_REPEAT", "10"))
        timer = self.timer

        def traced(text):
            # A config whose constructor refuses it (NVIDIA Tilus's examples raise ValueError for
            # tiles their warps cannot split) is skipped like one that fails to trace.
            try:
                inst = self.instance(self.config(text))
            except CompileError:
                raise
            except Exception as e:
                raise CompileError(f"{self.cls.__name__}.__init__ raised {type(e).__name__}: {e}") from None
            return trace(inst, call.constants)

        return _C.tune(key, self.texts, traced, call.values, arch, repeat,
                       None if timer is None else lambda text: timer(self.config(text), repeat),
                       self.cls.__name__, self.where)


def autotune_report(file=None):
    """Prints the configs and times of every tuning result of this process (tuned or loaded)
    and returns them (tilus._C.TuneEntry: key, winner, results, compile_s, tuning_s)."""
    file = file or sys.stdout
    with _reports_lock:
        entries = list(_reports.values())
    if not entries:
        print("tilus autotune: nothing tuned in this process", file=file)
    for e in entries:
        print(_C.tune_report(e), end="", file=file)
    return entries
