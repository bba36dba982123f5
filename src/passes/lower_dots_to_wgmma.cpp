#include "tilus/passes/lower_dots_to_wgmma.h"

#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "tilus/ir/error.h"
#include "tilus/ir/facts.h"
#include "tilus/ir/functor.h"
#include "tilus/passes/select_instructions.h"

namespace tilus {

DotWgmma dot_wgmma_from_env() {
  const char* env = std::getenv("TILUS_DOT_WGMMA");
  std::string v = env ? env : "";
  if (v.empty() || v == "auto") return DotWgmma::Auto;
  if (v == "1") return DotWgmma::Always;
  if (v == "0") return DotWgmma::Never;
  throw CompileError(fmt::format("TILUS_DOT_WGMMA must be 0, 1 or auto, got '{}'", v));
}

namespace {

// How one dot becomes wgmma.
struct Choice {
  bool transposed = false;  // d^T = b^T @ a^T
  Tensor a;                 // wgmma's a: a shared view, or a register tensor
  Tensor b;                 // wgmma's b: a shared view [k, n] (K-major)
};

// Decides every dot of a kernel (one walk, which knows each dot's thread group): the dots that
// become wgmma and the loads whose only reader was such a dot.
class Chooser : public StmtVisitor {
 public:
  explicit Chooser(const Kernel& k) : facts_(k), threads_(k.num_threads()) {
    struct Collect : StmtVisitor {
      Chooser* self;
      void visit_inst(const InstNode& i) override {
        if (auto* l = dynamic_cast<const LoadSharedInst*>(&i)) self->loads_[l->out.get()] = l;
        for (auto& op : i.traits())
          if (!op.defines && op.access != Access::Write && op.tensor.defined()) ++self->reads_[op.tensor.get()];
      }
    } c;
    c.self = this;
    c.visit(k.body);
    visit(k.body);
  }

  std::unordered_map<const InstNode*, Choice> choices;
  std::unordered_set<const TensorNode*> dropped;  // load_shared results a descriptor replaces

 protected:
  void visit_thread_group(const ThreadGroupStmtNode& n) override {
    int64_t threads = threads_, begin = begin_;
    threads_ = n.num_threads;
    begin_ += n.thread_begin;
    StmtVisitor::visit_thread_group(n);
    threads_ = threads;
    begin_ = begin;
  }

  void visit_inst(const InstNode& i) override {
    auto* d = dynamic_cast<const DotInst*>(&i);
    if (!d) return;
    auto c = choose(*d);
    if (!c) return;
    if (c->transposed || c->a.is_shared()) dropped.insert(d->a.get());
    if (!c->transposed) dropped.insert(d->b.get());
    choices.emplace(d, std::move(*c));
  }

 private:
  // The load_shared that defines register tensor t (null when another instruction does).
  const LoadSharedInst* load_of(const Tensor& t) const {
    auto it = loads_.find(t.get());
    return it == loads_.end() ? nullptr : it->second;
  }
  bool read_once(const Tensor& t) const {
    auto it = reads_.find(t.get());
    return it != reads_.end() && it->second == 1;
  }
  // Whether wgmma can read shared view v with its view dim k_dim along K.
  bool describable(const DotInst& d, const Tensor& v, int k_dim) const {
    return wgmma_shared_operand(facts_, d, v, k_dim, 16).has_value();
  }

  std::optional<Choice> choose(const DotInst& d) const {
    if (d.a.rank() != 2 || d.b.rank() != 2 || !d.a.is_register() || !d.b.is_register() || !d.c.is_register())
      return std::nullopt;
    DataType ab = d.a.dtype(), ct = d.c.dtype();
    if (ab != d.b.dtype() || (ab != dtypes::float16 && ab != dtypes::bfloat16)) return std::nullopt;
    if (ct != dtypes::float32 && !(ct == dtypes::float16 && ab == dtypes::float16)) return std::nullopt;
    if (begin_ % 128 || threads_ % 128) return std::nullopt;
    int64_t groups = threads_ / 128;
    auto sa = d.a.static_shape(), sb = d.b.static_shape();
    int64_t m = sa[0], k = sa[1], n = sb[1];
    if (k % 16) return std::nullopt;
    const LoadSharedInst* la = load_of(d.a);
    const LoadSharedInst* lb = load_of(d.b);
    if (!la || !lb) return std::nullopt;  // operands computed in registers keep mma.sync
    // b from shared memory as it is (a K-major view).
    if (m % (64 * groups) == 0 && n % 8 == 0 && read_once(d.b) && describable(d, lb->src, 0))
      return Choice{false, read_once(d.a) && describable(d, la->src, 1) ? la->src : d.a, lb->src};
    // The transposed product: a^T as wgmma's b (a's [m, k] tile is K-major), b^T in registers.
    if (n % (64 * groups) == 0 && m % 8 == 0 && read_once(d.a) && describable(d, la->src, 1))
      return Choice{true, d.b, la->src};
    return std::nullopt;
  }

