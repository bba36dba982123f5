#include "tilus/passes/select_copy_instructions.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <unordered_map>

#include "range_tracking.h"
#include "tilus/passes/copy_facts.h"
#include "tilus/passes/infer_layouts.h"

namespace tilus {

namespace {

std::string exprs_str(const std::vector<Expr>& es) {
  std::string s = "[";
  for (size_t i = 0; i < es.size(); ++i) s += (i ? ", " : "") + to_string(es[i]);
  return s + "]";
}

std::string region_str(const CopyRegion& r) {
  return fmt::format("{} (offsets {}, extents {})", r.tensor.type_str(), exprs_str(r.offsets), exprs_str(r.extents));
}

int64_t bytes_of(DataType t) { return std::max<int64_t>(1, t.bits() / 8); }

int64_t pow2_divisor(int64_t x, int64_t cap) {
  int64_t p = 1;
  while (p * 2 <= cap && x % (p * 2) == 0) p *= 2;
  return p;
}

class CopySelector : public RangeTrackingMutator {
 public:
  CopySelector(const Kernel& k, const Target& t)
      : RangeTrackingMutator(k, Options{.strided_loops = true, .param_facts = true}), kernel_(k), target_(t) {
    scopes_.push_back({0, k.num_threads()});
  }

 protected:
  Stmt mutate_thread_group(const Stmt& s, const ThreadGroupStmtNode& n) override {
    scopes_.push_back({scopes_.back().begin + n.thread_begin, n.num_threads});
    Stmt r = RangeTrackingMutator::mutate_thread_group(s, n);
    scopes_.pop_back();
    return r;
  }

  Stmt mutate_inst(const Stmt& s, const Inst& inst) override {
    bind_axes(inst);
    record_view(*inst);
    if (auto i = inst_as<CopyAsyncInst>(inst)) {
      int64_t w = copy_async_vector(*i);
      if (w == i->vector) return s;
      auto c = std::make_shared<CopyAsyncInst>(*i);
      c->vector = w;
      return make_inst_stmt(c);
    }
    if (auto i = inst_as<CopyInst>(inst)) {
      auto c = std::make_shared<CopyInst>(*i);
      select(*c);
      return make_inst_stmt(c);
    }
    return s;
  }

 private:
  struct Scope {
    int64_t begin, threads;
  };
  const Kernel& kernel_;
  const Target& target_;
  std::vector<Scope> scopes_;
  std::unordered_map<const TensorNode*, GlobalAccess> globals_;
  std::unordered_map<const TensorNode*, SharedView> shared_;

  // The address maps of global and shared tensors, as the emitter builds them.
  void record_view(const InstNode& inst) {
    if (auto* g = dynamic_cast<const GlobalViewInst*>(&inst)) {
      globals_[g->out.get()] = global_access(kernel_, *g);
    } else if (auto* a = dynamic_cast<const AllocateSharedInst*>(&inst)) {
      shared_[a->out.get()] = root_view(*a);
    } else if (auto* sl = dynamic_cast<const SliceSharedInst*>(&inst)) {
      auto it = shared_.find(sl->src.get());
      if (it != shared_.end()) shared_[sl->out.get()] = slice_view(it->second, *sl);
    }
  }

  [[noreturn]] void fail(const CopyInst& c, const std::string& what) const {
    throw CompileError(fmt::format("{}: {}; src {}, dst {}", c.display_name(), what, region_str(c.src),
                                   region_str(c.dst)),
                       c.loc);
  }

  const GlobalAccess& global(const InstNode& inst, const Tensor& t) const {
    auto it = globals_.find(t.get());
    if (it == globals_.end())
      throw CompileError(fmt::format("{}: global tensor {} is not a global_view of this kernel", inst.display_name(),
                                     t.type_str()),
                         inst.loc);
    return it->second;
  }
  const SharedView& shared(const InstNode& inst, const Tensor& t) const {
    auto it = shared_.find(t.get());
    if (it == shared_.end())
      throw CompileError(fmt::format("{}: shared tensor {} is used before its allocation", inst.display_name(),
                                     t.type_str()),
                         inst.loc);
    return it->second;
  }

  // The widest vector a copy region allows along tile dim `dim`.
  int64_t region_vector(const CopyInst& c, const CopyRegion& r, int tile_rank, int dim, int64_t run) const {
    if (r.tensor.is_global()) return global_vector_width(ctx_, region_access(global(c, r.tensor), r, tile_rank), dim, run);
    return shared_vector_width(ctx_, region_view(shared(c, r.tensor), r, tile_rank), dim, run);
  }

