#include "tilus/ir/printer.h"

#include <fmt/format.h>

#include <unordered_map>
#include <unordered_set>

#include "tilus/ir/functor.h"

namespace tilus {

namespace {

class Printer {
 public:
  explicit Printer(const PrintOptions& opts) : opts_(opts) {}

  std::string kernel(const Kernel& k) {
    std::string params;
    for (size_t i = 0; i < k.params.size(); ++i)
      params += fmt::format("{}{}: {}", i ? ", " : "", var_name(*k.params[i].operator->()), k.params[i].dtype().name());
    out_ += fmt::format("kernel {}({})\n", k.name, params);
    if (!k.constants.empty()) {
      std::string c;
      for (size_t i = 0; i < k.constants.size(); ++i)
        c += fmt::format("{}{}={}", i ? ", " : "", k.constants[i].first, k.constants[i].second);
      out_ += fmt::format("  constants {}\n", c);
    }
    std::string grid;
    for (size_t i = 0; i < k.grid.size(); ++i) grid += (i ? ", " : "") + expr(k.grid[i]);
    out_ += fmt::format("  grid [{}]\n", grid);
    out_ += fmt::format("  warps {}\n", k.warps);
    if (!k.param_divisibility.empty()) {
      std::string facts;
      for (auto& [index, d] : k.param_divisibility) {
        if (index < 0 || index >= int(k.params.size())) continue;
        const Var& p = k.params[index];
        facts += fmt::format("{}{} {} {}", facts.empty() ? "" : ", ", var_name(*p.operator->()),
                             p.dtype().is_pointer() ? "aligned" : "divisible by", d);
      }
      out_ += fmt::format("  specialized {}\n", facts);
    }
    if (k.shared_memory_bytes > 0) out_ += fmt::format("  shared_memory {}\n", k.shared_memory_bytes);
    if (k.cluster != std::array<int64_t, 3>{1, 1, 1})
      out_ += fmt::format("  cluster [{}, {}, {}]\n", k.cluster[0], k.cluster[1], k.cluster[2]);
    if (k.min_blocks > 0) out_ += fmt::format("  min_blocks {}\n", k.min_blocks);
    for (size_t i = 0; i < k.tensor_maps.size(); ++i) {
      const TensorMapSpec& m = k.tensor_maps[i];
      std::string shape, strides;
      for (size_t d = 0; d < m.shape.size(); ++d) {
        shape += fmt::format("{}{}", d ? ", " : "", expr(m.shape[d]));
        strides += fmt::format("{}{}", d ? ", " : "", expr(m.strides[d]));
      }
      std::string im2col = m.im2col ? fmt::format(" im2col pixel_box [{}, {}] stride {}", m.lower, m.upper,
                                                   m.traversal_stride)
                                    : "";
      out_ += fmt::format("  tensor_map {}: {} + {} bytes, {}[{}] strides [{}] box [{}] swizzle {}{}\n", i,
                          var_name(*k.params[m.param].operator->()), expr(m.offset), m.dtype.name(), shape, strides,
                          fmt::join(m.box, ", "), m.swizzle_bytes, im2col);
    }
    for (const GlobalScratch& g : k.global_tensors) {
      std::string shape;
      for (size_t d = 0; d < g.shape.size(); ++d) shape += (d ? ", " : "") + expr(g.shape[d]);
      out_ += fmt::format("  global_tensor {}: {}[{}]{}\n", var_name(*g.ptr.operator->()), g.dtype().name(), shape,
                          g.requires_clean ? " requires_clean" : "");
    }
    if (k.copy_barriers > 0)
      out_ += fmt::format("  copy_barriers {}{}\n", k.copy_barriers,
                          k.copy_barrier_offset >= 0 ? fmt::format(" at {}", k.copy_barrier_offset) : "");
    out_ += "{\n";
    stmt(k.body, 1);
    out_ += "}\n";
    return out_;
  }

  std::string stmt_only(const Stmt& s) {
    stmt(s, 0);
    return out_;
  }

  std::string inst_only(const Inst& i) {
    inst(*i, 0);
    return out_;
  }

 private:
  const PrintOptions& opts_;
  std::string out_;
  std::unordered_map<const void*, std::string> names_;
  std::unordered_set<std::string> used_;
  std::unordered_map<std::string, int> suffixes_;  // per hint, the last suffix tried

  // hint, or hint_1, hint_2, ...: the first not taken. Names are never released, so the search
  // goes on from the hint's last suffix (linear in the names, not quadratic).
  std::string unique(const std::string& hint) {
    std::string base = hint.empty() ? "t" : hint;
    std::string n = base;
    int& i = suffixes_[base];
    while (used_.count(n)) n = fmt::format("{}_{}", base, ++i);
    used_.insert(n);
    return n;
  }