  KernelFacts facts_;
  std::unordered_map<const TensorNode*, const LoadSharedInst*> loads_;
  std::unordered_map<const TensorNode*, int> reads_;
  int64_t threads_, begin_ = 0;
};

// Replaces each chosen dot by its wgmma and drops the loads it replaced.
class Lowerer : public StmtMutator {
 public:
  explicit Lowerer(const Chooser& c) : chooser_(c) {}

 protected:
  Stmt mutate_inst(const Stmt& s, const Inst& inst) override {
    if (auto* l = inst_as<LoadSharedInst>(inst); l && chooser_.dropped.count(l->out.get())) return nullptr;
    auto it = chooser_.choices.find(inst.get());
    if (it == chooser_.choices.end()) return StmtMutator::mutate_inst(s, inst);
    return lower(static_cast<const DotInst&>(*inst), it->second);
  }

 private:
  static Stmt lower(const DotInst& d, const Choice& c) {
    const SourceLoc& loc = d.loc;
    std::vector<Stmt> out;
    auto emit = [&](Inst i) { out.push_back(make_inst_stmt(std::move(i))); };
    auto transpose = [&](const Tensor& x, Tensor to) {
      auto t = make_inst<TransposeInst>(loc);
      t->x = x;
      t->out = std::move(to);
      emit(t);
      return t->out;
    };
    auto transposed = [](const Tensor& x, const std::string& name) {
      auto sx = x.static_shape();
      return Tensor::reg(name, x.dtype(), {sx[1], sx[0]});
    };
    auto mma = make_inst<WgmmaMmaInst>(loc);
    mma->from_dot = true;
    if (!c.transposed) {
      // out = c; out += a @ b
      auto alloc = make_inst<AllocateRegisterInst>(loc);
      alloc->out = d.out;
      emit(alloc);
      auto copy = make_inst<AssignInst>(loc);
      copy->dst = d.out;
      copy->src = d.c;
      emit(copy);
      mma->a = c.a;
      mma->b = c.b;
      mma->d = d.out;
    } else {
      // out^T = c^T + b^T @ a^T, a^T a permuted view of a's tile.
      mma->d = transpose(d.c, transposed(d.c, d.out->name + "_t"));
      mma->a = transpose(d.b, transposed(d.b, d.b->name + "_t"));
      const SharedLayout& l = c.b->shared_layout;
      auto shape = c.b.static_shape();
      auto view = make_inst<SliceSharedInst>(loc);
      view->src = c.b;
      view->offsets = {int_const(0), int_const(0)};
      view->dims = {1, 0};
      view->out = Tensor::shared(c.b->name + "_t", c.b.dtype(), {shape[1], shape[0]},
                                 SharedLayout({shape[1], shape[0]}, {l.strides()[1], l.strides()[0]}, l.swizzle()));
      emit(view);
      mma->b = view->out;
    }
    emit(mma);
    emit(make_inst<WgmmaCommitGroupInst>(loc));
    auto wait = make_inst<WgmmaWaitGroupInst>(loc);
    wait->n = 0;
    emit(wait);
    if (c.transposed) transpose(mma->d, d.out);
    return make_seq(std::move(out), loc);
  }

  const Chooser& chooser_;
};

}  // namespace

Program lower_dots_to_wgmma(const Program& program, const Target& target, DotWgmma mode) {
  if (mode == DotWgmma::Never || !target.has_wgmma() || (mode == DotWgmma::Auto && target.is_cpu())) return program;
  return map_kernels(program, [](const Kernel& k) {
    Chooser chooser(k);
    return chooser.choices.empty() ? k : Lowerer(chooser).mutate(k);
  });
}

}  // namespace tilus
