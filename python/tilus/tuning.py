"""Autotuning: a hyperparameter space declared on a Script class, tuned on the first call for a
tuning key, the winner persisted so that a later process launches it with no tuning.

    @tilus.autotune("block_m, block_n", [(64, 128), (128, 128)])
    @tilus.autotune("stages", [2, 3, 4])
    class Matmul(tilus.Script):
        def __init__(self, block_m, block_n, stages, block_k=32): ...

    Matmul()(m, n, k, a, b, c)           # tunes block_m, block_n, stages (6 configs)
    Matmul(stages=3)(m, n, k, a, b, c)   # arguments the caller fixes are not tuned

The space is the product of the decorators. On the first call for a tuning key every config
is traced and compiled in parallel threads (NVRTC runs without the GIL); configs that fail to
compile or to launch are skipped and listed; each survivor is timed with CUDA events after an
L2 flush (median of `TILUS_AUTOTUNE_REPEAT`, default 10, runs); the fastest wins for this and
later calls. The tuning key is: the Script's module and name, the caller-fixed constructor
arguments, the compile-time constants, every integer runtime argument bucketed to the next
power of two (0 and 1 stay themselves; 100 and 128 share the bucket 128), the pointer
alignment facts, the GPU's name and compute capability, the driver and NVRTC versions and the
tilus version. Winners and all timings live in `<cache dir>/autotune/<hash>.json`, written
atomically; an entry whose key differs in any part (another GPU, driver, NVRTC or tilus) is
not used, so those retune.

Tuning runs the kernel repeatedly on the call's own arguments: a kernel that reads what it
writes must not be autotuned on live data.
"""
import concurrent.futures
import hashlib
import inspect
import itertools
import json
import os
import sys
import tempfile
import threading
import time

from . import _C
from ._C import CompileError

_FORMAT = 1
_reports = {}  # hash -> entry (this process's tuning results, and entries loaded from disk)
_reports_lock = threading.Lock()


# --- spaces ---------------------------------------------------------------------------------

def autotune(names, values):
    """Class decorator: tune constructor arguments `names` ("a, b" or ["a", "b"]) over `values`
    (a list of tuples, or of scalars for one name). Stack decorators for a product space."""
    frame = sys._getframe(1)
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}: "
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    names = list(names)
    if not names:
        raise CompileError(where + "autotune: no parameter names")
    if len(set(names)) != len(names):
        raise CompileError(where + f"autotune: repeated names in {names}")
    try:
        values = list(values)
    except TypeError:
        raise CompileError(where + f"autotune: values must be a list, got {values!r}") from None
    if not values:
        raise CompileError(where + f"autotune({', '.join(names)}): an empty list of values")
    points = []
    for v in values:
        t = tuple(v) if isinstance(v, (tuple, list)) else (v,)
        if len(t) != len(names):
            raise CompileError(where + f"autotune({', '.join(names)}): value {v!r} has {len(t)} entries, "
                               f"expected {len(names)}")
        points.append(t)

    def decorate(cls):
        from .script import Script
        if not (isinstance(cls, type) and issubclass(cls, Script)):
            raise CompileError(where + "autotune decorates a tilus.Script class")
        params = inspect.signature(cls.__init__).parameters
        for n in names:
            if n not in params:
                raise CompileError(where + f"autotune: {cls.__name__}.__init__ has no parameter '{n}' "
                                   f"(parameters: {', '.join(p for p in params if p != 'self')})")
        spaces = list(cls.__dict__.get("_tilus_spaces", []))
        for prior, _ in spaces:
            both = set(prior) & set(names)
            if both:
                raise CompileError(where + f"autotune: {sorted(both)} already tuned by another decorator")
        spaces.insert(0, (names, points))  # decorators apply bottom-up; keep source order
        cls._tilus_spaces = spaces
        if "_tilus_plain_init" not in cls.__dict__:
            cls._tilus_plain_init = cls.__init__
            plain = cls.__init__

            def __init__(self, *args, **kwargs):
                tuned = [n for ns, _ in type(self)._tilus_spaces for n in ns]
                bound = inspect.signature(plain).bind_partial(self, *args, **kwargs)
                fixed = {k: v for k, v in bound.arguments.items() if k != "self"}
                if all(n in fixed for n in tuned):
                    plain(self, *args, **kwargs)  # a plain instance: nothing left to tune
                    return
                from .script import Script
                Script.__init__(self)
                self._tilus_tuner = Tuner(type(self), fixed, where)

            __init__.__wrapped__ = plain
            cls.__init__ = __init__
        return cls

    return decorate


