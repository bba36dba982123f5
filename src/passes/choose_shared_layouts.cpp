#include "tilus/passes/choose_shared_layouts.h"

#include <fmt/format.h>

#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "tilus/ir/functor.h"

namespace tilus {

namespace {

// The swizzle of SharedLayout::row_major_swizzled (the 16-byte units of any 8 consecutive rows
// in distinct bank groups) for a row-major tile, so ldmatrix reads and 16-byte cp.async / vector
// writes of a column of units are conflict-free. It permutes whole 16-byte units, so every
// vector access up to 16 bytes stays legal. Slices inherit the strides and swizzle of what they
// slice (the emitter addresses them through their root allocation).
std::optional<Swizzle> auto_swizzle(const Tensor& t) {
  int64_t bytes = t.dtype().bits() / 8;
  if (t.dtype().is_subbyte() || bytes < 1) return std::nullopt;
  auto shape = t.static_shape();
  if (t->shared_layout != SharedLayout::row_major(shape)) return std::nullopt;
  Swizzle z = SharedLayout::row_major_swizzled(shape, bytes).swizzle();
  if (z.none()) return std::nullopt;
  return z;
}

Kernel choose_layouts(const Kernel& k) {
  struct Collect : StmtVisitor {
    std::vector<const SliceSharedInst*> slices;  // in program order
    std::vector<const ReshapeSharedInst*> reshapes;
    std::vector<std::pair<const TensorNode*, const TensorNode*>> views;  // (view, what it views), in order
    std::vector<Tensor> roots;
    std::unordered_map<const TensorNode*, SharedLayout> annotated;
    std::unordered_map<const TensorNode*, const InstNode*> annotations;
    void visit_inst(const InstNode& i) override {
      if (auto* a = dynamic_cast<const AllocateSharedInst*>(&i)) roots.push_back(a->out);
      if (auto* s = dynamic_cast<const SliceSharedInst*>(&i)) slices.push_back(s), views.emplace_back(s->out.get(), s->src.get());
      if (auto* r = dynamic_cast<const ReshapeSharedInst*>(&i)) reshapes.push_back(r), views.emplace_back(r->out.get(), r->src.get());
      if (auto* a = dynamic_cast<const AnnotateLayoutInst*>(&i); a && a->shared_layout.defined())
        annotated[a->tensor.get()] = a->shared_layout, annotations[a->tensor.get()] = a;
      if (auto* copy = dynamic_cast<const CopyInst*>(&i); copy && copy->use_tma)
        for (const CopyRegion* r : {&copy->src, &copy->dst})
          if (r->tensor.is_shared()) tma_operands.push_back(r->tensor.get());
    }
    // Shared tensors (or views) an explicit TMA copy moves: their roots must keep a layout TMA
    // can write.
    std::vector<const TensorNode*> tma_operands;
  } c;
  c.visit(k.body);
  for (auto& [t, inst] : c.annotations)
    if (std::none_of(c.roots.begin(), c.roots.end(), [t = t](const Tensor& r) { return r.get() == t; }))
      throw CompileError(fmt::format("annotate_layout: the shared layout of '{}' must be set on the shared_tensor "
                                     "allocation itself, not on a slice or view of it",
                                     static_cast<const AnnotateLayoutInst*>(inst)->tensor->name),
                         inst->loc);
  struct Rewrite : StmtMutator {
    Stmt mutate_inst(const Stmt& s, const Inst& inst) override {
      if (auto* a = inst_as<AnnotateLayoutInst>(inst); a && a->shared_layout.defined()) return nullptr;
      return StmtMutator::mutate_inst(s, inst);
    }
  } rewrite;
  // The roots of the TMA operands (slices name their source).
  std::unordered_set<const TensorNode*> tma_roots(c.tma_operands.begin(), c.tma_operands.end());
  for (auto it = c.views.rbegin(); it != c.views.rend(); ++it)
    if (tma_roots.count(it->first)) tma_roots.insert(it->second);
  for (const Tensor& t : c.roots) {
    SharedLayout layout = t->shared_layout;
    if (auto it = c.annotated.find(t.get()); it != c.annotated.end()) layout = it->second;
    else if (auto z = auto_swizzle(t); z && (z->shift == 3 || !tma_roots.count(t.get())))
      layout = SharedLayout(layout.shape(), layout.strides(), *z);  // rows over 128 bytes: TMA takes them unswizzled
    if (layout != t->shared_layout) rewrite.tensor_map[t.get()] = t.with_shared_layout(layout);
  }
  for (const SliceSharedInst* i : c.slices) {
    auto src = rewrite.tensor_map.find(i->src.get());
    if (src == rewrite.tensor_map.end()) continue;
    const SharedLayout& from = src->second->shared_layout;
    std::vector<int64_t> strides;
    for (int d : i->dims) strides.push_back(from.strides()[d]);
    rewrite.tensor_map[i->out.get()] =
        i->out.with_shared_layout(SharedLayout(i->out.static_shape(), strides, from.swizzle()));
  }
  // A reshape is row-major in its own shape over the row-major bytes of what it reshapes, with
  // their swizzle (a function of the element offset, which a row-major reshape keeps).
  for (const ReshapeSharedInst* i : c.reshapes) {
    auto src = rewrite.tensor_map.find(i->src.get());
    const SharedLayout& from = src == rewrite.tensor_map.end() ? i->src->shared_layout : src->second->shared_layout;
    if (from.strides() != SharedLayout::row_major(from.shape()).strides())
      throw CompileError(fmt::format("reshape_shared: '{}' has the shared layout {}; only a row-major tensor can be "
                                     "reshaped (remove the annotation that changed it)",
                                     i->src->name, from.str()),
                         i->loc);
    auto shape = i->out.static_shape();
    SharedLayout layout(shape, SharedLayout::row_major(shape).strides(), from.swizzle());
    if (layout != i->out->shared_layout) rewrite.tensor_map[i->out.get()] = i->out.with_shared_layout(layout);
  }
  return rewrite.mutate(k);
}

}  // namespace

SharedLayout auto_shared_layout(const Tensor& t) {
  const SharedLayout& l = t->shared_layout;
  auto z = auto_swizzle(t);
  return z ? SharedLayout(l.shape(), l.strides(), *z) : l;
}

Program choose_shared_layouts(const Program& program) {
  return map_kernels(program, [](const Kernel& k) { return choose_layouts(k); });
}

}  // namespace tilus
