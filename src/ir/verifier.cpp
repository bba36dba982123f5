// Verification of the tile IR (DESIGN 6.1).
//
// verify_inst() checks one instruction alone: the operand scopes its traits allow, then its
// definition's hook (inst_def.h; the rules of each family are in src/ir/insts/<family>.cpp) and
// the rules its definition holds as data (attribute values, operand dtypes). Its hooks check ranks, offsets arity, dims,
// shapes and dtypes. verify() walks a kernel in program order with a stack of scopes and
// checks what needs context: uses after definitions, scalar variable visibility, control
// flow, thread groups, layouts and the shared-memory budget.
//
// The verifier never trusts the IR it is given: undefined tensors, expressions and
// statements, wrong scopes and dynamic shapes where static ones are needed are reported as
// CompileErrors, never dereferenced. Every message starts with the instruction's display
// name and shows the operands as Tensor::type_str() prints them.
#include "tilus/ir/verifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tilus/ir/error.h"
#include "tilus/ir/inst_def.h"
#include "tilus/ir/stmt.h"
#include "verify_util.h"

namespace tilus {

namespace {

using namespace verify_detail;

// Expressions of an instruction may use its own binders but no other instruction's.
struct FieldCollector : FieldVisitor {
  std::vector<std::pair<const char*, Expr>> exprs_;
  std::vector<Var> binders_;
  void expr(const char* name, Expr& e) override { exprs_.emplace_back(name, e); }
  void binder(const char*, Var& v) override { binders_.push_back(v); }
};

void check_binders(const InstNode& inst) {
  FieldCollector c;
  inst.visit_fields(c);
  std::unordered_set<const void*> own;
  for (auto& b : c.binders_) own.insert(b.get());
  for (auto& [field, e] : c.exprs_) {
    if (!e.defined()) continue;
    for (auto& v : free_vars(e)) {
      if (v->role != VarRole::Binder || own.count(v.get())) continue;
      std::vector<std::string> names;
      for (auto& b : c.binders_) names.push_back(b.defined() ? b.name() : "<undefined>");
      fail(inst, fmt::format("{} {} uses '{}', a variable bound by another instruction (this one binds [{}])", field,
                             expr_str(e), v.name(), fmt::join(names, ", ")));
    }
  }
}

// ---------------------------------------------------------------------------------------
// Whole-kernel verification
// ---------------------------------------------------------------------------------------

class KernelVerifier {
 public:
  KernelVerifier(const Kernel& k, const VerifyOptions& opts) : kernel_(k), opts_(opts) {}

  void run() {
    check_attributes();
    scopes_.push_back(Scope{Scope::Body, kernel_.num_threads()});
    walk(kernel_.body);
    scopes_.pop_back();
    check_shared_budget();
  }

 private:
  struct Scope {
    enum Kind { Body, Loop, Branch, Group } kind;
    int64_t threads;  // threads of the innermost thread group
    std::unordered_set<const TensorNode*> tensors;
    std::unordered_set<const void*> vars;      // loop vars, lets and declares
    std::unordered_set<const void*> mutables;  // declares
    int64_t begin = 0;  // the group's first thread in the block
  };

  struct SharedAlloc {
    const InstNode* inst;
    Tensor tensor;
    int64_t bytes;
  };

  [[noreturn]] void fail_kernel(const std::string& what) const {
    throw CompileError(fmt::format("kernel {}: {}", kernel_.name, what), kernel_.loc);
  }
  [[noreturn]] void fail_stmt(const StmtNode& s, const std::string& ctx, const std::string& what) const {
    throw CompileError(fmt::format("{}: {}", ctx, what), s.loc.valid() ? s.loc : kernel_.loc);
  }