  int64_t copy_async_vector(const CopyAsyncInst& i) const {
    RegisterLayout l = default_register_layout(i.dst.static_shape(), i.dst.dtype(), scopes_.back().threads);
    Contiguity cc = contiguity(l);
    GlobalAccess g = tile_access(global(i, i.src), i.offsets, i.dims,
                                 i.check_bounds ? i.checked_dims : std::optional(std::vector<int>{}));
    return std::min(global_vector_width(ctx_, g, cc.dim, cc.run),
                    shared_vector_width(ctx_, shared(i, i.dst), cc.dim, cc.run));
  }

  // Why the copy cannot be a TMA copy. TMA is not lowered yet, so even a legal box is "not
  // legal on this target"; the box rules (DESIGN 5) are checked so the reason is precise.
  std::string tma_verdict(const CopyInst& c) const {
    if (!target_.has_tma()) return fmt::format("not legal on this target ({} has no TMA)", target_.arch);
    bool g2s = c.src.tensor.is_global() && c.dst.tensor.is_shared();
    bool s2g = c.src.tensor.is_shared() && c.dst.tensor.is_global();
    if (!g2s && !s2g) return "not legal: TMA moves global <-> shared tiles";
    const CopyRegion& g = g2s ? c.src : c.dst;
    const CopyRegion& sm = g2s ? c.dst : c.src;
    int64_t eb = bytes_of(g.tensor.dtype());
    const GlobalAccess& acc = global(c, g.tensor);
    for (size_t d = 0; d < g.extents.size(); ++d) {
      Expr e = simplify(g.extents[d], ctx_);
      if (!e.is_int_const()) return fmt::format("not legal: box extent {} of dim {} is not a constant", to_string(e), d);
      if (e.int_value() > 256) return fmt::format("not legal: box extent {} of dim {} exceeds 256", e.int_value(), d);
    }
    int inner = int(g.extents.size()) - 1;
    if (inner < 0) return "not legal: a rank-0 box";
    if (!acc.strides[inner].is_int_const(1)) return "not legal: the innermost global dim is not contiguous";
    if (simplify(g.extents[inner], ctx_).int_value() * eb % 16)
      return fmt::format("not legal: the innermost box is {} bytes, not a multiple of 16",
                         simplify(g.extents[inner], ctx_).int_value() * eb);
    if (acc.pointer_alignment % 16) return "not legal: the global base pointer is not known to be 16-byte aligned";
    for (int d = 0; d < inner; ++d)
      if (ctx_.divisor(simplify(acc.strides[d], ctx_)) * eb % 16)
        return fmt::format("not legal: global stride {} of dim {} is not a known multiple of 16 bytes",
                           to_string(acc.strides[d]), d);
    const SharedLayout& sl = sm.tensor->shared_layout.defined() ? sm.tensor->shared_layout : SharedLayout();
    if (sl.defined() && !sl.swizzle().none()) {
      const Swizzle& z = sl.swizzle();
      if ((int64_t(1) << z.base) * eb != 16 || z.bits < 1 || z.bits > 3)
        return "not legal: the shared swizzle is not TMA's 32B / 64B / 128B pattern";
    }
    return "not legal on this target (TMA copies are not lowered yet)";
  }

  // Applies coalesced_width to the widest legal vector `legal` (of a run of `run` slots).
  int64_t force_width(CopyInst& c, int64_t legal, int64_t run, std::vector<std::string>& notes) const {
    if (!c.coalesced_width) return legal;
    int64_t want = *c.coalesced_width;
    if (want <= legal) return want;
    std::string why = fmt::format("coalesced_width={} is not legal here (contiguous, aligned vectors of at most {} "
                                  "elements of {} on both sides{}); using {}",
                                  want, legal, c.dst.tensor.dtype().name(),
                                  run < want ? fmt::format(", runs of {}", run) : "", legal);
    spdlog::warn("{}: {} at {}", c.display_name(), why, c.loc.str());
    notes.push_back(why);
    return legal;
  }