def space_of(cls, fixed):
    """The configs (dicts of constructor arguments) of a class's space, the caller-fixed
    arguments projected out."""
    dims = []
    for names, points in cls._tilus_spaces:
        keep = [i for i, n in enumerate(names) if n not in fixed]
        if not keep:
            continue
        seen, proj = set(), []
        for p in points:
            q = tuple(p[i] for i in keep)
            if q not in seen:
                seen.add(q)
                proj.append(q)
        dims.append(([names[i] for i in keep], proj))
    configs = []
    for combo in itertools.product(*[pts for _, pts in dims]):
        cfg = {}
        for (names, _), point in zip(dims, combo):
            cfg.update(zip(names, point))
        configs.append(cfg)
    return configs


# --- keys ------------------------------------------------------------------------------------

def bucket(n):
    """The tuning bucket of an integer size: the next power of two (0 and 1 stay themselves)."""
    if n <= 1:
        return n
    return 1 << (int(n) - 1).bit_length()


def environment(arch=None):
    """The parts of the key that say where a kernel runs."""
    from . import __version__
    if arch is None:
        d = _C.device_info()
        gpu = {"gpu": d["name"], "arch": d["arch"], "driver": d["driver_version"]}
    else:
        gpu = {"gpu": f"compile-only {arch}", "arch": arch, "driver": 0}
    gpu.update({"nvrtc": _C.nvrtc_version(), "tilus": __version__})
    return gpu


def tuning_key(cls, fixed, spec_key, args, params, env):
    sizes = []
    for p, a in zip(params, args):
        if p.kind == "scalar" and not p.dtype.is_float:
            sizes.append(bucket(int(a)))
    return {
        "format": _FORMAT,
        "script": f"{cls.__module__}.{cls.__qualname__}",
        "fixed": {k: repr(v) for k, v in sorted(fixed.items())},
        "specialization": repr(spec_key),
        "sizes": sizes,
        **env,
    }


def key_hash(key):
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


# --- persistence ---------------------------------------------------------------------------------

def _dir():
    d = os.path.join(_C.cache_dir(), "autotune")
    return d


def load(key):
    path = os.path.join(_dir(), key_hash(key) + ".json")
    try:
        with open(path) as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None
    if entry.get("key") != key:  # stale (another GPU / driver / NVRTC / tilus) or a collision
        return None
    return entry


def store(entry):
    d = _dir()
    try:
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f, indent=1, sort_keys=True)
        os.replace(tmp, os.path.join(d, key_hash(entry["key"]) + ".json"))
    except OSError as e:
        print(f"tilus: autotune results not saved ({e})", file=sys.stderr)


# --- timing --------------------------------------------------------------------------------------

def _cuda_timer(launch, repeat):
    import torch
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    launch()
    torch.cuda.synchronize()
    times = []
    for i in range(repeat):
        flush.fill_(i & 0xFF)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        launch()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def _wall_timer(launch, repeat):
    launch()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        launch()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


class _Progress:
    def __init__(self, name, total):
        self.name, self.total = name, total
        self.tty = sys.stderr.isatty()

    def show(self, what, done):
        if self.tty:
            sys.stderr.write(f"\rtilus autotune {self.name}: {what} {done}/{self.total}   ")
            sys.stderr.flush()

    def done(self):
        if self.tty:
            sys.stderr.write("\n")


# --- the tuner -----------------------------------------------------------------------------------