  std::string var_name(const VarNode& v) {
    if (v.role == VarRole::Builtin) return v.name;
    auto it = names_.find(&v);
    if (it != names_.end()) return it->second;
    return names_[&v] = unique(v.name);
  }

  std::string tensor_name(const Tensor& t) {
    if (!t.defined()) return "<none>";
    auto it = names_.find(t.get());
    if (it != names_.end()) return it->second;
    return names_[t.get()] = unique(t->name);
  }

  std::string expr(const Expr& e) {
    return to_string(e, [this](const VarNode& v) { return var_name(v); });
  }

  std::string tensor_type(const Tensor& t) {
    std::string s = fmt::format("{} {}[", to_string(t.scope()), t.dtype().name());
    for (size_t i = 0; i < t.shape().size(); ++i) s += (i ? ", " : "") + expr(t.shape()[i]);
    s += "]";
    if (t.is_global()) {
      s += " strides=[";
      for (size_t i = 0; i < t->strides.size(); ++i) s += (i ? ", " : "") + expr(t->strides[i]);
      s += "]";
    }
    if (opts_.layouts && t.is_register() && t->layout.defined()) s += " " + t->layout.str();
    if (opts_.layouts && t.is_shared() && t->shared_layout.defined()) s += " " + t->shared_layout.str();
    return s;
  }

  void line(int indent, const std::string& text, const SourceLoc* loc = nullptr) {
    out_.append(indent * 2, ' ');
    out_ += text;
    if (opts_.locations && loc && loc->valid()) out_ += "  # " + loc->str();
    out_ += "\n";
  }

  // Collects an instruction's fields as "name=value", grouping repeated names into lists.
  struct Fields : FieldVisitor {
    Printer* p;
    Tensor out;
    std::vector<std::pair<std::string, std::vector<std::string>>> items;
    void add(const char* name, std::string value, bool list) {
      if (!items.empty() && items.back().first == name) {
        items.back().second.push_back(std::move(value));
      } else {
        items.push_back({name, {std::move(value)}});
        if (list) items.back().second.insert(items.back().second.begin(), "\x01");  // marks a list
      }
    }
    void output(const char*, Tensor& t, uint8_t) override { out = t; }
    void operand(const char* name, Tensor& t, Access, uint8_t, const CopyRegion*) override { add(name, p->tensor_name(t), false); }
    void expr(const char* name, Expr& e) override { add(name, p->expr(e), false); }
    void exprs(const char* name, std::vector<Expr>& es) override {
      items.push_back({name, {"\x01"}});
      for (auto& e : es) items.back().second.push_back(p->expr(e));
    }
    void binder(const char* name, Var& v) override { add(name, p->var_name(*v.operator->()), false); }
    void attr(const char* name, const std::string& value) override { items.push_back({name, {value}}); }
  };

  void inst(const InstNode& i, int indent) {
    Fields f;
    f.p = this;
    i.visit_fields(f);
    std::string args;
    for (size_t k = 0; k < f.items.size(); ++k) {
      auto& [name, values] = f.items[k];
      std::string v;
      bool list = !values.empty() && values[0] == "\x01";
      if (list || values.size() > 1) {
        v = "[";
        bool first = true;
        for (auto& x : values) {
          if (x == "\x01") continue;
          v += (first ? "" : ", ") + x;
          first = false;
        }
        v += "]";
      } else {
        v = values.empty() ? "" : values[0];
      }
      args += fmt::format("{}{}={}", k ? ", " : "", name, v);
    }
    std::string text;
    if (f.out.defined()) {
      std::string out_name = tensor_name(f.out);
      text = fmt::format("{} = {}({}) : {}", out_name, i.display_name(), args, tensor_type(f.out));
    } else {
      text = fmt::format("{}({})", i.display_name(), args);
    }
    line(indent, text, &i.loc);
    if (i.lowering.defined()) line(indent + 1, "lowering: " + lowering(i));
  }

  // The record; its thread mapping where no register operand's layout shows it (or a lane exchange
  // changes it).
  std::string lowering(const InstNode& i) {
    const Lowering& l = i.lowering;
    std::string s = l.str();
    bool register_end = false;
    for (auto& o : i.traits()) register_end = register_end || (o.tensor.defined() && o.tensor.is_register());
    if (l.mapping.defined() && (!register_end || l.exchange.defined())) s += " mapping=" + l.mapping.str();
    if (!l.note.empty()) s += " note=\"" + l.note + "\"";
    return s;
  }