  // Rule A.
  void check_attributes() {
    if (kernel_.warps < 1 || kernel_.warps > kMaxWarps)
      fail_kernel(fmt::format("warps = {}: a block has 1 to {} warps", kernel_.warps, kMaxWarps));
    if (std::string why = min_blocks_problem(kernel_.min_blocks, kernel_.warps); !why.empty()) fail_kernel(why);
    if (kernel_.grid.empty() || kernel_.grid.size() > 3)
      fail_kernel(fmt::format("the grid needs 1 to 3 block counts, got {}: {}", kernel_.grid.size(),
                              exprs_str(kernel_.grid)));
    for (auto& p : kernel_.params)
      if (p.defined()) params_.insert(p.get());
    for (const GlobalScratch& g : kernel_.global_tensors) {
      std::string what = fmt::format("global_tensor {}", g.ptr.defined() ? g.ptr.name() : "<undefined>");
      auto fail_at = [&](const std::string& why) { throw CompileError(fmt::format("{}: {}", what, why), g.loc.valid() ? g.loc : kernel_.loc); };
      if (!g.ptr.defined() || g.ptr->role != VarRole::Param || !g.ptr.dtype().is_pointer() ||
          g.ptr.dtype().pointee().is_void())
        fail_at("its pointer must be a typed pointer parameter");
      for (auto& d : g.shape) {
        if (!is_integer_expr(d))
          fail_at(fmt::format("shape {}: dims must be integer expressions, got {} of type {}", exprs_str(g.shape),
                              expr_str(d), dtype_str(d)));
        if (d.is_int_const() && d.int_value() < 0)
          fail_at(fmt::format("shape {}: dim {} is negative", exprs_str(g.shape), d.int_value()));
        for (auto& v : free_vars(d))
          if (v->role != VarRole::Param || !params_.count(v.get()))
            fail_at(fmt::format("shape {}: the runtime sizes it before the launch, so its dims may use only the "
                                "kernel's parameters, but {} uses '{}' ({})",
                                exprs_str(g.shape), expr_str(d), v.name(), role_str(v->role)));
      }
      params_.insert(g.ptr.get());
    }
    for (auto& g : kernel_.grid) {
      if (!is_integer_expr(g))
        fail_kernel(fmt::format("grid {}: block counts must be integer expressions, got {} of type {}",
                                exprs_str(kernel_.grid), expr_str(g), dtype_str(g)));
      if (g.is_int_const() && g.int_value() <= 0)
        fail_kernel(fmt::format("grid {}: block count {} is not positive", exprs_str(kernel_.grid), g.int_value()));
      for (auto& v : free_vars(g))
        if (v->role != VarRole::Param || !params_.count(v.get()))
          fail_kernel(fmt::format("grid {}: block counts may use only the kernel's parameters, but {} uses '{}' ({})",
                                  exprs_str(kernel_.grid), expr_str(g), v.name(),
                                  v->role == VarRole::Param ? "a parameter of another kernel" : role_str(v->role)));
    }
    std::string cluster = fmt::format("cluster_blocks [{}]", fmt::join(kernel_.cluster, ", "));
    int64_t cluster_size = 1;
    for (auto c : kernel_.cluster) {
      if (c < 1) fail_kernel(fmt::format("{}: cluster dimensions must be positive", cluster));
      cluster_size *= c;
    }
    if (cluster_size > kMaxPortableClusterBlocks)
      fail_kernel(fmt::format("{}: a cluster of {} blocks is larger than the portable maximum of {}", cluster,
                              cluster_size, kMaxPortableClusterBlocks));
    // A grid dimension the launch cannot see before it runs is checked there (launch_grid).
    for (size_t d = 0; d < 3; ++d) {
      int64_t blocks = d < kernel_.grid.size() ? (kernel_.grid[d].is_int_const() ? kernel_.grid[d].int_value() : 0) : 1;
      if (blocks > 0 && blocks % kernel_.cluster[d] != 0)
        fail_kernel(fmt::format("{}: grid {} has {} blocks in dimension {}, not a multiple of the cluster's {}", cluster,
                                exprs_str(kernel_.grid), blocks, d, kernel_.cluster[d]));
    }
  }

  bool tensor_visible(const Tensor& t) const {
    for (auto& s : scopes_)
      if (s.tensors.count(t.get())) return true;
    return false;
  }
  bool var_visible(const Var& v) const {
    for (auto& s : scopes_)
      if (s.vars.count(v.get())) return true;
    return false;
  }
  bool var_mutable(const Var& v) const {
    for (auto& s : scopes_)
      if (s.mutables.count(v.get())) return true;
    return false;
  }
  int64_t group_threads() const { return scopes_.back().threads; }
  bool in_group() const {
    return std::any_of(scopes_.begin(), scopes_.end(), [](const Scope& sc) { return sc.kind == Scope::Group; });
  }

