#include "tilus/passes/infer_layouts.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "tilus/ir/functor.h"
#include "tilus/ir/inst_def.h"
#include "tilus/passes/choose_shared_layouts.h"
#include "thread_dependence.h"

namespace tilus {

namespace {

int64_t largest_pow2_divisor(int64_t n, int64_t cap) {
  int64_t p = 1;
  while (p * 2 <= cap && n % (p * 2) == 0) p *= 2;
  return p;
}

// The default layout: every thread holds 16-byte vectors along the last dim; threads
// spread over the last dim first, then the dims before it; threads beyond the tile's
// parallelism replicate it.
}  // namespace

RegisterLayout default_register_layout(const std::vector<int64_t>& shape, DataType dtype, int64_t threads,
                                       int64_t vector) {
  int r = int(shape.size());
  std::vector<int64_t> inner(r, 1), spread(r, 1), outer(r, 1);
  if (r == 0) return replicated(threads);
  int64_t vec_cap = vector > 0 ? vector : std::max<int64_t>(1, 128 / std::max(1, dtype.bits()));
  if (vector <= 0 && (dtype.bits() >= 8 || 8 % std::max(1, dtype.bits()) == 0)) {
    // Elements per thread, in whole bytes (a sub-byte tile keeps a byte per thread: no two
    // threads share one, and a byte view of the tile has the same mapping).
    int64_t elements = 1, per_byte = std::max(1, 8 / std::max(1, dtype.bits()));
    for (int64_t e : shape) elements *= e;
    int64_t per_thread = elements / std::max<int64_t>(1, threads) / per_byte * per_byte;
    vec_cap = std::min(vec_cap, std::max<int64_t>(per_byte, per_thread));
  }
  inner[r - 1] = largest_pow2_divisor(shape[r - 1], vec_cap);
  int64_t left = threads;
  for (int d = r - 1; d >= 0; --d) {
    int64_t rest = shape[d] / inner[d];
    spread[d] = largest_pow2_divisor(rest, left);
    left /= spread[d];
    outer[d] = rest / spread[d];
  }
  RegisterLayout l = local(outer) * spatial(spread) * local(inner);
  if (left > 1) l = replicated(left) * l;
  return l;
}

RegisterLayout tcgen05_ldst_layout(const std::vector<int64_t>& shape) {
  return spatial({shape.at(0), 1}) * local({1, shape.at(1)});
}

namespace {

bool mma_eligible(DataType ab, DataType c, int64_t m, int64_t n, int64_t k, int64_t threads) {
  bool in_ok = ab == dtypes::float16 || ab == dtypes::bfloat16;
  bool acc_ok = c == dtypes::float32 || (c == dtypes::float16 && ab == dtypes::float16);
  return in_ok && acc_ok && m % 16 == 0 && n % 8 == 0 && k % 16 == 0 && threads % 32 == 0;
}

// Splits `workers` over a [m, n] grid of units (each unit_m x unit_n elements): (wm, wn)
// with wm | m, wn | n, as many workers used as possible, then the most square per-worker
// tiles in elements.
std::pair<int64_t, int64_t> split_workers(int64_t m_units, int64_t n_units, int64_t workers, int64_t unit_m = 1,
                                          int64_t unit_n = 1) {
  std::pair<int64_t, int64_t> best{1, 1};
  int64_t best_used = 0;
  double best_skew = 1e30;
  for (int64_t wm = 1; wm <= workers; wm *= 2) {
    if (m_units % wm) continue;
    for (int64_t wn = 1; wm * wn <= workers; wn *= 2) {
      if (n_units % wn) continue;
      int64_t used = wm * wn;
      double skew = std::abs(double(m_units * unit_m) / wm - double(n_units * unit_n) / wn);
      if (used > best_used || (used == best_used && skew < best_skew)) {
        best = {wm, wn};
        best_used = used;
        best_skew = skew;
      }
    }
  }
  return best;
}

// m16n8k16 fragments (PTX ISA, mma.sync.aligned.m16n8k16 with .f16/.bf16 operands).
RegisterLayout mma_a() { return column_local({2, 2}) * spatial({8, 4}) * local({1, 2}); }
RegisterLayout mma_b() { return local({2, 1}) * column_spatial({4, 8}) * local({2, 1}); }
RegisterLayout mma_c() { return local({2, 1}) * spatial({8, 4}) * local({1, 2}); }

}  // namespace

namespace {

// mma.sync over a wm x wn grid of warps (the block's other warps replicate it), the repeats
// major in m and n (tilus's default) or the warps major (NVIDIA Tilus's order).
DotPlan mma_plan(int64_t m, int64_t n, int64_t k, int64_t threads, int64_t wm, int64_t wn, bool warps_major = false) {
  DotPlan d;
  DotTiling& t = d.tiling;
  d.op = MachineOp::MmaSync;
  t.warps_m = wm;
  t.warps_n = wn;
  t.replicas = threads / 32 / (wm * wn);
  t.rep_m = m / 16 / wm;
  t.rep_n = n / 8 / wn;
  t.rep_k = k / 16;
  t.warps_major = warps_major;
  RegisterLayout wa = spatial({wm, 1}) * replicated(wn), wb = replicated(wm) * spatial({1, wn}),
                 wc = spatial({wm, wn});
  RegisterLayout ra = local({t.rep_m, t.rep_k}), rb = local({t.rep_k, t.rep_n}), rc = local({t.rep_m, t.rep_n});
  d.a = (warps_major ? wa * ra : ra * wa) * mma_a();
  d.b = (warps_major ? wb * rb : rb * wb) * mma_b();
  d.c = (warps_major ? wc * rc : rc * wc) * mma_c();
  if (t.replicas > 1) {
    d.a = replicated(t.replicas) * d.a;
    d.b = replicated(t.replicas) * d.b;
    d.c = replicated(t.replicas) * d.c;
  }
  return d;
}

}  // namespace

std::vector<DotPlan> dot_plans(DataType ab, DataType c, int64_t m, int64_t n, int64_t k, int64_t threads) {
  std::vector<DotPlan> plans{plan_dot(ab, c, m, n, k, threads)};
  if (plans[0].op != MachineOp::MmaSync) return plans;
  int64_t warps = threads / 32;
  for (int64_t wm = 1; wm <= warps; ++wm) {
    if (warps % wm || (m / 16) % wm || (n / 8) % (warps / wm)) continue;
    int64_t wn = warps / wm;
    if (wm == plans[0].tiling.warps_m && wn == plans[0].tiling.warps_n) continue;
    plans.push_back(mma_plan(m, n, k, threads, wm, wn));
  }
  // The warps-major order of every split where it differs (several warps and several repeats
  // along m or n).
  for (size_t i = 0, count = plans.size(); i < count; ++i) {
    const DotTiling& t = plans[i].tiling;
    if ((t.warps_m > 1 && t.rep_m > 1) || (t.warps_n > 1 && t.rep_n > 1))
      plans.push_back(mma_plan(m, n, k, threads, t.warps_m, t.warps_n, true));
  }
  return plans;
}

DotPlan plan_dot(DataType ab, DataType c, int64_t m, int64_t n, int64_t k, int64_t threads) {
  DotPlan d;
  DotTiling& t = d.tiling;
  if (mma_eligible(ab, c, m, n, k, threads)) {
    auto [wm, wn] = split_workers(m / 16, n / 8, threads / 32, 16, 8);
    return mma_plan(m, n, k, threads, wm, wn);
  } else {
    // SIMT outer product: thread (i, j) of a tm x tn grid owns a pm x pn block of c, a
    // full pm x k strip of a and a k x pn strip of b.
    auto [tm, tn] = split_workers(m, n, threads);
    d.op = MachineOp::SimtFma;
    t.threads_m = tm;
    t.threads_n = tn;
    t.replicas = threads / (tm * tn);
    t.per_m = m / tm;
    t.per_n = n / tn;
    d.a = local({t.per_m, k}) * spatial({tm, 1}) * replicated(tn);
    d.b = local({k, t.per_n}) * replicated(tm) * spatial({1, tn});
    d.c = local({t.per_m, t.per_n}) * spatial({tm, tn});
  }
  if (t.replicas > 1) {
    d.a = replicated(t.replicas) * d.a;
    d.b = replicated(t.replicas) * d.b;
    d.c = replicated(t.replicas) * d.c;
  }
  return d;
}

WgmmaPlan plan_wgmma(DataType ab, int64_t m, int64_t n, int64_t k, int64_t threads) {
  WgmmaPlan p;
  WgmmaTiling& t = p.tiling;
  t.groups = std::max<int64_t>(1, threads / 128);
  t.k_instr = ab.bits() == 8 ? 32 : 16;
  t.m_blocks = std::max<int64_t>(1, m / 64 / t.groups);
  t.n_instr = n;
  if (n > 256) {  // the widest multiple of 8 up to 256 that divides n
    t.n_instr = 256;
    while (t.n_instr > 8 && n % t.n_instr) t.n_instr -= 8;
  }
  t.n_blocks = std::max<int64_t>(1, n / t.n_instr);
  t.k_steps = std::max<int64_t>(1, k / t.k_instr);
  // One warp's 16 rows of an m64nN fragment: d[4i + 2h + j] = (lane / 4 + 8h, 8i + 2 (lane % 4) + j).
  RegisterLayout rows16 = local({1, std::max<int64_t>(1, t.n_instr / 8)}) * mma_c();
  p.d = spatial({t.groups, 1}) * local({t.m_blocks, t.n_blocks}) * spatial({4, 1}) * rows16;
  // a in registers: per m64 x k16 instruction, warp w holds rows 16w..16w+15 as mma.sync's
  // m16n8k16 A fragment; the instructions' fragments in (m block, k step) order.
  p.a = spatial({t.groups, 1}) * local({t.m_blocks, t.k_steps}) * spatial({4, 1}) * mma_a();
  return p;
}

namespace {

// A layout of `shape` derived from `out`'s layout for a broadcast operand: the dims where
// the operand has extent 1 (and the leading dims it lacks) are reduced.
std::optional<RegisterLayout> broadcast_operand(const RegisterLayout& out, const std::vector<int64_t>& shape) {
  int rank = out.rank(), r = int(shape.size());
  if (r > rank) return std::nullopt;
  std::vector<int> keep_dims, drop_dims;
  for (int d = 0; d < rank - r; ++d) drop_dims.push_back(d);
  for (int d = rank - r; d < rank; ++d)
    if (shape[d - (rank - r)] == 1 && out.shape()[d] != 1) keep_dims.push_back(d);
  RegisterLayout l = out;
  if (!keep_dims.empty()) l = l.reduce(keep_dims, true);
  if (!drop_dims.empty()) l = l.reduce(drop_dims, false);
  if (l.shape() != shape) return std::nullopt;
  return l;
}

// Changes the extent of the last dim's innermost local mode by bits_from / bits_to (a
// reinterpreting view of the same registers).
std::optional<RegisterLayout> rescale_last_dim(const RegisterLayout& l, int bits_from, int bits_to) {
  if (l.rank() == 0) return std::nullopt;
  auto modes = l.mode_shape();
  int last = int(modes.size()) - 1;
  if (last < 0 || l.mode_dim(last) != l.rank() - 1) return std::nullopt;
  auto& local_list = l.local_modes();
  if (std::find(local_list.begin(), local_list.end(), last) == local_list.end()) return std::nullopt;
  int64_t bits = modes[last] * bits_from;
  if (bits % bits_to) return std::nullopt;
  modes[last] = bits / bits_to;
  auto shape = l.shape();
  shape.back() = shape.back() / l.mode_shape()[last] * modes[last];
  return RegisterLayout(shape, modes, l.spatial_modes(), l.local_modes());
}

struct Relation {
  // dst = forward(src); src = backward(dst) when backward is set.
  const TensorNode* src;
  const TensorNode* dst;
  std::function<std::optional<RegisterLayout>(const RegisterLayout&)> forward, backward;
  const InstNode* inst;
};

// Two uses of one register tensor need different layouts: `first` and `second` (either may be
// null: the tensor's own layout). A CompileError for callers that do not convert.
struct LayoutConflict : CompileError {
  LayoutConflict(const std::string& message, SourceLoc loc, const TensorNode* t, const InstNode* first,
                 const InstNode* second)
      : CompileError(message, std::move(loc)), tensor(t), first(first), second(second) {}
  const TensorNode* tensor;
  const InstNode* first;
  const InstNode* second;
};

class LayoutSolver {
 public:
  // choices: the plan (index into dot_plans) of each dot; the default plan where absent.
  LayoutSolver(const Kernel& k, const std::unordered_map<const InstNode*, size_t>& choices)
      : kernel_(k), choices_(choices) {}

