// tilus: a tile-level GPU kernel compiler. This header brings in the C++ API.
#pragma once

#include "tilus/ir/dtype.h"
#include "tilus/ir/error.h"
#include "tilus/ir/expr.h"
#include "tilus/ir/layout.h"
#include "tilus/ir/printer.h"
#include "tilus/ir/program.h"
#include "tilus/ir/verifier.h"
#include "tilus/lang/script.h"
#include "tilus/passes/pipeline.h"
#include "tilus/runtime/aot.h"
#include "tilus/runtime/jit.h"
