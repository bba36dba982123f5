"""``self.fence``: proxy fences (NVIDIA Tilus's group)."""

from ..tracing import _builder, _here
from ._args import _choice


class FenceGroup:
    """Proxy fences (``self.fence``)."""

    def proxy_async(self, space: str = "shared") -> None:
        """Orders this thread's generic-proxy accesses of ``space`` ("shared" or "global") with the
        async proxy's (TMA). The passes add the ones TMA stores of generic writes need."""
        loc = _here()
        _builder().fence_proxy_async(_choice(space, ("shared", "global"), "fence.proxy_async: space", loc), loc)