  Kernel run() {
    read_ = read_tensors(kernel_);
    collect(kernel_.body, kernel_.num_threads());
    for (auto& [t, info] : fixed_) assign(t, info.first, info.second);
    propagate();
    // Atomics whose old values are read need one thread per element: where nothing else decided
    // their operands' layout, the default without vectors (no replicas when the tile has an
    // element per thread).
    for (auto& [t, threads] : one_per_thread_) {
      if (known_.count(t)) continue;
      Tensor tensor = tensors_.at(t);
      assign(t, default_register_layout(tensor.static_shape(), tensor.dtype(), threads, 1), nullptr);
      propagate();
    }
    for (const TensorNode* t : order_) {
      if (known_.count(t)) continue;
      assign(t, default_for(t), nullptr);
      propagate();
    }
    struct Rewrite : StmtMutator {
      Stmt mutate_inst(const Stmt& s, const Inst& inst) override {
        if (inst_as<AnnotateLayoutInst>(inst) && inst_as<AnnotateLayoutInst>(inst)->layout.defined()) return nullptr;
        return StmtMutator::mutate_inst(s, inst);
      }
    } rewrite;
    for (auto& [t, layout] : known_) {
      Tensor tensor = tensors_.at(t);
      if (!tensor->layout.defined() || tensor->layout != layout) rewrite.tensor_map[t] = tensor.with_layout(layout);
    }
    return rewrite.mutate(kernel_);
  }

