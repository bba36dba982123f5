"""Compilation targets under NVIDIA Tilus's names (``tilus.target``, ``tilus.get_current_target``).

    tilus.get_current_target()                      # Target('nvgpu', 'sm90a', ...) on an H100
    tilus.get_current_target().supports(nvgpu_sm90) # True there

A ``Target`` names a GPU architecture (``kind`` "nvgpu", ``arch`` "sm90a") or, where no GPU can be
used, tilus's CPU backend (``kind`` "cpu"). tilus picks the target of each launch from its
arguments (docs/python.md, "Where it runs"); these objects only describe it.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

from . import _C


@dataclass(frozen=True)
class TargetProperties:
    """What a target is: its compute capability (major, minor), its feature suffix (None, "a" for
    the architecture-specific variant, "f" for the family variant) and its shared memory per block
    in bytes (0: not known)."""
    compute_capability: Tuple[int, int] = (0, 0)
    feature_suffix: Optional[str] = None
    shared_memory_per_block: int = 0


@dataclass(frozen=True)
class Target:
    """A compilation target: ``kind`` ("nvgpu", "cpu", or "gpgpu" for any GPU), ``arch`` ("sm90a",
    "cpu", "any") and its ``properties``."""
    kind: str
    arch: str
    properties: TargetProperties = TargetProperties()

    def __str__(self):
        return f"{self.kind}/{self.arch}"

    def is_nvgpu(self) -> bool:
        """True for an NVIDIA GPU target."""
        return self.kind == "nvgpu"

    def is_amdgpu(self) -> bool:
        """False: tilus has no AMD GPU targets (kept for NVIDIA Tilus's API)."""
        return self.kind == "amdgpu"

    def is_cpu(self) -> bool:
        """True for tilus's CPU backend."""
        return self.kind == "cpu"

    def supports(self, target: "Target") -> bool:
        """Whether every GPU this target runs on also runs code built for ``target``: the same kind
        and a compute capability at least ``target``'s; an "a" target needs exactly its own
        architecture with the "a" suffix, an "f" target the same major version with "a" or "f".
        Every GPU target supports ``gpgpu_any``; the CPU backend supports only itself."""
        if not isinstance(target, Target):
            raise TypeError(f"Target.supports: expects a Target, got {type(target).__name__}")
        if target == gpgpu_any:
            return self.kind in ("nvgpu", "gpgpu")
        if self.kind != target.kind:
            return False
        mine, theirs = self.properties.compute_capability, target.properties.compute_capability
        suffix = target.properties.feature_suffix
        if suffix is None:
            return mine >= theirs
        if suffix == "f":
            return mine[0] == theirs[0] and mine[1] >= theirs[1] and self.properties.feature_suffix in ("a", "f")
        return mine == theirs and self.properties.feature_suffix == "a"


def _nvgpu(major, minor, suffix=None, smem_kib=0):
    arch = f"sm{major}{minor}{suffix or ''}"
    return Target("nvgpu", arch, TargetProperties((major, minor), suffix, smem_kib * 1024))


gpgpu_any = Target("gpgpu", "any")
nvgpu_any = Target("nvgpu", "any", TargetProperties((0, 0), None, 64 * 1024))
cpu = Target("cpu", "cpu")
nvgpu_sm70 = _nvgpu(7, 0, None, 96)
nvgpu_sm75 = _nvgpu(7, 5, None, 64)
nvgpu_sm80 = _nvgpu(8, 0, None, 163)
nvgpu_sm86 = _nvgpu(8, 6, None, 99)
nvgpu_sm89 = _nvgpu(8, 9, None, 99)
nvgpu_sm90 = _nvgpu(9, 0, None, 227)
nvgpu_sm90a = _nvgpu(9, 0, "a", 227)
nvgpu_sm100 = _nvgpu(10, 0, None, 227)
nvgpu_sm100f = _nvgpu(10, 0, "f", 227)
nvgpu_sm100a = _nvgpu(10, 0, "a", 227)
nvgpu_sm120 = _nvgpu(12, 0, None, 99)
nvgpu_sm120a = _nvgpu(12, 0, "a", 99)


def target_of_arch(arch: str) -> Target:
    """The Target of an arch string as tilus names it ("sm_90a", "sm_80", "cpu")."""
    if arch == "cpu":
        return cpu
    text = arch[len("sm_"):] if arch.startswith("sm_") else arch[len("sm"):] if arch.startswith("sm") else None
    suffix = None
    if text and text[-1] in "af":
        text, suffix = text[:-1], text[-1]
    if not text or not text.isdigit() or len(text) < 2:
        raise ValueError(f"tilus.target: not an architecture name: {arch!r} (sm_90a, sm_80, cpu)")
    major, minor = int(text[:-1]), int(text[-1])
    for t in globals().values():
        if isinstance(t, Target) and t.properties.compute_capability == (major, minor) and \
                t.properties.feature_suffix == suffix and t.kind == "nvgpu":
            return t
    return _nvgpu(major, minor, suffix)


def get_current_target() -> Target:
    """The target kernels of this process run on by default: the current GPU (its architecture with
    the "a" suffix where tilus compiles for it, e.g. ``sm90a`` on an H100) when one can be used,
    else the CPU backend (``Target("cpu", "cpu")``; NVIDIA Tilus raises there). ``TILUS_TARGET``
    overrides it as it overrides the launches (docs/environment.md)."""
    if _C.default_backend() != "gpu":
        return cpu
    return target_of_arch(_C.device_info()["arch"])
