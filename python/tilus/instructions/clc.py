"""``self.clc``: cluster launch control (sm_100), under NVIDIA Tilus's names and parameters: a running
block cancels a cluster that has not started yet and takes over its work (a persistent kernel's
scheduler). ``try_cancel`` is definition-driven; its method is written here for Tilus's positional
``multicast``.
"""
from typing import Tuple

from .._C import Expr
from ..tracing import SharedTensor, _builder, _here
from ._args import _barrier, _bool, _tensor
from .cluster import Dim3



class ClcGroup:
    """Cluster launch control (``self.clc``, sm_100).

    ``try_cancel(response, mbarrier, multicast)`` asks the hardware to cancel a cluster of this grid
    that has not started; its 16-byte response lands in ``response`` and completes 16 transaction
    bytes on ``mbarrier`` (the kernel expects them there: ``mbarrier.arrive_and_expect_tx(bar, 16)``).
    After the wait, ``query_response(response)`` says whether a cluster was canceled and gives its
    first block index, whose work the caller then does.
    """

    def try_cancel(self, response: SharedTensor, mbarrier, multicast: bool = False) -> None:
        """Asks to cancel a cluster that has not started (issued by one thread of the group).
        ``response``: 16 bytes of shared memory (``s[stage]`` of a shared int32[stages, 4]);
        ``mbarrier`` (``bars[i]``): 16 bytes complete on it when the response has landed;
        ``multicast=True``: the response lands at ``response``'s offset in every block of the
        cluster, completing on each block's barrier at ``mbarrier``'s offset."""
        loc = _here()
        _builder().defined("clc.try_cancel",
                           {"response": _tensor(response, "clc.try_cancel: response", loc, SharedTensor),
                            "mbarrier": _barrier(mbarrier, "clc.try_cancel: mbarrier", loc)}, {},
                           {"multicast": str(_bool(multicast, "clc.try_cancel: multicast", loc)).lower()}, loc)

    def query_response(self, response: SharedTensor) -> Tuple[Expr, "Dim3"]:
        """``(is_canceled, blockIdx)`` of a landed response: ``is_canceled`` a bool scalar, and where it
        is true the first block index of the canceled cluster as a ``Dim3`` of int32 scalars (its
        values are undefined where it is false)."""
        loc = _here()
        valid, x, y, z = _builder().clc_query_response(
            _tensor(response, "clc.query_response: response", loc, SharedTensor), loc)
        return valid, Dim3(x, y, z)