 private:
  // A tensor nothing constrains takes the default layout an earlier unconstrained tensor of its
  // shape (on as many threads) took, whatever its dtype, so that the tiles of two loops over the
  // same data (a softmax's max pass in float32 and its exp pass on float16 loads) agree and a
  // row statistic computed in one applies in the other; else the default of its shape and dtype.
  RegisterLayout default_for(const TensorNode* t) {
    const Tensor& tensor = tensors_.at(t);
    auto key = std::make_pair(tensor.static_shape(), threads_.at(t));
    auto it = defaults_.find(key);
    if (it != defaults_.end()) return it->second;
    RegisterLayout l = default_register_layout(key.first, tensor.dtype(), key.second);
    defaults_.emplace(key, l);
    return l;
  }
  std::map<std::pair<std::vector<int64_t>, int64_t>, RegisterLayout> defaults_;

  const Kernel& kernel_;
  const std::unordered_map<const InstNode*, size_t>& choices_;
  std::unordered_set<const TensorNode*> read_;
  std::vector<std::pair<const TensorNode*, int64_t>> one_per_thread_;
  std::vector<const TensorNode*> order_;
  std::unordered_map<const TensorNode*, Tensor> tensors_;
  std::unordered_map<const TensorNode*, int64_t> threads_;
  std::unordered_map<const TensorNode*, std::pair<RegisterLayout, const InstNode*>> fixed_;
  std::unordered_map<const TensorNode*, RegisterLayout> known_;
  std::unordered_map<const TensorNode*, const InstNode*> source_;
  std::vector<Relation> relations_;
  std::unordered_map<const TensorNode*, std::vector<size_t>> touching_;
  std::deque<const TensorNode*> work_;