  void body(const Stmt& s, int indent) {
    if (!s) return;
    stmt(s, indent);
  }

  void stmt(const Stmt& s, int indent) {
    if (!s) return;
    switch (s->kind) {
      case StmtKind::Seq:
        for (auto& c : static_cast<const SeqStmtNode&>(*s).stmts) stmt(c, indent);
        return;
      case StmtKind::For: {
        auto& n = static_cast<const ForStmtNode&>(*s);
        std::string unroll;
        if (n.unroll.kind == Unroll::All) unroll = " unroll=all";
        if (n.unroll.kind == Unroll::Factor) unroll = fmt::format(" unroll={}", n.unroll.factor);
        const LoopPipeline& p = n.pipeline;
        if (p.num_stages) unroll += fmt::format(" num_stages={}", p.num_stages);
        if (p.warp_specialize) unroll += " warp_specialize";
        if (p.persistent) unroll += " persistent";
        if (!p.epilogue.empty()) unroll += fmt::format(" epilogue={}", p.epilogue);
        if (!p.ring.empty()) unroll += fmt::format(" ring={}", p.ring);
        if (p.wgmma_in_flight) unroll += fmt::format(" wgmma_in_flight={}", p.wgmma_in_flight);
        if (!p.schedule.empty()) unroll += fmt::format(" schedule=\"{}\"", p.schedule);
        if (!p.note.empty()) unroll += fmt::format(" note=\"{}\"", p.note);
        line(indent, fmt::format("for {} in range({}, {}, {}){} {{", var_name(*n.var.operator->()), expr(n.begin),
                                 expr(n.end), expr(n.step), unroll),
             &n.loc);
        body(n.body, indent + 1);
        line(indent, "}");
        return;
      }
      case StmtKind::If: {
        auto& n = static_cast<const IfStmtNode&>(*s);
        line(indent, fmt::format("if {} {{", expr(n.cond)), &n.loc);
        body(n.then_body, indent + 1);
        if (n.else_body) {
          line(indent, "} else {");
          body(n.else_body, indent + 1);
        }
        line(indent, "}");
        return;
      }
      case StmtKind::While: {
        auto& n = static_cast<const WhileStmtNode&>(*s);
        line(indent, fmt::format("while {} {{", expr(n.cond)), &n.loc);
        body(n.body, indent + 1);
        line(indent, "}");
        return;
      }
      case StmtKind::Break: line(indent, "break", &s->loc); return;
      case StmtKind::Continue: line(indent, "continue", &s->loc); return;
      case StmtKind::Return: line(indent, "return", &s->loc); return;
      case StmtKind::Let: {
        auto& n = static_cast<const LetStmtNode&>(*s);
        line(indent, fmt::format("let {}: {} = {}", var_name(*n.var.operator->()), n.var.dtype().name(), expr(n.value)),
             &n.loc);
        return;
      }
      case StmtKind::Declare: {
        auto& n = static_cast<const DeclareStmtNode&>(*s);
        line(indent, fmt::format("var {}: {} = {}", var_name(*n.var.operator->()), n.var.dtype().name(), expr(n.init)),
             &n.loc);
        return;
      }
      case StmtKind::Assign: {
        auto& n = static_cast<const AssignStmtNode&>(*s);
        line(indent, fmt::format("{} = {}", var_name(*n.var.operator->()), expr(n.value)), &n.loc);
        return;
      }
      case StmtKind::Inst: inst(*static_cast<const InstStmtNode&>(*s).inst, indent); return;
      case StmtKind::ThreadGroup: {
        auto& n = static_cast<const ThreadGroupStmtNode&>(*s);
        line(indent, fmt::format("{}(thread_begin={}, num_threads={}) {{", to_string(n.group_kind), n.thread_begin,
                                 n.num_threads),
             &n.loc);
        body(n.body, indent + 1);
        line(indent, "}");
        return;
      }
    }
  }
};

}  // namespace

std::string print(const Program& p, const PrintOptions& opts) {
  std::string out;
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    if (i) out += "\n";
    out += print(p.kernels[i], opts);
  }
  return out;
}

std::string print(const Kernel& k, const PrintOptions& opts) { return Printer(opts).kernel(k); }
std::string print(const Stmt& s, const PrintOptions& opts) { return Printer(opts).stmt_only(s); }
std::string print(const Inst& i, const PrintOptions& opts) { return Printer(opts).inst_only(i); }

}  // namespace tilus
