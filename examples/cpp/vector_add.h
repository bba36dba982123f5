// Vector add: c = a + b, one tile of `block` elements per thread block.
#pragma once

#include "tilus/tilus.h"

namespace examples {
using namespace tilus;

struct VectorAdd : Script {
  static constexpr const char* param_names = "n, a, b, c";
  int64_t block = 1024;
  int64_t warps = 4;

  VectorAdd() = default;
  explicit VectorAdd(int64_t block, int64_t warps = 4) : block(block), warps(warps) {}

  void operator()(Int32 n, Ptr<f32> a, Ptr<f32> b, Ptr<f32> c) {
    attrs.blocks = {cdiv(n, block)};
    attrs.warps = warps;
    auto ga = global_view(a, {n});
    auto gb = global_view(b, {n});
    auto gc = global_view(c, {n});
    Expr offset = let("offset", blockIdx.x * block);
    auto x = load_global(ga, {.offsets = {offset}, .shape = {block}});
    auto y = load_global(gb, {.offsets = {offset}, .shape = {block}});
    store_global(gc, x + y, {.offsets = {offset}});
  }
};

}  // namespace examples