  // Rule B for scalars: the variables `e` uses are visible here.
  void check_vars(const Expr& e, const std::unordered_set<const void*>& binders, const SourceLoc& loc,
                  const std::string& ctx, const char* field) const {
    if (!e.defined()) return;
    for (auto& v : free_vars(e)) {
      bool ok = false;
      switch (v->role) {
        case VarRole::Param: ok = params_.count(v.get()) > 0; break;
        case VarRole::Builtin: ok = true; break;
        case VarRole::Binder: ok = binders.count(v.get()) > 0; break;
        case VarRole::Loop:
        case VarRole::Local: ok = var_visible(v); break;
      }
      if (ok) continue;
      std::string why = v->role == VarRole::Param ? "it is not a parameter of this kernel"
                        : v->role == VarRole::Binder
                            ? "it is bound by another instruction"
                            : "it is used outside the scope that defines it, or before its definition";
      throw CompileError(fmt::format("{}: {} {} uses '{}' ({}) where it is not visible: {}", ctx, field, expr_str(e),
                                     v.name(), role_str(v->role), why),
                         loc.valid() ? loc : kernel_.loc);
    }
  }

  void walk(const Stmt& s) {
    if (!s) return;
    switch (s->kind) {
      case StmtKind::Seq:
        for (auto& c : static_cast<const SeqStmtNode&>(*s).stmts) walk(c);
        return;
      case StmtKind::For: return visit_for(static_cast<const ForStmtNode&>(*s));
      case StmtKind::If: return visit_if(static_cast<const IfStmtNode&>(*s));
      case StmtKind::While: return visit_while(static_cast<const WhileStmtNode&>(*s));
      case StmtKind::Break: return visit_jump(*s, "break");
      case StmtKind::Continue: return visit_jump(*s, "continue");
      case StmtKind::Return: return;  // leaves the kernel from anywhere
      case StmtKind::Let: return visit_let(static_cast<const LetStmtNode&>(*s));
      case StmtKind::Declare: return visit_declare(static_cast<const DeclareStmtNode&>(*s));
      case StmtKind::Assign: return visit_assign(static_cast<const AssignStmtNode&>(*s));
      case StmtKind::Inst: return visit_inst(static_cast<const InstStmtNode&>(*s));
      case StmtKind::ThreadGroup: return visit_group(static_cast<const ThreadGroupStmtNode&>(*s));
    }
    throw CompileError(fmt::format("kernel {}: a statement of unknown kind {}", kernel_.name, int(s->kind)), s->loc);
  }

  void push(Scope::Kind kind, int64_t threads) {
    int64_t begin = scopes_.empty() ? 0 : scopes_.back().begin;
    scopes_.push_back(Scope{kind, threads, {}, {}, {}, begin});
  }
  void pop() { scopes_.pop_back(); }

  // Rule D (loops) and B.
  void visit_for(const ForStmtNode& s) {
    const std::unordered_set<const void*> none;
    for (auto [what, e] : {std::pair<const char*, const Expr*>{"begin", &s.begin}, {"end", &s.end}, {"step", &s.step}}) {
      if (!is_integer_expr(*e))
        fail_stmt(s, "for", fmt::format("loop bounds must be integers, got {} {} of type {}", what, expr_str(*e),
                                        dtype_str(*e)));
      check_vars(*e, none, s.loc, "for", what);
    }
    if (s.step.is_int_const(0)) fail_stmt(s, "for", "the step must not be zero");
    if (!s.var.defined() || !s.var.dtype().is_integer())
      fail_stmt(s, "for", fmt::format("the loop variable must be an integer variable, got {} of type {}",
                                      expr_str(s.var), dtype_str(s.var)));
    push(Scope::Loop, group_threads());
    scopes_.back().vars.insert(s.var.get());
    walk(s.body);
    pop();
  }

  void check_condition(const StmtNode& s, const char* ctx, const Expr& cond) {
    if (!cond.defined() || !cond.dtype().is_bool())
      fail_stmt(s, ctx, fmt::format("the condition must be a bool expression, got {} of type {}", expr_str(cond),
                                    dtype_str(cond)));
    check_vars(cond, {}, s.loc, ctx, "condition");
  }

