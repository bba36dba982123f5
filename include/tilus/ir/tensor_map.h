// A TMA tensor map: what the runtime encodes (cuTensorMapEncodeTiled, or
// cuTensorMapEncodeIm2col for c2d_im2col) for a kernel's TMA copies through one global view. select_instructions decides it (Kernel::tensor_maps); the
// CUDA emitter passes it as a `const __grid_constant__` parameter after the kernel's own;
// the launcher encodes it from each launch's arguments (cached per pointer and sizes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tilus/ir/dtype.h"
#include "tilus/ir/error.h"
#include "tilus/ir/expr.h"

namespace tilus {

struct TensorMapSpec {
  int param = -1;              // the pointer parameter the view is built on
  Expr offset;                 // bytes from the pointer to the view's first element (int64)
  DataType dtype;              // the view's elements
  std::vector<Expr> shape;     // global dims, outermost first, over the scalar parameters
  std::vector<Expr> strides;   // in elements, the innermost 1
  std::vector<int64_t> box;    // per global dim; im2col: {pixels, channels} of one load
  int swizzle_bytes = 0;       // 0 (none), 32, 64, 128
  // im2col mode (an NHWC view): the pixel box of each spatial dim is [lower, size - 1 + upper],
  // walked with the traversal stride.
  bool im2col = false;
  int64_t lower = 0, upper = 0, traversal_stride = 1;
  SourceLoc loc;               // the first TMA copy that uses it (for launch errors)
  std::string inst;            // its name

  // Same map (the copies may share one parameter).
  bool same(const TensorMapSpec& o) const {
    if (param != o.param || dtype != o.dtype || box != o.box || swizzle_bytes != o.swizzle_bytes ||
        im2col != o.im2col || lower != o.lower || upper != o.upper || traversal_stride != o.traversal_stride ||
        shape.size() != o.shape.size() || !structural_equal(offset, o.offset))
      return false;
    for (size_t d = 0; d < shape.size(); ++d)
      if (!structural_equal(shape[d], o.shape[d]) || !structural_equal(strides[d], o.strides[d])) return false;
    return true;
  }
};

}  // namespace tilus