  void add_tensor(const Tensor& t, int64_t threads) {
    if (!t.defined() || !t.is_register() || tensors_.count(t.get())) return;
    tensors_[t.get()] = t;
    threads_[t.get()] = threads;
    order_.push_back(t.get());
    if (t->layout.defined()) fixed_[t.get()] = {t->layout, nullptr};
  }

  void relate(const Tensor& src, const Tensor& dst, const InstNode& inst,
              std::function<std::optional<RegisterLayout>(const RegisterLayout&)> forward,
              std::function<std::optional<RegisterLayout>(const RegisterLayout&)> backward) {
    if (!src.defined() || !dst.defined() || !src.is_register() || !dst.is_register()) return;
    relations_.push_back({src.get(), dst.get(), std::move(forward), std::move(backward), &inst});
    touching_[src.get()].push_back(relations_.size() - 1);
    touching_[dst.get()].push_back(relations_.size() - 1);
  }

  void same(const Tensor& a, const Tensor& b, const InstNode& inst) {
    auto id = [](const RegisterLayout& l) { return std::optional<RegisterLayout>(l); };
    relate(a, b, inst, id, id);
  }

  void fix(const Tensor& t, const RegisterLayout& l, const InstNode& inst) {
    if (!t.defined() || !t.is_register()) return;
    auto it = fixed_.find(t.get());
    if (it != fixed_.end() && it->second.first != l) conflict(t, it->second.first, it->second.second, l, &inst);
    fixed_[t.get()] = {l, &inst};
  }

  [[noreturn]] void conflict(const Tensor& t, const RegisterLayout& a, const InstNode* ia, const RegisterLayout& b,
                             const InstNode* ib) {
    auto where = [](const InstNode* i) {
      return i ? fmt::format("{} at {}", i->display_name(), i->loc.str()) : std::string("its definition");
    };
    throw LayoutConflict(fmt::format("layout inference: {} '{}' needs {} for {} and {} for {}; the two uses need "
                                     "different thread mappings, and no conversion through shared memory can go "
                                     "between them (each is an annotation or updates the tensor in place)",
                                     t.type_str(), t->name, a.str(), where(ia), b.str(), where(ib)),
                         ib ? ib->loc : (ia ? ia->loc : SourceLoc{}), t.get(), ia, ib);
  }

  void assign(const TensorNode* t, const RegisterLayout& l, const InstNode* by) {
    auto it = known_.find(t);
    if (it != known_.end()) {
      if (it->second != l) conflict(tensors_.at(t), it->second, source_[t], l, by);
      return;
    }
    known_[t] = l;
    source_[t] = by;
    work_.push_back(t);
  }

  void propagate() {
    while (!work_.empty()) {
      const TensorNode* t = work_.front();
      work_.pop_front();
      for (size_t r : touching_[t]) {
        const Relation& rel = relations_[r];
        if (rel.src == t && rel.forward) {
          if (auto l = rel.forward(known_.at(t))) assign(rel.dst, *l, rel.inst);
        }
        if (rel.dst == t && rel.backward) {
          if (auto l = rel.backward(known_.at(t))) assign(rel.src, *l, rel.inst);
        }
      }
    }
  }

  void collect(const Stmt& s, int64_t threads) {
    if (!s) return;
    switch (s->kind) {
      case StmtKind::Seq:
        for (auto& c : static_cast<const SeqStmtNode&>(*s).stmts) collect(c, threads);
        return;
      case StmtKind::For: collect(static_cast<const ForStmtNode&>(*s).body, threads); return;
      case StmtKind::While: collect(static_cast<const WhileStmtNode&>(*s).body, threads); return;
      case StmtKind::If:
        collect(static_cast<const IfStmtNode&>(*s).then_body, threads);
        collect(static_cast<const IfStmtNode&>(*s).else_body, threads);
        return;
      case StmtKind::ThreadGroup: {
        auto& g = static_cast<const ThreadGroupStmtNode&>(*s);
        collect(g.body, g.num_threads);
        return;
      }
      case StmtKind::Inst: instruction(*static_cast<const InstStmtNode&>(*s).inst, threads); return;
      default: return;
    }
  }