  void visit_if(const IfStmtNode& s) {
    check_condition(s, "if", s.cond);
    push(Scope::Branch, group_threads());
    walk(s.then_body);
    pop();
    if (s.else_body) {
      push(Scope::Branch, group_threads());
      walk(s.else_body);
      pop();
    }
  }

  void visit_while(const WhileStmtNode& s) {
    check_condition(s, "while", s.cond);
    push(Scope::Loop, group_threads());
    walk(s.body);
    pop();
  }

  // Rule C.
  void visit_jump(const StmtNode& s, const char* what) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      if (it->kind == Scope::Loop) return;
      if (it->kind == Scope::Group)
        fail_stmt(s, what, "cannot leave a thread group: the nearest enclosing loop is outside the thread group");
    }
    fail_stmt(s, what, "outside of a loop (for or while)");
  }

  void visit_let(const LetStmtNode& s) {
    std::string ctx = fmt::format("let {}", s.var.defined() ? s.var.name() : "<undefined>");
    if (!s.var.defined()) fail_stmt(s, ctx, "the variable is undefined");
    if (!s.value.defined()) fail_stmt(s, ctx, "the value is undefined");
    if (s.var->role != VarRole::Local)
      fail_stmt(s, ctx, fmt::format("binds a {}; let binds local variables", role_str(s.var->role)));
    if (s.value.dtype() != s.var.dtype())
      fail_stmt(s, ctx, fmt::format("the variable has type {} but the value {} has type {}", s.var.dtype().name(),
                                    expr_str(s.value), s.value.dtype().name()));
    check_vars(s.value, {}, s.loc, ctx, "value");
    scopes_.back().vars.insert(s.var.get());
  }

  void visit_declare(const DeclareStmtNode& s) {
    std::string ctx = fmt::format("declare {}", s.var.defined() ? s.var.name() : "<undefined>");
    if (!s.var.defined()) fail_stmt(s, ctx, "the variable is undefined");
    if (!s.init.defined()) fail_stmt(s, ctx, "the initial value is undefined");
    if (s.var->role != VarRole::Local)
      fail_stmt(s, ctx, fmt::format("declares a {}; declare makes local variables", role_str(s.var->role)));
    if (s.init.dtype() != s.var.dtype())
      fail_stmt(s, ctx, fmt::format("the variable has type {} but the initial value {} has type {}",
                                    s.var.dtype().name(), expr_str(s.init), s.init.dtype().name()));
    check_vars(s.init, {}, s.loc, ctx, "init");
    scopes_.back().vars.insert(s.var.get());
    scopes_.back().mutables.insert(s.var.get());
  }

  // Rule H.
  void visit_assign(const AssignStmtNode& s) {
    std::string name = s.var.defined() ? s.var.name() : "<undefined>";
    std::string ctx = fmt::format("assignment to '{}'", name);
    if (!s.var.defined()) fail_stmt(s, ctx, "the variable is undefined");
    if (s.var->role != VarRole::Local || !var_mutable(s.var)) {
      std::string what = s.var->role != VarRole::Local ? fmt::format("'{}' is a {}", name, role_str(s.var->role))
                         : var_visible(s.var)          ? fmt::format("'{}' is bound by let", name)
                                                       : fmt::format("'{}' is not declared in an enclosing scope", name);
      fail_stmt(s, ctx, fmt::format("{}; only variables made by declare() can be assigned", what));
    }
    if (!s.value.defined()) fail_stmt(s, ctx, "the value is undefined");
    if (s.value.dtype() != s.var.dtype())
      fail_stmt(s, ctx, fmt::format("'{}' has type {} but the value {} has type {}", name, s.var.dtype().name(),
                                    expr_str(s.value), s.value.dtype().name()));
    check_vars(s.value, {}, s.loc, ctx, "value");
  }

