// The CUDA emitter: kernel skeleton, statements and scalar expressions.
#include "emitter.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cmath>
#include <numeric>

#include "tilus/ir/error.h"
#include "tilus/ir/functor.h"
#include "tilus/ir/inst_def.h"

namespace tilus {

KernelSource emit_cuda(const Kernel& kernel, const Target& target, const CudaOptions& options) {
  return cuda::Emitter(kernel, target, options).run();
}

CudaOptions CudaOptions::from_env() {
  CudaOptions o;
  const char* env = std::getenv("TILUS_DEBUG_BOUNDS");
  o.debug_bounds = env && *env && std::string(env) != "0";
  const char* desc = std::getenv("TILUS_WGMMA_DESC_UNITS");
  o.wgmma_desc_units = desc && *desc && std::string(desc) != "0";
  const char* pow2 = std::getenv("TILUS_FLOOR_POW2");
  o.floor_pow2 = pow2 && *pow2 && std::string(pow2) != "0";
  return o;
}

namespace cuda {

std::string c_text(const std::string& text, bool literal_percent) {
  std::string out;
  for (char c : text) {
    if (c == '\n') out += "\\n";
    else if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '%' && literal_percent) out += "%%";
    else out += c;
  }
  return out;
}

std::string ctype(DataType t) {
  if (t.is_pointer()) return ctype(t.pointee()) + "*";
  if (t.is_void()) return "void";
  if (t.is_bool()) return "bool";
  if (t.is_integer() && t.bits() >= 8) return fmt::format("{}int{}_t", t.is_uint() ? "u" : "", t.bits());
  if (t.is_integer()) return fmt::format("tilus::subint<{}, {}>", t.bits(), t.is_int() ? "true" : "false");
  if (is_low_float(t))
    return fmt::format("tilus::lowfloat<{}, {}, {}, {}>", t.bits(), t.exponent_bits(), t.mantissa_bits(),
                       int(t.float_style()));
  if (t == dtypes::float16) return "__half";
  if (t == dtypes::bfloat16) return "__nv_bfloat16";
  if (t == dtypes::float32 || t == dtypes::tfloat32) return "float";
  if (t == dtypes::float64) return "double";
  throw CompileError(fmt::format("the CUDA code generator does not support {} yet", t.name()));
}

int64_t elem_bytes(DataType t) { return std::max<int64_t>(1, t.bits() / 8); }

bool is_low_float(DataType t) { return t.is_float() && t.bits() <= 8; }

std::string Emitter::reg_elem(const Tensor& t, int64_t slot) { return reg_elem(t, std::to_string(slot)); }

std::string Emitter::reg_elem(const Tensor& t, const std::string& slot) {
  return t.dtype().is_subbyte() ? fmt::format("{}.get({})", reg(t), slot) : fmt::format("{}[{}]", reg(t), slot);
}

void Emitter::slot_loop(int64_t n, const std::function<std::string(const std::string& slot)>& stmt) {
  if (n <= 0) return;
  if (n == 1) {
    line(stmt("0"));
    return;
  }
  line("#pragma unroll");
  linef("for (int tilus_s = 0; tilus_s < {}; ++tilus_s) {}", n, stmt("tilus_s"));
}

std::optional<std::string> Emitter::affine_slots(const std::vector<int64_t>& m, const std::string& slot) {
  if (m.empty()) return std::nullopt;
  int64_t base = m[0], stride = m.size() > 1 ? m[1] - m[0] : 0;
  for (size_t s = 0; s < m.size(); ++s)
    if (m[s] != base + stride * int64_t(s)) return std::nullopt;
  std::string scaled = stride == 0 ? "" : stride == 1 ? slot : fmt::format("{} * {}", stride, slot);
  if (scaled.empty()) return std::to_string(base);
  return base == 0 ? scaled : base > 0 ? fmt::format("{} + {}", scaled, base) : fmt::format("{} - {}", scaled, -base);
}

Emitter::Emitter(const Kernel& k, const Target& t, const CudaOptions& o) : kernel(k), target(t), options(o), facts_(k) {
  for (const char* reserved : {"tid", "tilus", "int", "float", "double", "char", "bool", "void", "half",
                               "auto", "const", "if", "else", "for", "while", "do", "break", "continue", "return",
                               "switch", "case", "default", "struct", "class", "new", "delete", "this", "true", "false",
                               "signed", "unsigned", "short", "long", "static", "extern", "register", "volatile",
                               "inline", "template", "typename", "namespace", "using", "sizeof", "min", "max",
                               "printf", "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize",
                               // the C++ types the emitted code names (tensors take their
                               // variables' names, which must not shadow them)
                               "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t",
                               "uint64_t", "__half", "__nv_bfloat16", "__half2", "__nv_bfloat162", "size_t",
                               "float2", "float4", "int2", "int4", "uint2", "uint4", "asm", "goto", "operator",
                               "typedef", "union", "enum", "friend", "private", "public", "protected", "virtual",
                               "__shared__", "__device__", "__global__", "__syncthreads"})
    names_.insert(reserved);
  scopes_.push_back(ThreadScope{builtin::thread_idx(), 0, k.num_threads()});
  var_names_[builtin::thread_idx().get()] = "tid";
  // Named barrier ids the kernel uses itself (the thread groups' barriers take others), and
  // whether it issues wgmma: ptxas serializes every wgmma of a function that makes a call
  // (C7510), and device printf is one, so the emitter's own checks leave printf out of such
  // kernels (a printf the kernel asks for stays; ptxas's report of it is a compile warning).
  struct Scan : StmtVisitor {
    Emitter* em;
    void visit_inst(const InstNode& i) override {
      if (auto* s = dynamic_cast<const SyncInst*>(&i);
          s && (s->scope == SyncScope::Named || s->scope == SyncScope::NamedArrive))
        em->user_barriers_.insert(s->barrier_id);
      if (auto* w = dynamic_cast<const WgmmaMmaInst*>(&i)) {
        em->has_wgmma_ = true;
        auto& ds = em->wgmma_ds_;
        if (std::find(ds.begin(), ds.end(), w->d.get()) == ds.end()) ds.push_back(w->d.get());
      }
    }
  } scan;
  scan.em = this;
  scan.visit(k.body);
}

// --- text ---------------------------------------------------------------------------------

void Emitter::line(const std::string& text) {
  out_.append(indent_ * 2, ' ');
  out_ += text;
  out_ += '\n';
}

void Emitter::open(const std::string& head) {
  line(head + " {");
  ++indent_;
  blocks_.push_back(next_block_++);
}

void Emitter::reopen(const std::string& head) {
  --indent_;
  line("} " + head + " {");
  ++indent_;
  if (!blocks_.empty()) blocks_.pop_back();
  blocks_.push_back(next_block_++);
}

void Emitter::close() {
  --indent_;
  line("}");
  if (!blocks_.empty()) blocks_.pop_back();
}

bool Emitter::visible(const TensorNode* t) const {
  auto it = reg_blocks_.find(t);
  return it != reg_blocks_.end() && (it->second == 0 || std::find(blocks_.begin(), blocks_.end(), it->second) != blocks_.end());
}

std::string Emitter::fresh(const std::string& hint) {
  std::string base;
  for (char c : hint) base += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  // Names that begin with tilus_ are the emitter's own (tilus_smem, tilus_block_x, the slot
  // loops' tilus_s, ...): a tensor or variable named so becomes v_tilus_...
  if (base.empty() || std::isdigit(static_cast<unsigned char>(base[0])) || base.rfind("tilus_", 0) == 0)
    base = "v_" + base;
  std::string n = base;
  for (int i = 1; names_.count(n); ++i) n = fmt::format("{}_{}", base, i);
  names_.insert(n);
  return n;
}

[[noreturn]] void Emitter::fail(const InstNode& inst, const std::string& message) const {
  throw CompileError(fmt::format("{}: {}", inst.display_name(), message), inst.loc);
}

// --- expressions ------------------------------------------------------------------------------

const std::string& Emitter::block_read(const std::string& name, const std::string& init) {
  return block_reads_.emplace(name, init).first->first;
}

std::string Emitter::literal(DataType t, double v) {
  if (t.is_bool()) return v != 0.0 ? "true" : "false";
  if (t.is_integer()) {
    if (t.is_uint()) {
      uint64_t u = v < 0 ? uint64_t(int64_t(v)) : uint64_t(v);
      return t.bits() == 64 ? fmt::format("{}ull", u) : fmt::format("(({}){}u)", ctype(t), u);
    }
    int64_t i = int64_t(v);
    if (t.bits() == 64) return i == INT64_MIN ? "(-9223372036854775807ll - 1)" : fmt::format("{}ll", i);
    if (t.bits() == 32) return i == INT32_MIN ? "(-2147483647 - 1)" : (i < 0 ? fmt::format("({})", i) : std::to_string(i));
    return fmt::format("(({})({}))", ctype(t), i);
  }
  if (is_low_float(t)) return fmt::format("{}::from_code(0x{:x}u)", ctype(t), t.encode_float(v));
  if (t.is_float()) {
    std::string c = ctype(t);
    if (std::isnan(v)) return fmt::format("tilus::nan<{}>()", c);
    if (std::isinf(v)) return v > 0 ? fmt::format("tilus::inf<{}>()", c) : fmt::format("(-tilus::inf<{}>())", c);
    if (t == dtypes::float64) {
      std::string s = fmt::format("{:.17g}", v);
      if (s.find_first_of(".e") == std::string::npos) s += ".0";
      return v < 0 ? "(" + s + ")" : s;
    }
    std::string s = fmt::format("{:.9g}", v);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    s += "f";
    if (v < 0) s = "(" + s + ")";
    if (c == "float") return s;
    return fmt::format("tilus::cvt<{}>({})", c, s);
  }
  throw InternalError("literal of type " + t.name());
}

std::string Emitter::expr(const Expr& e) {
  if (!e.defined()) throw InternalError("emitting an undefined expression");
  DataType t = e.dtype();
  switch (e.kind()) {
    case ExprKind::Var: {
      auto v = e.as<VarNode>();
      auto it = var_names_.find(v);
      if (it != var_names_.end()) return it->second;
      if (v->role == VarRole::Builtin) {
        // Block indices are read once (block_read); the cluster builtins are constants without
        // clusters (a cluster of one block).
        const char* xyz = "xyz";
        for (int d = 0; d < 3; ++d) {
          if (v == builtin::block_idx(d).get())
            return block_read(fmt::format("tilus_block_{}", xyz[d]), fmt::format("tilus::block_idx({})", d));
          if (v == builtin::cluster_dim(d).get()) return std::to_string(kernel.cluster[d]);
          if (v == builtin::cluster_block_idx(d).get())
            return kernel.cluster[d] == 1 ? "0"
                                          : block_read(fmt::format("tilus_cluster_block_{}", xyz[d]),
                                                       fmt::format("tilus::cluster_ctaid({})", d));
        }
        if (v == builtin::cluster_block_rank().get())
          return kernel.cluster == std::array<int64_t, 3>{1, 1, 1} ? "0"
                                                                   : block_read("tilus_cluster_rank", "tilus::cluster_ctarank()");
      }
      throw InternalError(fmt::format("the CUDA emitter met variable '{}' before its definition", v->name));
    }
    case ExprKind::IntImm: return literal(t, t.is_uint() ? double(uint64_t(e.as<IntImmNode>()->value))
                                                       : double(e.as<IntImmNode>()->value));
    case ExprKind::FloatImm: return literal(t, e.as<FloatImmNode>()->value);
    case ExprKind::BoolImm: return e.as<BoolImmNode>()->value ? "true" : "false";
    case ExprKind::Unary: {
      auto n = e.as<UnaryNode>();
      std::string a = expr(n->a);
      switch (n->op) {
        case UnaryOp::Neg:
          if (t.is_integer() && t.bits() < 32) return fmt::format("(({})(-{}))", ctype(t), a);
          if (is_low_float(t)) return fmt::format("tilus::cvt<{}>(-float({}))", ctype(t), a);
          return fmt::format("(-{})", a);
        case UnaryOp::Not: return fmt::format("(!{})", a);
        case UnaryOp::BitNot:
          if (t.is_bool()) return fmt::format("(!{})", a);
          return fmt::format("(({})(~{}))", ctype(t), a);
      }
      break;
    }
    case ExprKind::Binary: {
      auto n = e.as<BinaryNode>();
      std::string a = expr(n->a), b = expr(n->b);
      DataType ot = n->a.dtype();
      switch (n->op) {
        // Integers name their type: int64_t (long) and a literal's long long would not deduce.
        case BinaryOp::Min:
          return t.is_integer() ? fmt::format("tilus::min_<{}>({}, {})", ctype(t), a, b)
                                : fmt::format("tilus::min_({}, {})", a, b);
        case BinaryOp::Max:
          return t.is_integer() ? fmt::format("tilus::max_<{}>({}, {})", ctype(t), a, b)
                                : fmt::format("tilus::max_({}, {})", a, b);
        case BinaryOp::FloorDiv:
        case BinaryOp::FloorMod: {
          bool div = n->op == BinaryOp::FloorDiv;
          if (ot.is_uint()) return fmt::format("({} {} {})", a, div ? "/" : "%", b);
          // By a power of two, flooring is two's complement's arithmetic shift and mask: one
          // instruction where tilus::floor_div's sign fix-up costs several (a pipeline's stage
          // and phase, every step).
          auto c = n->b.as<IntImmNode>();
          if (options.floor_pow2 && ot.is_integer() && c && c->value > 1 && (c->value & (c->value - 1)) == 0) {
            int k = 0;
            while ((int64_t(1) << k) < c->value) ++k;
            std::string r = div ? fmt::format("({} >> {})", a, k) : fmt::format("({} & {})", a, c->value - 1);
            return t.bits() < 32 ? fmt::format("(({}){})", ctype(t), r) : r;
          }
          return fmt::format("tilus::floor_{}({}, {})", div ? "div" : "mod", a, b);
        }
        case BinaryOp::Mod:
          if (ot.is_float()) return fmt::format("tilus::fmod_({}, {})", a, b);
          break;
        default: break;
      }
      std::string s = fmt::format("({} {} {})", a, to_string(n->op), b);
      // C promotes narrow integers to int: bring arithmetic back to the IR's width.
      if (t.is_integer() && t.bits() < 32 && !is_comparison(n->op)) s = fmt::format("(({}){})", ctype(t), s);
      // Low-precision floats compute in float and round back after each operation.
      if (is_low_float(t) && !is_comparison(n->op)) s = fmt::format("tilus::cvt<{}>({})", ctype(t), s);
      return s;
    }
    case ExprKind::Select: {
      auto n = e.as<SelectNode>();
      return fmt::format("({} ? {} : {})", expr(n->cond), expr(n->t), expr(n->f));
    }
    case ExprKind::Cast: {
      auto n = e.as<CastNode>();
      DataType from = n->a.dtype();
      if (t.is_pointer() || from.is_pointer())
        return fmt::format("reinterpret_cast<{}>({})", ctype(t), expr(n->a));
      if ((t.is_integer() || t.is_bool()) && (from.is_integer() || from.is_bool()))
        return fmt::format("(({})({}))", ctype(t), expr(n->a));
      return fmt::format("tilus::cvt<{}>({})", ctype(t), expr(n->a));
    }
    case ExprKind::Call: {
      auto n = e.as<CallNode>();
      std::string args;
      for (size_t i = 0; i < n->args.size(); ++i) args += (i ? ", " : "") + expr(n->args[i]);
      return fmt::format("tilus::{}({})", n->name, args);
    }
  }
  throw InternalError("unknown expression kind");
}

// --- tensors ----------------------------------------------------------------------------------

const std::string& Emitter::reg(const Tensor& t) {
  auto it = regs_.find(t.get());
  if (it == regs_.end()) throw InternalError(fmt::format("register tensor '{}' used before its definition", t->name));
  return it->second;
}

std::string Emitter::declare_reg(const Tensor& t) {
  if (!t->layout.defined())
    throw CompileError(fmt::format("register tensor '{}' ({}) has no layout; run the pass pipeline first", t->name,
                                   t.type_str()));
  std::string name = fresh(t->name.empty() ? "r" : t->name);
  regs_[t.get()] = name;
  reg_blocks_[t.get()] = blocks_.empty() ? 0 : blocks_.back();
  if (t.dtype().is_subbyte())  // densely packed (DESIGN 4): a tilus::packed array
    linef("__align__(16) tilus::packed<{}, {}, {}> {};", ctype(t.dtype()), t.dtype().bits(), t->layout.local_size(), name);
  else
    linef("__align__(16) {} {}[{}];", ctype(t.dtype()), name, t->layout.local_size());
  return name;
}

const std::string& Emitter::global_ptr(const Tensor& t) const {
  auto it = global_ptrs_.find(t.get());
  if (it == global_ptrs_.end()) throw InternalError(fmt::format("global tensor '{}' used before its view", t->name));
  return it->second;
}

std::vector<Expr> Emitter::spatial_index(const RegisterLayout& l) {
  std::vector<Expr> out;
  for (auto& e : l.index_exprs(scope().thread, 0)) out.push_back(simplify(e));
  return out;
}

std::vector<int64_t> Emitter::local_index(const RegisterLayout& l, int64_t slot) { return l.map(0, slot); }

Expr Emitter::primary_replica(const RegisterLayout& l) {
  Expr cond = bool_const(true);
  const auto& sp = l.spatial_modes();
  int64_t stride = 1;
  for (int p = int(sp.size()) - 1; p >= 0; --p) {
    int64_t ext = sp[p] < 0 ? -sp[p] : l.mode_shape()[sp[p]];
    if (sp[p] < 0 && ext > 1) {
      Expr digit = Expr(scope().thread) / stride % ext;
      cond = cond && (digit == 0);
    }
    stride *= ext;
  }
  return simplify(cond);
}

std::vector<int64_t> Emitter::slot_map(const RegisterLayout& dst, const RegisterLayout& src,
                                       const std::function<std::vector<int64_t>(const std::vector<int64_t>&)>& index_map) {
  std::vector<int64_t> out(dst.local_size(), -1);
  int64_t threads = std::min(dst.num_threads(), src.num_threads());
  for (int64_t s = 0; s < dst.local_size(); ++s) {
    for (int64_t t = 0; t < threads; ++t) {
      auto idx = index_map(dst.map(t, s));
      int64_t found = -1;
      for (auto& [thread, slot] : src.owners(idx))
        if (thread == t) {
          found = slot;
          break;
        }
      if (found < 0 || (out[s] >= 0 && out[s] != found)) return {};
      out[s] = found;
    }
  }
  return out;
}

int64_t Emitter::workspace(int64_t bytes) {
  workspace_bytes_ = std::max(workspace_bytes_, bytes);
  return (kernel.shared_memory_bytes + 127) / 128 * 128;
}

std::string Emitter::workspace_ptr(DataType t) {
  return fmt::format("reinterpret_cast<{}*>(tilus_smem + {})", ctype(t), (kernel.shared_memory_bytes + 127) / 128 * 128);
}

// --- statements -------------------------------------------------------------------------------

void Emitter::emit_stmt(const Stmt& s) {
  if (!s) return;
  switch (s->kind) {
    case StmtKind::Seq:
      for (auto& c : static_cast<const SeqStmtNode&>(*s).stmts) emit_stmt(c);
      return;
    case StmtKind::For: {
      auto& n = static_cast<const ForStmtNode&>(*s);
      Expr b = simplify(n.begin), e = simplify(n.end), st = simplify(n.step);
      std::string v = fresh(n.var.name());
      var_names_[n.var.get()] = v;
      if (n.unroll.kind == Unroll::All) line("#pragma unroll");
      else if (n.unroll.kind == Unroll::Factor) linef("#pragma unroll {}", n.unroll.factor);
      std::string cond;
      if (st.is_int_const() && st.int_value() > 0) {
        cond = fmt::format("{} < {}", v, expr(e));
      } else if (st.is_int_const()) {
        cond = fmt::format("{} > {}", v, expr(e));
      } else {
        cond = fmt::format("({0} > 0 ? {1} < {2} : {1} > {2})", expr(st), v, expr(e));
      }
      open(fmt::format("for ({} {} = {}; {}; {} += {})", ctype(n.var.dtype()), v, expr(b), cond, v, expr(st)));
      emit_stmt(n.body);
      close();
      return;
    }
    case StmtKind::If: {
      auto& n = static_cast<const IfStmtNode&>(*s);
      open(fmt::format("if ({})", expr(simplify(n.cond))));
      emit_stmt(n.then_body);
      if (n.else_body) {
        // a C++ block of its own: the register arrays the then branch declared are not visible here
        // (a wgmma fence there must not name them)
        reopen("else");
        emit_stmt(n.else_body);
      }
      close();
      return;
    }
    case StmtKind::While: {
      auto& n = static_cast<const WhileStmtNode&>(*s);
      open(fmt::format("while ({})", expr(n.cond)));
      emit_stmt(n.body);
      close();
      return;
    }
    case StmtKind::Break: line("break;"); return;
    case StmtKind::Continue: line("continue;"); return;
    case StmtKind::Return: line("return;"); return;
    case StmtKind::Let: {
      auto& n = static_cast<const LetStmtNode&>(*s);
      Expr value = simplify(n.value);
      std::string v = fresh(n.var.name());
      // A constant pointer, not a pointer to constants (a let may hold a semaphore's address).
      if (n.var.dtype().is_pointer()) linef("{} const {} = {};", ctype(n.var.dtype()), v, expr(value));
      else linef("const {} {} = {};", ctype(n.var.dtype()), v, expr(value));
      var_names_[n.var.get()] = v;
      return;
    }
    case StmtKind::Declare: {
      auto& n = static_cast<const DeclareStmtNode&>(*s);
      std::string v = fresh(n.var.name());
      linef("{} {} = {};", ctype(n.var.dtype()), v, expr(simplify(n.init)));
      var_names_[n.var.get()] = v;
      return;
    }
    case StmtKind::Assign: {
      auto& n = static_cast<const AssignStmtNode&>(*s);
      linef("{} = {};", expr(n.var), expr(simplify(n.value)));
      return;
    }
    case StmtKind::Inst: emit_inst(*static_cast<const InstStmtNode&>(*s).inst); return;
    case StmtKind::ThreadGroup: {
      auto& n = static_cast<const ThreadGroupStmtNode&>(*s);
      const ThreadScope& outer = scope();
      std::string outer_name = expr(outer.thread);
      if (n.num_threads == 1)
        open(fmt::format("if ({} == {})", outer_name, n.thread_begin));
      else
        open(fmt::format("if ({0} >= {1} && {0} < {2})", outer_name, n.thread_begin, n.thread_begin + n.num_threads));
      const Var& inner = facts_.group_thread(n);
      std::string name = fresh("tg");
      // Unused where the group's body never asks for its thread index: no NVRTC warning.
      linef("[[maybe_unused]] const int32_t {} = {} - {};", name, outer_name, n.thread_begin);
      var_names_[inner.get()] = name;
      scopes_.push_back(ThreadScope{inner, outer.begin + n.thread_begin, n.num_threads});
      emit_stmt(n.body);
      scopes_.pop_back();
      close();
      return;
    }
  }
}

void Emitter::emit_inst(const InstNode& inst) {
  // Which instruction (and user line) each block of code came from; the file's base name
  // keeps the source (and so the cache key) independent of where the checkout lives.
  if (inst.kind() != InstKind::AnnotateLayout && inst.kind() != InstKind::GlobalView) {
    std::string where;
    if (inst.loc.valid()) {
      std::string file = inst.loc.file.substr(inst.loc.file.find_last_of('/') + 1);
      where = fmt::format(" ({}:{})", file, inst.loc.line);
    }
    linef("// {}{}", inst.display_name(), where);
  }
  // The family its definition names lowers it (inst_def.h); a definition-driven instruction's
  // target is its definition's rule.
  const InstDef& def = inst.def();
  if (inst.kind() == InstKind::Defined && target.sm < def.traits.min_sm)
    fail(inst, fmt::format("{} needs sm_{} or newer, the target is {}", def.name, def.traits.min_sm, target.arch));
  switch (def.emit) {
    case EmitFamily::Memory: emit_memory(inst); return;
    case EmitFamily::AsyncProxy: emit_async_proxy(inst); return;
    case EmitFamily::Wgmma: emit_wgmma(inst); return;
    case EmitFamily::Barrier: emit_barrier(inst); return;
    case EmitFamily::Builtin: emit_builtin(inst); return;
    case EmitFamily::Tcgen05: emit_tcgen05(inst); return;
    case EmitFamily::Hint:  // annotations are consumed by layout inference
      if (inst.kind() == InstKind::Assume)
        linef("__builtin_assume({});", expr(simplify(static_cast<const AssumeInst&>(inst).cond)));
      return;
    case EmitFamily::Auto: break;
  }
  // Everything whose traits name global or shared memory is the memory family's.
  if (inst.touches_memory()) {
    emit_memory(inst);
    return;
  }
  switch (inst.kind()) {
    case InstKind::Dot: emit_dot(inst); return;
    case InstKind::Reduce: emit_reduce(inst); return;
    case InstKind::Printf: emit_printf(inst); return;
    default: emit_compute(inst); return;
  }
}

void Emitter::emit_barrier(const InstNode& inst) {
  const ThreadScope& s = scope();
  if (s.threads == kernel.num_threads()) {
    line("__syncthreads();");
  } else if (s.threads >= 32) {
    int& id = group_barriers_[s.begin * 4096 + s.threads];
    if (id == 0) {
      while (user_barriers_.count(barrier_ids_)) ++barrier_ids_;  // ids the kernel names itself
      if (barrier_ids_ >= 16)
        fail(inst, fmt::format("more than {} distinct thread groups synchronize (besides the {} named barrier ids "
                               "sync_threads uses); the GPU has 16 barriers",
                               15 - user_barriers_.size(), user_barriers_.size()));
      id = barrier_ids_++;
    }
    linef("tilus::named_barrier({}, {});", id, s.threads);
  } else {
    uint32_t mask = s.threads == 32 ? 0xffffffffu : (((1u << s.threads) - 1) << (s.begin % 32));
    linef("__syncwarp({:#x}u);", mask);
  }
}

void Emitter::emit_printf(const InstNode& inst) {
  auto& i = static_cast<const PrintfInst&>(inst);
  std::string fmt_text = c_text(i.format);
  std::string args;
  for (auto& a : i.args) {
    std::string v = expr(simplify(a));
    DataType t = a.dtype();
    // printf's variadic arguments: floats as double, narrow integers as int.
    if (t.is_float()) v = fmt::format("double(tilus::cvt<float>({}))", v);
    else if (t.is_bool() || (t.is_integer() && t.bits() < 32)) v = fmt::format("int({})", v);
    args += ", " + v;
  }
  linef("printf(\"{}\"{});", fmt_text, args);
}

// --- the kernel -------------------------------------------------------------------------------

KernelSource Emitter::run() {
  if (kernel.warps < 1) throw CompileError(fmt::format("kernel {}: warps is not set", kernel.name), kernel.loc);
  KernelSource src = kernel_signature(kernel, facts_);
  src.name = fresh(kernel.name);
  src.arch = target.arch;
  if (src.clustered() && target.sm < 90)
    throw CompileError(fmt::format("kernel {}: thread-block clusters (cluster_blocks {}) need sm_90 or newer, not {}",
                                   kernel.name, fmt::join(kernel.cluster, "x"), target.arch),
                       kernel.loc);
  std::string params;
  for (size_t i = 0; i < kernel.params.size(); ++i) {
    const Var& p = kernel.params[i];
    std::string name = fresh(p.name());
    var_names_[p.get()] = name;
    std::string type = ctype(p.dtype());
    if (p.dtype().is_pointer()) type += " __restrict__";
    params += fmt::format("{}{} {}", i ? ", " : "", type, name);
  }
  // The global tensors' memory, after the kernel's own parameters (the launcher provides it).
  for (const GlobalScratch& g : kernel.global_tensors) {
    std::string name = fresh(g.ptr.name());
    var_names_[g.ptr.get()] = name;
    params += fmt::format("{}{} __restrict__ {}", params.empty() ? "" : ", ", ctype(g.ptr.dtype()), name);
  }
  // The TMA tensor maps, after those (the launcher encodes them).
  for (size_t i = 0; i < kernel.tensor_maps.size(); ++i)
    params += fmt::format("{}const __grid_constant__ tilus::TensorMap tilus_tensor_map_{}", params.empty() ? "" : ", ", i);
  if (!kernel.tensor_maps.empty() && target.sm < 90)
    throw CompileError(fmt::format("kernel {}: TMA copies need sm_90, the target is {}", kernel.name, target.arch),
                       kernel.tensor_maps[0].loc);
  ++indent_;
  line("extern __shared__ __align__(1024) unsigned char tilus_smem[];");
  line("const int32_t tid = int32_t(threadIdx.x);");
  if (kernel.copy_barriers > 0) {
    // The mbarriers of synchronous TMA copies: one arrival (the issuing thread's expect-tx)
    // per phase; each thread tracks the phase it waits for.
    open("if (tid == 0)");
    for (int64_t k = 0; k < kernel.copy_barriers; ++k)
      linef("tilus::mbarrier_init(tilus::smem_addr(tilus_smem) + {}u, 1u);", kernel.copy_barrier_offset + 8 * k);
    line("tilus::fence_mbarrier_init();");
    close();
    line("__syncthreads();");
    for (int64_t k = 0; k < kernel.copy_barriers; ++k) linef("uint32_t tilus_copy_phase_{} = 0u;", k);
  }
  size_t prologue_end = out_.size();
  emit_stmt(kernel.body);
  --indent_;
  std::string body = out_;
  out_.clear();
  // The block indices the body uses, read once before it (block_read).
  std::string reads;
  for (const auto& [name, init] : block_reads_) reads += fmt::format("  const int32_t {} = {};\n", name, init);
  body.insert(prologue_end, reads);
  line("// Generated by tilus from kernel " + kernel.name + ". Do not edit.");
  line("#include \"tilus/device.h\"");
  line("");
  // setmaxnreg needs the register count at the kernel's entry, which ptxas derives from the
  // launch bounds only with a minimum of blocks per SM: without it, it may ignore every
  // setmaxnreg of the kernel (its remark C7508) and compile all of it within the even split
  // (flash_attention.py's d = 256 kernel then spilled 2.8 KB and serialized its wgmma).
  // attrs.min_blocks asks the same of ptxas for occupancy: registers a thread within 64K / (its
  // blocks times their threads).
  int64_t min_blocks = std::max<int64_t>(kernel.min_blocks, contains_inst(kernel.body, InstKind::SetMaxNReg) ? 1 : 0);
  std::string bounds = min_blocks > 0 ? fmt::format("{}, {}", src.block_threads, min_blocks)
                                      : std::to_string(src.block_threads);
  linef("extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{", bounds, src.name, params);
  out_ += body;
  line("}");
  src.source = out_;
  src.cooperative = cooperative_;
  src.shared_memory_bytes =
      workspace_bytes_ > 0 ? (kernel.shared_memory_bytes + 127) / 128 * 128 + workspace_bytes_ : kernel.shared_memory_bytes;
  if (src.shared_memory_bytes > target.shared_memory_per_block)
    throw CompileError(fmt::format("kernel {} needs {} bytes of shared memory ({} planned + {} of reduction "
                                   "workspace) but {} allows {}",
                                   kernel.name, src.shared_memory_bytes, kernel.shared_memory_bytes, workspace_bytes_,
                                   target.arch, target.shared_memory_per_block),
                       kernel.loc);
  return src;
}

}  // namespace cuda
}  // namespace tilus