  void select(CopyInst& c) const {
    c.selected.clear();
    c.vector = 0;
    c.mapping = RegisterLayout();
    c.note.clear();
    const Tensor& s = c.src.tensor;
    const Tensor& d = c.dst.tensor;
    DataType dt = d.dtype();
    const Scope& scope = scopes_.back();
    std::vector<std::string> notes;
    bool g2s = s.is_global() && d.is_shared();
    bool s2g = s.is_shared() && d.is_global();
    std::string tma = tma_verdict(c);
    bool cp_async = c.use_cp_async || c.async_commit;
    // 1. Explicit TMA.
    if (c.use_tma) fail(c, "use_tma asks for a TMA copy, which is " + tma);
    // 2. Explicit cp.async.
    if (cp_async) {
      if (!g2s) fail(c, "cp.async copies global to shared memory");
      if (!target_.has_cp_async()) fail(c, fmt::format("cp.async needs sm_80 or newer, the target is {}", target_.arch));
    } else {
      // 3. Automatic TMA.
      if ((g2s || s2g) && !c.disable_tma) notes.push_back("tma: " + tma);
      // 4. ldmatrix / stmatrix.
      bool load = s.is_shared() && d.is_register();
      bool store = s.is_register() && d.is_shared();
      if ((load || store) && !c.loop_layout.defined() && !c.coalesced_width) {
        const CopyRegion& mem = load ? c.src : c.dst;
        const Tensor& reg = load ? d : s;
        auto view = region_view(shared(c, mem.tensor), mem, reg.rank());
        if (plan_matrix_copy(ctx_, target_.sm, view, reg, scope.threads, scope.begin, load)) {
          c.selected = load ? "ldmatrix" : "stmatrix";
          c.note = fmt::format("{}", fmt::join(notes, "; "));
          return;
        }
      }
    }
    // 5. Vectorized SIMT (or the vectors of the explicit cp.async).
    if (s.is_register() || d.is_register()) {
      const Tensor& reg = s.is_register() ? s : d;
      const CopyRegion& mem = s.is_register() ? c.dst : c.src;
      if (c.loop_layout.defined())
        fail(c, "loop_layout maps the threads of memory-to-memory copies; here the register tensor's layout does");
      if (!reg->layout.defined()) fail(c, "the register tensor has no layout; run infer_layouts first");
      if (s.is_register())
        for (size_t k = 0; k < mem.extents.size(); ++k) {
          int rk = int(k) - int(mem.extents.size()) + reg.rank();
          int64_t re = rk >= 0 ? reg.static_shape()[rk] : 1;
          Expr me = simplify(mem.extents[k], ctx_);
          if (!me.is_int_const(re))
            fail(c, "a register tensor is stored to a region of its own extents (right-aligned; extra leading "
                    "extents 1)");
        }
      Contiguity cc = contiguity(reg->layout);
      int64_t legal = region_vector(c, mem, reg.rank(), cc.dim, cc.run);
      c.vector = force_width(c, legal, cc.run, notes);
      c.selected = "simt";
    } else {
      std::vector<int64_t> extents;
      for (auto& e : c.dst.extents) {
        Expr v = simplify(e, ctx_);
        if (!v.is_int_const())
          fail(c, fmt::format("memory-to-memory copies need constant extents, got {}", exprs_str(c.dst.extents)));
        extents.push_back(v.int_value());
      }
      int rank = int(extents.size());
      auto legal_along = [&](int dim, int64_t run) {
        return std::min(region_vector(c, c.src, rank, dim, run), region_vector(c, c.dst, rank, dim, run));
      };
      if (c.scalar) {
        c.mapping = replicated(scope.threads) * local(std::vector<int64_t>(rank, 1));
        c.vector = 1;
      } else if (c.loop_layout.defined()) {
        c.mapping = c.loop_layout;
        Contiguity cc = contiguity(c.loop_layout);
        c.vector = force_width(c, legal_along(cc.dim, cc.run), cc.run, notes);
      } else {
        int64_t run = rank ? pow2_divisor(extents.back(), std::max<int64_t>(1, 16 / bytes_of(dt))) : 1;
        c.vector = force_width(c, rank ? legal_along(rank - 1, run) : 1, run, notes);
        c.mapping = default_register_layout(extents, dt, scope.threads, c.vector);
      }
      if (cp_async && c.vector * bytes_of(dt) < 4)
        notes.push_back(fmt::format("cp.async moves 4, 8 or 16 bytes; the widest legal vector here is {} byte{}: "
                                    "element by element, synchronously",
                                    c.vector * bytes_of(dt), c.vector * bytes_of(dt) == 1 ? "" : "s"));
      c.selected = cp_async ? "cp.async" : "simt";
    }
    c.note = fmt::format("{}", fmt::join(notes, "; "));
  }
};

}  // namespace

Program select_copy_instructions(const Program& program, const Target& target) {
  Program out;
  for (auto& k : program.kernels) {
    CopySelector pass(k, target);
    out.kernels.push_back(pass.mutate(k));
  }
  return out;
}

}  // namespace tilus