  // Rule E.
  void visit_group(const ThreadGroupStmtNode& s) {
    const char* ctx = to_string(s.group_kind);
    if (s.thread_begin < 0 || s.num_threads < 1)
      fail_stmt(s, ctx, fmt::format("needs thread_begin >= 0 and num_threads >= 1, got thread_begin={}, num_threads={}",
                                    s.thread_begin, s.num_threads));
    int64_t parent = group_threads();
    if (s.thread_begin + s.num_threads > parent)
      fail_stmt(s, ctx, fmt::format("threads [{}, {}) do not fit in the enclosing {} of {} threads", s.thread_begin,
                                    s.thread_begin + s.num_threads,
                                    in_group() ? "thread group" : fmt::format("block ({} warps)", kernel_.warps),
                                    parent));
    // Warp-collective instructions and named barriers need whole warps; a smaller group must
    // not straddle two.
    if (s.num_threads >= 32 && s.thread_begin % 32 != 0)
      fail_stmt(s, ctx, fmt::format("a group of {} threads must start at a multiple of 32 (got thread_begin={})",
                                    s.num_threads, s.thread_begin));
    if (s.num_threads < 32 && s.thread_begin / 32 != (s.thread_begin + s.num_threads - 1) / 32)
      fail_stmt(s, ctx, fmt::format("a group of {} threads must lie within one warp (threads [{}, {}))",
                                    s.num_threads, s.thread_begin, s.thread_begin + s.num_threads));
    push(Scope::Group, s.num_threads);
    scopes_.back().begin += s.thread_begin;
    walk(s.body);
    pop();
  }

  // Rule I: the thread-level builtins and the thread group they run in.
  void check_thread_context(const InstNode& inst) const {
    int64_t threads = group_threads(), begin = scopes_.back().begin, block = kernel_.num_threads();
    std::string group = in_group() ? fmt::format("the thread group of threads [{}, {})", begin, begin + threads)
                                   : fmt::format("the block of {} threads", block);
    if (auto* i = dynamic_cast<const SyncInst*>(&inst)) {
      if (i->scope == SyncScope::Named || i->scope == SyncScope::NamedArrive) {
        if (i->arrive_count > block)
          fail(inst, fmt::format("arrive_count {} (barrier_id {}) is more than the block's {} threads", i->arrive_count,
                                 i->barrier_id, block));
        if (i->scope == SyncScope::Named && i->arrive_count < threads)
          fail(inst, fmt::format("arrive_count {} (barrier_id {}) is fewer than the {} threads of {} that arrive at it",
                                 i->arrive_count, i->barrier_id, threads, group));
        // Threads that arrive without waiting need others that wait: a barrier their arrivals
        // complete alone orders nothing.
        if (i->scope == SyncScope::NamedArrive && i->arrive_count <= threads)
          fail(inst, fmt::format("arrive_count {} (barrier_id {}) must be more than the {} threads of {} that arrive "
                                 "without waiting: other threads wait at the barrier with sync_threads({}, {})",
                                 i->arrive_count, i->barrier_id, threads, group, i->barrier_id, i->arrive_count));
      }
      if (i->scope == SyncScope::Grid && in_group())
        fail(inst, fmt::format("every thread of every block must reach a grid barrier, but it is inside {}", group));
    } else if (inst.kind() == InstKind::SetMaxNReg || inst.kind() == InstKind::WgmmaFence ||
               inst.kind() == InstKind::WgmmaMma || inst.kind() == InstKind::WgmmaCommitGroup ||
               inst.kind() == InstKind::WgmmaWaitGroup) {
      if (begin % 128 != 0 || threads % 128 != 0)
        fail(inst, fmt::format("{} runs on whole warp groups: {} is not warp-group aligned (its first thread "
                               "and its size must be multiples of 128)",
                               inst.kind() == InstKind::SetMaxNReg ? "setmaxnreg" : inst.display_name(), group));
      if (auto* w = dynamic_cast<const WgmmaMmaInst*>(&inst); w && w->a.rank() == 2 &&
          w->a.static_shape()[0] % (64 * (threads / 128)) != 0)
        fail(inst, fmt::format("{} splits m over its {} warp groups in blocks of 64 rows, but a is {}", group,
                               threads / 128, ty(w->a)));
    } else if (inst.lowering.exchange.defined()) {
      // select_instructions' lane exchange before a store: shuffles within whole warps that move
      // the tile from its layout into the record's mapping.
      auto* st = dynamic_cast<const StoreGlobalInst*>(&inst);
      auto* cp = dynamic_cast<const CopyInst*>(&inst);
      bool reg_to_global = cp && cp->src.tensor.is_register() && cp->dst.tensor.is_global();
      if (!st && !reg_to_global)
        fail(inst, "only store_global and copy from registers to global memory trade registers between lanes before "
                   "they store");
      if (begin % 32 != 0 || threads % 32 != 0)
        fail(inst, fmt::format("its lane exchange shuffles within whole warps, but {} is not warp aligned", group));
      std::string why = lane_exchange_problem(st ? st->src->layout : cp->src.tensor->layout, inst.lowering);
      if (!why.empty()) fail(inst, fmt::format("the lane exchange of its lowering ({}) {}", inst.lowering.str(), why));
    } else if (auto* i = dynamic_cast<const ShuffleInst*>(&inst)) {
      if (threads % 32 != 0)
        fail(inst, fmt::format("shuffles exchange within whole warps, but {} has {} threads (value {})", group, threads,
                               ty(i->value)));
    }
  }