  void instruction(const InstNode& inst, int64_t threads) {
    Tensor out = inst.output();
    add_tensor(out, threads);
    for (auto& [t, a] : inst.operands()) add_tensor(t, threads);
    switch (inst.kind()) {
      case InstKind::AnnotateLayout: {
        auto& i = static_cast<const AnnotateLayoutInst&>(inst);
        if (i.layout.defined()) fix(i.tensor, i.layout, inst);
        return;
      }
      case InstKind::Dot: {
        auto& i = static_cast<const DotInst&>(inst);
        if (i.a.rank() != 2 || i.b.rank() != 2 || i.c.rank() != 2) return;
        auto sa = i.a.static_shape(), sb = i.b.static_shape();
        auto plans = dot_plans(i.a.dtype(), i.c.dtype(), sa[0], sb[1], sa[1], threads);
        auto it = choices_.find(&inst);
        const DotPlan& d = plans[it == choices_.end() || it->second >= plans.size() ? 0 : it->second];
        fix(i.a, d.a, inst);
        fix(i.b, d.b, inst);
        fix(i.c, d.c, inst);
        same(i.c, i.out, inst);
        return;
      }
      case InstKind::WgmmaMma: {
        auto& i = static_cast<const WgmmaMmaInst&>(inst);
        if (i.a.rank() != 2 || (i.b.rank() != 2 && i.b.rank() != 3)) return;
        auto sa = i.a.static_shape();
        WgmmaPlan plan = plan_wgmma(i.a.dtype(), sa[0], i.n(), sa[1], threads);
        fix(i.d, plan.d, inst);
        if (i.a.is_register()) fix(i.a, plan.a, inst);
        return;
      }
      // tcgen05.ld / st: one thread per lane (select_instructions checks the group against the lanes).
      case InstKind::Tcgen05Load: {
        auto& i = static_cast<const Tcgen05LoadInst&>(inst);
        if (i.src.rank() == 2 && i.src.static_shape()[0] == threads) fix(out, tcgen05_ldst_layout(i.src.static_shape()), inst);
        return;
      }
      case InstKind::Defined: {
        auto& i = static_cast<const DefinedInst&>(inst);
        if (i.definition->name == "tcgen05.store") {
          const Tensor& t = i.tensor("tensor");
          if (t.rank() == 2 && t.static_shape()[0] == threads) fix(i.tensor("src"), tcgen05_ldst_layout(t.static_shape()), inst);
        }
        return;
      }
      case InstKind::Cast: same(static_cast<const CastInst&>(inst).x, out, inst); return;
      // Every thread holds the one element an item reads.
      case InstKind::Item: {
        auto& i = static_cast<const ItemInst&>(inst);
        fix(i.x, default_register_layout(i.x.static_shape(), i.x.dtype(), threads), inst);
        return;
      }
      // An atomic's old values come back in the threads that hold the operands.
      case InstKind::Atomic: {
        auto& i = static_cast<const AtomicInst&>(inst);
        same(i.values, out, inst);
        if (read_.count(out.get())) one_per_thread_.emplace_back(i.values.get(), threads);
        if (i.compare.defined()) same(i.values, i.compare, inst);
        if (i.indices.defined()) same(i.values, i.indices, inst);
        return;
      }
      // A shuffle moves slots between threads of value's layout: out keeps it.
      case InstKind::Shuffle: same(static_cast<const ShuffleInst&>(inst).value, out, inst); return;
      case InstKind::StoreGlobalVector: {
        // Every thread stores the whole vector it holds.
        auto& i = static_cast<const StoreGlobalVectorInst&>(inst);
        auto shape = i.value.static_shape();
        if (std::all_of(shape.begin(), shape.end(), [](int64_t d) { return d > 0; }))
          fix(i.value, replicated(threads) * local(shape), inst);
        return;
      }
      case InstKind::Assign: {
        auto& i = static_cast<const AssignInst&>(inst);
        same(i.src, i.dst, inst);
        return;
      }
      case InstKind::Elementwise: {
        auto& i = static_cast<const ElementwiseInst&>(inst);
        auto out_shape = out.static_shape();
        for (auto& in : i.inputs) {
          auto in_shape = in.static_shape();
          if (in_shape == out_shape) {
            same(in, out, inst);
          } else {
            relate(out, in, inst, [in_shape](const RegisterLayout& l) { return broadcast_operand(l, in_shape); }, nullptr);
          }
        }
        return;
      }
      case InstKind::Reduce: {
        auto& i = static_cast<const ReduceInst&>(inst);
        auto dims = i.dims;
        bool keepdim = i.keepdim;
        relate(i.x, out, inst, [dims, keepdim](const RegisterLayout& l) { return std::optional(l.reduce(dims, keepdim)); },
               nullptr);
        return;
      }
      case InstKind::Transpose: {
        auto swap = [](const RegisterLayout& l) { return std::optional(l.permute({1, 0})); };
        relate(static_cast<const TransposeInst&>(inst).x, out, inst, swap, swap);
        return;
      }
      case InstKind::Reshape:
      case InstKind::Squeeze:
      case InstKind::Unsqueeze: {
        Tensor x;
        for (auto& [t, a] : inst.operands()) x = t;
        auto in_shape = x.static_shape(), out_shape = out.static_shape();
        relate(x, out, inst, [out_shape](const RegisterLayout& l) { return l.reshape(out_shape); },
               [in_shape](const RegisterLayout& l) { return l.reshape(in_shape); });
        return;
      }
      case InstKind::Repeat: {
        auto& i = static_cast<const RepeatInst&>(inst);
        auto repeats = i.repeats;
        relate(i.x, out, inst, [repeats](const RegisterLayout& l) { return std::optional(local(repeats) * l); }, nullptr);
        return;
      }
      case InstKind::View: {
        auto& i = static_cast<const ViewInst&>(inst);
        if (out->layout.defined()) return;  // fixed by add_tensor
        int from = i.x.dtype().bits(), to = out.dtype().bits();
        if (from == to) {
          same(i.x, out, inst);
        } else {
          relate(i.x, out, inst, [from, to](const RegisterLayout& l) { return rescale_last_dim(l, from, to); },
                 [from, to](const RegisterLayout& l) { return rescale_last_dim(l, to, from); });
        }
        return;
      }
      default: return;
    }
  }
};

}  // namespace

namespace {

// A layout conversion at `use`, an instruction that only reads the register tensor `t` (before
// it) or only defines it (after it): `t` is copied through a shared buffer of its shape
// (store_shared, load_shared into the other tensor, free_shared; the barrier pass orders them),
// so `use` sees a tensor of its own, which layout inference lays out as `use` needs, and the
// other uses keep theirs. nullopt where `use` cannot take one (an annotation, an instruction
// that updates `t` in place).
std::optional<Kernel> convert_at(const Kernel& k, const TensorNode* t, const InstNode* use,
                                 std::unordered_set<const TensorNode*>& made) {
  if (made.count(t)) return std::nullopt;  // a conversion's own tensor: converting it again cannot help
  if (!use || use->kind() == InstKind::AnnotateLayout) return std::nullopt;
  Tensor from;
  bool reads = false, writes = false;
  for (auto& op : use->traits()) {
    if (op.tensor.get() != t) continue;
    if (!op.tensor.is_register() || op.region) return std::nullopt;
    from = op.tensor;
    reads |= op.access == Access::Read;
    writes |= op.defines && op.access == Access::Write;
    if (op.access == Access::ReadWrite || op.access == Access::Alias) return std::nullopt;
  }
  if (!from.defined() || reads == writes) return std::nullopt;
  struct Swap : StmtMutator {
    using StmtMutator::rewrite_inst;
  };
  struct Insert : StmtMutator {
    const InstNode* use;
    Tensor from;
    bool before;
    bool done = false;
    Tensor made;
    Stmt mutate_inst(const Stmt& s, const Inst& inst) override {
      if (inst.get() != use) return StmtMutator::mutate_inst(s, inst);
      done = true;
      const SourceLoc& loc = inst->loc;
      auto shape = from.static_shape();
      Tensor other = Tensor::reg(from->name + (before ? "_converted" : "_unconverted"), from.dtype(), shape);
      made = other;
      auto alloc = make_inst<AllocateSharedInst>(loc);
      alloc->out = Tensor::shared(from->name + "_convert", from.dtype(), shape);
      alloc->out = alloc->out.with_shared_layout(auto_shared_layout(alloc->out));
      auto store = make_inst<StoreSharedInst>(loc);
      store->dst = alloc->out;
      store->src = before ? from : other;
      auto load = make_inst<LoadSharedInst>(loc);
      load->src = alloc->out;
      load->out = before ? other : from;
      auto release = make_inst<FreeSharedInst>(loc);
      release->tensor = alloc->out;
      Swap swap;
      swap.tensor_map[from.get()] = other;
      Stmt changed = make_inst_stmt(swap.rewrite_inst(inst));
      std::vector<Stmt> copy{make_inst_stmt(alloc), make_inst_stmt(store), make_inst_stmt(load),
                             make_inst_stmt(release)};
      copy.insert(before ? copy.begin() + 3 : copy.begin(), changed);
      return make_seq(std::move(copy), loc);
    }
  } insert;
  insert.use = use;
  insert.from = from;
  insert.before = reads;
  Kernel out = insert.mutate(k);
  if (!insert.done) return std::nullopt;
  made.insert(insert.made.get());
  return out;
}

// Layout inference with conversions: where two uses of a tensor need different layouts, a
// conversion goes at the later use (else the earlier); a tensor a conversion made is never
// converted again, and at most 64 conversions go into a kernel. When the conflicts do not end,
// the first one is reported.
Kernel solve_with_conversions(Kernel k) {
  std::unordered_set<const TensorNode*> made;
  std::optional<LayoutConflict> first;
  for (int converted = 0;; ++converted) {
    try {
      return LayoutSolver(k, {}).run();
    } catch (const LayoutConflict& c) {
      if (!first) first = c;
      std::optional<Kernel> next;
      if (converted < 64 && !(next = convert_at(k, c.tensor, c.second, made)))
        next = convert_at(k, c.tensor, c.first, made);
      if (!next && made.count(c.tensor)) throw *first;  // the conflicts a conversion started
      if (!next) throw;
      k = std::move(*next);
    }
  }
}

}  // namespace

// Each dot takes its default warp split unless the layouts around it need another (an
// annotation with another split's fragments, as NVIDIA Tilus's resolve_dot_config gives, or a
// dot whose operand is another's result): when the defaults leave a conflict, the combinations
// of the dots' splits are tried, fewest changes first, and the first that solves is kept. Dots
// traced from one line with the same shapes (a helper called in two loops: the steps of a
// flash-attention kernel) are tried together first, each combination giving them one split, and
// one by one only when that finds nothing: four dots of 4 and 5 splits are 400 combinations,
// two such pairs 20.
Kernel solve_layouts(const Kernel& k) {
  struct Dots : StmtVisitor {
    std::vector<std::pair<const DotInst*, int64_t>> dots;
    int64_t threads;
    void visit_thread_group(const ThreadGroupStmtNode& g) override {
      int64_t outer = threads;
      threads = g.num_threads;
      StmtVisitor::visit_thread_group(g);
      threads = outer;
    }
    void visit_inst(const InstNode& i) override {
      if (auto* d = dynamic_cast<const DotInst*>(&i); d && d->a.rank() == 2 && d->b.rank() == 2) dots.emplace_back(d, threads);
    }
  } dots;
  dots.threads = k.num_threads();
  dots.visit(k);
  std::unordered_map<const InstNode*, size_t> choices;
  std::optional<Kernel> solved;
  auto solves = [&] {
    try {
      solved = LayoutSolver(k, choices).run();
      return true;
    } catch (const CompileError&) {
      return false;
    }
  };
  if (dots.dots.empty()) return solve_with_conversions(k);
  if (solves()) return *solved;
  std::vector<size_t> plan_counts;
  for (auto& [d, threads] : dots.dots) {
    auto sa = d->a.static_shape(), sb = d->b.static_shape();
    plan_counts.push_back(dot_plans(d->a.dtype(), d->c.dtype(), sa[0], sb[1], sa[1], threads).size());
  }
  // units[u]: the dots that take one split together.
  auto search = [&](const std::vector<std::vector<size_t>>& units) {
    std::vector<size_t> sizes;
    size_t total = 1;
    for (auto& u : units) {
      sizes.push_back(plan_counts[u[0]]);
      total = std::min<size_t>(total * sizes.back(), 257);
    }
    auto choose = [&](size_t unit, size_t plan) {
      for (size_t i : units[unit]) {
        if (plan) choices[dots.dots[i].first] = plan;
        else choices.erase(dots.dots[i].first);
      }
    };
    if (total <= 256) {
      // Every combination, fewest non-default choices first.
      std::vector<std::vector<size_t>> combos;
      for (size_t code = 1; code < total; ++code) {
        std::vector<size_t> c;
        for (size_t i = 0, rest = code; i < sizes.size(); rest /= sizes[i], ++i) c.push_back(rest % sizes[i]);
        combos.push_back(std::move(c));
      }
      auto changed = [](const std::vector<size_t>& c) { return std::count_if(c.begin(), c.end(), [](size_t x) { return x > 0; }); };
      std::stable_sort(combos.begin(), combos.end(), [&](auto& a, auto& b) { return changed(a) < changed(b); });
      for (auto& c : combos) {
        choices.clear();
        for (size_t i = 0; i < c.size(); ++i) choose(i, c[i]);
        if (solves()) return true;
      }
      choices.clear();
      return false;
    }
    // Too many to list: one changed unit, then two, ..., each unit's plans in order, the first
    // 256 tried.
    size_t tries = 0;
    std::function<bool(size_t, size_t)> change = [&](size_t from, size_t left) {
      if (left == 0) {
        ++tries;
        return solves();
      }
      for (size_t i = from; i < sizes.size(); ++i) {
        for (size_t p = 1; p < sizes[i] && tries < 256; ++p) {
          choose(i, p);
          if (change(i + 1, left - 1)) return true;
        }
        choose(i, 0);
      }
      return false;
    };
    for (size_t n = 1; n <= sizes.size() && tries < 256; ++n)
      if (change(0, n)) return true;
    choices.clear();
    return false;
  };
  std::vector<std::vector<size_t>> same_line, one_by_one;
  for (size_t i = 0; i < dots.dots.size(); ++i) {
    one_by_one.push_back({i});
    const DotInst& d = *dots.dots[i].first;
    auto joins = [&](const std::vector<size_t>& u) {
      const DotInst& e = *dots.dots[u[0]].first;
      return d.loc.valid() && d.loc.file == e.loc.file && d.loc.line == e.loc.line && d.loc.column == e.loc.column &&
             d.a.static_shape() == e.a.static_shape() && d.b.static_shape() == e.b.static_shape() &&
             d.a.dtype() == e.a.dtype() && d.c.dtype() == e.c.dtype() && dots.dots[i].second == dots.dots[u[0]].second;
    };
    auto u = std::find_if(same_line.begin(), same_line.end(), joins);
    if (u == same_line.end()) same_line.push_back({i});
    else u->push_back(i);
  }
  if (same_line.size() < one_by_one.size() && search(same_line)) return *solved;
  if (search(one_by_one)) return *solved;
  return solve_with_conversions(k);  // the default splits, with conversions where uses conflict
}

namespace {

// Bytes a thread's first slots cover contiguously along the last dim (slot 0 of thread 0 on).
int64_t contiguous_bytes(const RegisterLayout& l, DataType dt) {
  if (!l.defined() || l.rank() == 0 || l.local_size() == 0) return 0;
  auto first = l.map(0, 0);
  int64_t run = 1;
  for (; run < l.local_size(); ++run) {
    auto next = first;
    next.back() += run;
    if (l.map(0, run) != next) break;
  }
  return run * dt.bits() / 8;
}

// Where a 2-D register tile is stored to global memory in pieces under 4 bytes per thread (the
// transposed accumulator of a dot lowered to wgmma: each thread's values run down a column), the
// tile goes through shared memory first, into the default layout (16-byte vectors along rows):
// stmatrix/ldmatrix-class shared accesses and full-width global stores instead of one 2-byte
// store, address and bounds check per element. Only on GPU targets, outside branches and thread
// groups (the conversion's barriers must be reached by every thread), for tiles of 8 KB or more,
// and only where the tile fits in shared memory beside every allocation the kernel has (so
// planning cannot fail).
Kernel widen_narrow_stores(const Kernel& unsolved, const Kernel& solved, const Target& target) {
  if (target.is_cpu()) return solved;
  struct Find : StmtVisitor {
    int depth = 0;  // inside if / while / thread group
    int64_t shared_bytes = 0;
    int stores = 0;                                                // store_global instructions so far
    std::vector<std::pair<int, const StoreGlobalInst*>> narrow;  // (index among them, store)
    void visit_if(const IfStmtNode& n) override { ++depth; StmtVisitor::visit_if(n); --depth; }
    void visit_while(const WhileStmtNode& n) override { ++depth; StmtVisitor::visit_while(n); --depth; }
    void visit_thread_group(const ThreadGroupStmtNode& n) override { ++depth; StmtVisitor::visit_thread_group(n); --depth; }
    // A loop whose trip count differs between threads is a branch too.
    ThreadDependence threads;
    void visit_let(const LetStmtNode& n) override { threads.bind(n.var, n.value); }
    void visit_declare(const DeclareStmtNode& n) override { threads.bind(n.var, n.init); }
    void visit_assign(const AssignStmtNode& n) override { threads.bind(n.var, n.value); }
    void visit_for(const ForStmtNode& n) override {
      int inside = threads.per_thread_loop(n);
      depth += inside;
      StmtVisitor::visit_for(n);
      depth -= inside;
    }
    void visit_inst(const InstNode& i) override {
      if (auto* a = dynamic_cast<const AllocateSharedInst*>(&i))
        shared_bytes += a->out->shared_layout.storage_elements() * std::max(1, a->out.dtype().bits()) / 8;
      auto* st = dynamic_cast<const StoreGlobalInst*>(&i);
      if (!st) return;
      int index = stores++;
      if (depth || !st->src.is_register() || st->src.rank() != 2 || st->src.dtype().bits() < 8) return;
      if (!st->dims.empty() && st->dims.back() != st->dst.rank() - 1) return;  // rows not along the global's rows
      const RegisterLayout& l = st->src->layout;
      RegisterLayout d = default_register_layout(st->src.static_shape(), st->src.dtype(), l.num_threads());
      if (contiguous_bytes(l, st->src.dtype()) < 4 && contiguous_bytes(d, st->src.dtype()) >= 8) narrow.emplace_back(index, st);
    }
  } find;
  find.visit(solved.body);
  if (find.narrow.empty()) return solved;
  // The same stores in the kernel before solving, in the same order (solving adds none).
  struct Originals : StmtVisitor {
    std::vector<const StoreGlobalInst*> stores;
    void visit_inst(const InstNode& i) override {
      if (auto* st = dynamic_cast<const StoreGlobalInst*>(&i)) stores.push_back(st);
    }
  } originals;
  originals.visit(unsolved.body);
  Kernel k = unsolved;
  std::unordered_set<const TensorNode*> made;
  int64_t budget = target.shared_memory_per_block - find.shared_bytes;
  bool changed = false;
  for (auto& [index, st] : find.narrow) {
    int64_t bytes = st->src.static_shape()[0] * st->src.static_shape()[1] * st->src.dtype().bits() / 8;
    if (bytes < 8192 || bytes > budget) continue;  // small tiles: two barriers cost more than they save
    const StoreGlobalInst* orig = originals.stores.at(index);
    auto next = convert_at(k, orig->src.get(), orig, made);
    if (!next) continue;
    k = std::move(*next);
    budget -= bytes;
    changed = true;
  }
  if (!changed) return solved;
  try {
    return solve_layouts(k);
  } catch (const CompileError&) {
    return solved;  // keep the kernel as it solved before
  }
}

}  // namespace

Program infer_layouts(const Program& program, const Target& target) {
  return map_kernels(program, [&](const Kernel& k) { return widen_narrow_stores(k, solve_layouts(k), target); });
}

}  // namespace tilus
