"""``tilus.ir.layout``: ``RegisterLayout`` and the layout functions (``ops``)."""
from ... import RegisterLayout
from . import ops

__all__ = ["RegisterLayout", "ops"]