  // Rule F for one tensor defined (or annotated) here.
  void check_register_layout(const InstNode& inst, const Tensor& t, const RegisterLayout& layout, const char* role) {
    if (!layout.defined()) {
      if (opts_.require_layouts)
        fail(inst, fmt::format("{} {} has no register layout (layouts are required after layout inference)", role, ty(t)));
      return;
    }
    if (layout.shape() != dims_of(t))
      fail(inst, fmt::format("{} {} has a layout of shape {}: {}", role, ty(t), ints_str(layout.shape()), layout.str()));
    if (layout.num_threads() != group_threads())
      fail(inst, fmt::format("{} {} has a layout over {} threads but the {} has {} threads: {}", role, ty(t),
                             layout.num_threads(),
                             in_group() ? "enclosing thread group" : "block",
                             group_threads(), layout.str()));
  }

  // Rule F': a register tensor fits in what its threads can hold (a tile far too large for
  // registers is a mistake on every target; the CPU backend would exhaust its stack).
  void check_register_footprint(const InstNode& inst, const Tensor& t) const {
    int64_t elements = 1;
    for (auto& d : t.shape()) {
      if (!d.is_int_const()) return;  // reported by verify_inst
      elements *= std::max<int64_t>(1, d.int_value());
      if (elements > (int64_t(1) << 40)) break;
    }
    int64_t threads = std::max<int64_t>(1, group_threads());
    int64_t per_thread = (t.dtype().storage_bytes(elements) + threads - 1) / threads;
    if (per_thread > kMaxRegisterBytesPerThread)
      fail(inst, fmt::format("out {} needs {} bytes per thread of the {} threads that hold it, more than the {} a "
                             "thread can hold (CUDA's local memory per thread): split it into smaller tiles, or keep "
                             "it in shared or global memory",
                             ty(t), per_thread, threads, kMaxRegisterBytesPerThread));
  }

