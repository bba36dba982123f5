"""The instruction families of ``tilus.Script``, one module per family (docs/architecture.md,
"Adding an instruction"). ``defined`` makes the methods of the definition-driven instructions
from their definitions in the C++ core (``tilus._C.instruction_defs()``)."""