class Tuner:
    """The tuning state of one autotuned Script instance."""

    # Tests replace these: timer(launch, repeat) -> ms; arch: compile for it without a GPU.
    timer = None
    compile_only_arch = None

    def __init__(self, cls, fixed, where):
        self.cls, self.fixed, self.where = cls, fixed, where
        self.configs = space_of(cls, fixed)
        self.winners = {}  # (specialization, size buckets) -> configured Script instance
        self.lock = threading.Lock()
        self.env = None

    def instance(self, config):
        inst = object.__new__(self.cls)
        self.cls._tilus_plain_init(inst, **self.fixed, **config)
        return inst

    def call(self, script, args, kw):
        from . import launch as L
        sig = L._signature(self.cls)
        pos = _positional(sig, args, kw)
        spec_key, *_ = L._general_arguments(self.cls, sig.params, pos)
        sizes = tuple(bucket(int(a)) for p, a in zip(sig.params, pos) if p.kind == "scalar" and not p.dtype.is_float)
        memo = (spec_key, sizes)
        winner = self.winners.get(memo)
        if winner is None:
            with self.lock:
                winner = self.winners.get(memo)
                if winner is None:
                    if self.env is None:
                        self.env = environment(self.compile_only_arch)
                    key = tuning_key(self.cls, self.fixed, spec_key, pos, sig.params, self.env)
                    entry = load(key)
                    if entry is None:
                        entry = self.tune(key, args, kw)
                        store(entry)
                    with _reports_lock:
                        _reports[key_hash(key)] = entry
                    winner = self.instance(entry["winner"])
                    self.winners[memo] = winner
        if self.compile_only_arch is None:
            winner(*args, **kw)
        return None

    def tune(self, key, args, kw):
        from . import launch as L
        t0 = time.perf_counter()
        progress = _Progress(self.cls.__name__, len(self.configs))
        results = [{"config": c} for c in self.configs]
        instances = [self.instance(c) for c in self.configs]

        sig = L._signature(self.cls)
        constants = {p.name: a for p, a in zip(sig.params, _positional(sig, args, kw)) if p.kind == "const"}

        def build(i):
            if self.compile_only_arch is not None:
                _C.compile_gpu(L.trace(instances[i], constants), arch=self.compile_only_arch)
                return None
            return L.prepare(instances[i], args, kw)

        prepared = [None] * len(self.configs)
        done = 0
        workers = min(len(self.configs), max(2, os.cpu_count() or 2))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            futures = {pool.submit(build, i): i for i in range(len(self.configs))}
            for f in concurrent.futures.as_completed(futures):
                i = futures[f]
                try:
                    prepared[i] = f.result()
                except (_C.Error, RuntimeError) as e:
                    results[i]["error"] = str(e).splitlines()[0][:300]
                done += 1
                progress.show("compile", done)
        compile_s = time.perf_counter() - t0
        repeat = int(os.environ.get("TILUS_AUTOTUNE_REPEAT", "10"))
        timer = self.timer
        survivors = [i for i in range(len(self.configs)) if "error" not in results[i]]
        for n, i in enumerate(survivors):
            progress.show("bench", n + 1)
            try:
                if timer is not None:
                    ms = timer(self.configs[i], repeat)
                else:
                    compiled, _, values, extents, owner, stream = prepared[i]
                    run = lambda: L.run(compiled, values, extents, owner, stream)  # noqa: E731
                    ms = (_cuda_timer if compiled.backend == "gpu" else _wall_timer)(run, repeat)
                results[i]["ms"] = ms
            except (_C.Error, RuntimeError) as e:
                results[i]["error"] = str(e).splitlines()[0][:300]
        progress.done()
        timed = [r for r in results if "ms" in r]
        if not timed:
            raise CompileError(self.where + f"autotune {self.cls.__name__}: no config compiled and ran:\n" +
                               "\n".join(f"  {r['config']}: {r['error']}" for r in results))
        best = min(timed, key=lambda r: r["ms"])
        skipped = [r for r in results if "error" in r]
        if skipped:
            print(f"tilus autotune {self.cls.__name__}: skipped {len(skipped)} of {len(results)} configs:", file=sys.stderr)
            for r in skipped:
                print(f"  {r['config']}: {r['error']}", file=sys.stderr)
        return {"key": key, "winner": best["config"], "results": results,
                "compile_s": round(compile_s, 3), "tuning_s": round(time.perf_counter() - t0, 3)}


def _positional(sig, args, kw):
    kw = {k: v for k, v in kw.items() if k != "stream"}
    if not kw:
        return list(args)
    names = [p.name for p in sig.params]
    out = list(args) + [None] * (len(names) - len(args))
    for k, v in kw.items():
        if k in names:
            out[names.index(k)] = v
    return out


def autotune_report(file=None):
    """Prints the configs and times of every tuning result of this process (tuned or loaded)."""
    file = file or sys.stdout
    with _reports_lock:
        entries = list(_reports.values())
    if not entries:
        print("tilus autotune: nothing tuned in this process", file=file)
    for e in entries:
        k = e["key"]
        print(f"{k['script']}  sizes {k['sizes']}  fixed {k['fixed']}  on {k['gpu']} "
              f"(tuned in {e['tuning_s']:.2f} s, compile {e['compile_s']:.2f} s)", file=file)
        rows = sorted(e["results"], key=lambda r: r.get("ms", float("inf")))
        for r in rows:
            mark = "*" if r["config"] == e["winner"] else " "
            t = f"{r['ms']:.4f} ms" if "ms" in r else f"skipped: {r['error']}"
            print(f"  {mark} {r['config']}  {t}", file=file)
    return entries