  void visit_inst(const InstStmtNode& s) {
    if (!s.inst) fail_stmt(s, fmt::format("kernel {}", kernel_.name), "an instruction statement without an instruction");
    const InstNode& inst = *s.inst;
    verify_inst(inst);

    check_thread_context(inst);

    // Rule B: operands defined earlier in a visible scope; variables visible.
    struct Collect : FieldVisitor {
      std::vector<std::pair<const char*, Tensor>> operands;
      std::vector<std::pair<const char*, Expr>> exprs;
      std::unordered_set<const void*> binders;
      Tensor out;
      void output(const char*, Tensor& t, uint8_t) override { out = t; }
      void operand(const char* n, Tensor& t, Access, uint8_t, const CopyRegion*) override { operands.emplace_back(n, t); }
      void expr(const char* n, Expr& e) override { exprs.emplace_back(n, e); }
      void binder(const char*, Var& v) override { binders.insert(v.get()); }
    } c;
    inst.visit_fields(c);
    std::string name = inst_name(inst);
    for (auto& [role, t] : c.operands) {
      if (!t.defined()) fail(inst, fmt::format("{} is an undefined tensor", role));
      if (!tensor_visible(t))
        fail(inst, fmt::format("{} {} ('{}') is not defined here: it is used before its definition or outside the "
                               "scope that defines it",
                               role, ty(t), t->name));
    }
    for (auto& [field, e] : c.exprs) check_vars(e, c.binders, inst.loc, name, field);
    if (c.out.defined()) {
      // Global views evaluate their shape and strides where they are defined.
      for (auto& d : c.out.shape()) check_vars(d, {}, inst.loc, name, "out shape");
      for (auto& d : c.out->strides) check_vars(d, {}, inst.loc, name, "out strides");
      if (c.out.is_register()) {
        check_register_layout(inst, c.out, c.out->layout, "out");
        check_register_footprint(inst, c.out);
      }
      if (c.out.is_shared() && c.out->shared_layout.defined() && c.out->shared_layout.shape() != dims_of(c.out))
        fail(inst, fmt::format("out {} has a shared layout of shape {}: {}", ty(c.out),
                               ints_str(c.out->shared_layout.shape()), c.out->shared_layout.str()));
      scopes_.back().tensors.insert(c.out.get());
    }
    if (inst.kind() == InstKind::AnnotateLayout) {
      auto& a = static_cast<const AnnotateLayoutInst&>(inst);
      if (a.layout.defined()) check_register_layout(inst, a.tensor, a.layout, "tensor");
    }
    // item defines its scalar for what follows in this scope.
    if (inst.kind() == InstKind::Item) scopes_.back().vars.insert(static_cast<const ItemInst&>(inst).var.get());
    if (inst.kind() == InstKind::SharedItemPtr)
      scopes_.back().vars.insert(static_cast<const SharedItemPtrInst&>(inst).var.get());
    if (inst.kind() == InstKind::ClcQuery) {
      auto& q = static_cast<const ClcQueryInst&>(inst);
      for (const Var* v : {&q.is_canceled, &q.x, &q.y, &q.z}) scopes_.back().vars.insert(v->get());
    }

    // Rule G: collect the allocations.
    if (inst.kind() == InstKind::AllocateShared) {
      const Tensor& t = static_cast<const AllocateSharedInst&>(inst).out;
      int64_t elements = t->shared_layout.defined() ? t->shared_layout.storage_elements() : product(dims_of(t));
      int64_t bytes = t.dtype().storage_bytes(elements);
      bytes = (bytes + 127) / 128 * 128;
      shared_.push_back(SharedAlloc{&inst, t, bytes});
    }
  }

  // Rule G.
  void check_shared_budget() const {
    if (opts_.shared_memory_limit <= 0) return;
    int64_t total = 0;
    for (auto& a : shared_) total += a.bytes;
    if (total <= opts_.shared_memory_limit) return;
    int64_t running = 0;
    for (auto& a : shared_) {
      running += a.bytes;
      if (running <= opts_.shared_memory_limit) continue;
      throw CompileError(
          fmt::format("{}: kernel {} needs {} bytes of shared memory, more than the limit of {} bytes; this "
                      "allocation of {} ({} bytes) brings the total to {} bytes",
                      inst_name(*a.inst), kernel_.name, total, opts_.shared_memory_limit, ty(a.tensor), a.bytes, running),
          a.inst->loc.valid() ? a.inst->loc : kernel_.loc);
    }
  }

  const Kernel& kernel_;
  const VerifyOptions& opts_;
  std::unordered_set<const void*> params_;
  std::vector<Scope> scopes_;
  std::vector<SharedAlloc> shared_;
};

}  // namespace

std::string min_blocks_problem(int64_t min_blocks, int64_t warps) {
  if (min_blocks <= 0 || min_blocks * warps <= kMaxWarpsPerSm) return "";
  return fmt::format("min_blocks = {}: {} blocks of {} warps are more than the {} warps an SM holds", min_blocks,
                     min_blocks, warps, kMaxWarpsPerSm);
}

void verify_inst(const InstNode& inst) {
  expect_traits(inst);
  const InstDef& d = inst.def();
  if (d.verify) d.verify(inst);
  verify_definition_rules(inst);
  check_binders(inst);
}

void verify(const Kernel& kernel, const VerifyOptions& opts) { KernelVerifier(kernel, opts).run(); }

void verify(const Program& program, const VerifyOptions& opts) {
  for (auto& k : program.kernels) verify(k, opts);
}

}  // namespace tilus
