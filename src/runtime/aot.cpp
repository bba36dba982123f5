#include "tilus/runtime/aot.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "tilus/ir/tensor.h"
#include "tilus/runtime/jit.h"

namespace tilus::detail {
// The bundle runtime (src/runtime/aot/tilus_aot_runtime.h), embedded at build time.
const std::vector<std::pair<std::string, std::string>>& embedded_aot_runtime();
}  // namespace tilus::detail

namespace tilus {

namespace {

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

const std::set<std::string>& c_keywords() {
  static const std::set<std::string> k = {
      "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern",
      "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed",
      "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "bool",
      "true", "false", "stream", "class", "new", "delete", "this", "template", "typename", "namespace", "private",
      "public", "protected", "operator", "friend", "virtual", "explicit", "mutable", "using", "try", "catch", "throw"};
  return k;
}

// A C string literal.
std::string c_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\{:03o}", int(c));
    else out += c;
  }
  return out + "\"";
}

// Text for a C comment ("*/" broken).
std::string comment(std::string text) {
  for (size_t at; (at = text.find("*/")) != std::string::npos;) text.replace(at, 2, "* /");
  return text;
}

// The C type of a scalar (nullptr: none, a by-value or float16 scalar cannot be passed from C).
const char* c_scalar(DataType t) {
  if (t == dtypes::boolean) return "bool";
  if (t == dtypes::float32) return "float";
  if (t == dtypes::float64) return "double";
  if (t.is_integer() && (t.bits() == 8 || t.bits() == 16 || t.bits() == 32 || t.bits() == 64)) {
    static const char* s[] = {"int8_t", "int16_t", "int32_t", "int64_t"};
    static const char* u[] = {"uint8_t", "uint16_t", "uint32_t", "uint64_t"};
    int i = t.bits() == 8 ? 0 : t.bits() == 16 ? 1 : t.bits() == 32 ? 2 : 3;
    return t.is_uint() ? u[i] : s[i];
  }
  return nullptr;
}

// The C pointer type of a pointer parameter: its pointee's C type where C has one, void
// otherwise (float16, bfloat16, fp8, sub-byte types); const unless the kernel writes it.
std::string c_pointer(const KernelParam& p) {
  const char* elem = c_scalar(p.dtype.pointee());
  return fmt::format("{}{}*", p.contract.writes() ? "" : "const ", elem ? elem : "void");
}

// Prints integer expressions over the parameters as C, with tilus's semantics: every value a
// long long (unsigned long long for unsigned 64-bit types) wrapped to its type, division by
// zero and out-of-range shifts setting `tilus_bad` (what evaluate() reports as undefined).
class CExpr {
 public:
  CExpr(const KernelSource& s, const std::vector<std::string>& names, std::string what)
      : vars_(s.param_vars), names_(names), kernel_(s.name), what_(std::move(what)) {}
  CExpr(const std::vector<Var>& vars, const std::vector<std::string>& names, std::string kernel, std::string what)
      : vars_(vars), names_(names), kernel_(std::move(kernel)), what_(std::move(what)) {}

  std::string operator()(const Expr& e) const {
    DataType t = e.dtype();
    if (!t.is_integer() && !t.is_bool())
      fail(fmt::format("its {} type is not an integer", t.name()));
    switch (e.kind()) {
      case ExprKind::Var: {
        for (size_t i = 0; i < vars_.size(); ++i)
          if (vars_[i].same_as(Var(e)))
            return t.is_uint() && t.bits() == 64 ? fmt::format("((unsigned long long){})", names_[i])
                                                 : fmt::format("((long long){})", names_[i]);
        fail(fmt::format("it uses '{}', which is not a parameter", Var(e).name()));
      }
      case ExprKind::IntImm: {
        int64_t v = e.as<IntImmNode>()->value;
        if (t.is_uint() && t.bits() == 64) return fmt::format("{}ULL", uint64_t(v));
        return v == std::numeric_limits<int64_t>::min() ? "(-9223372036854775807LL - 1)" : fmt::format("{}LL", v);
      }
      case ExprKind::BoolImm: return e.as<BoolImmNode>()->value ? "1" : "0";
      case ExprKind::Cast: {
        const Expr& a = e.as<CastNode>()->a;
        if (!a.dtype().is_integer() && !a.dtype().is_bool()) fail("it converts a float");
        return t.is_bool() ? fmt::format("({} != 0)", (*this)(a)) : wrap((*this)(a), t);
      }
      case ExprKind::Select: {
        auto n = e.as<SelectNode>();
        return fmt::format("({} ? {} : {})", (*this)(n->cond), (*this)(n->t), (*this)(n->f));
      }
      case ExprKind::Unary: {
        auto n = e.as<UnaryNode>();
        std::string a = (*this)(n->a);
        switch (n->op) {
          case UnaryOp::Not: return fmt::format("(!{})", a);
          case UnaryOp::BitNot: return t.is_bool() ? fmt::format("(!{})", a) : wrap(fmt::format("(-1LL ^ (long long){})", a), t);
          case UnaryOp::Neg: return wrap(fmt::format("(long long)(0ULL - (unsigned long long){})", a), t);
        }
        break;
      }
      case ExprKind::Binary: return binary(*e.as<BinaryNode>(), t);
      default: break;
    }
    fail(fmt::format("{} cannot be evaluated in C", to_string(e)));
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw CompileError(fmt::format("tilus AOT: kernel {}: {} cannot be evaluated by the bundle: {}", kernel_, what_, why));
  }

  // A value wrapped to type t, as the IR's integers wrap.
  std::string wrap(const std::string& v, DataType t) const {
    if (t.is_bool()) return fmt::format("({} != 0)", v);
    const char* c = c_scalar(t);
    if (!c) fail(fmt::format("it computes in {}", t.name()));
    if (t.is_uint() && t.bits() == 64) return fmt::format("((unsigned long long)({}))", v);
    if (t.is_int() && t.bits() == 64) return fmt::format("((long long)({}))", v);
    return fmt::format("((long long)({})({}))", c, v);
  }

  std::string binary(const BinaryNode& n, DataType t) const {
    std::string a = (*this)(n.a), b = (*this)(n.b);
    bool u = n.a.dtype().is_uint();
    bool u64 = u && n.a.dtype().bits() == 64;
    auto arith = [&](const char* op) {
      return wrap(fmt::format("((unsigned long long){} {} (unsigned long long){})", a, op, b), t);
    };
    auto helper = [&](const char* f) {
      return wrap(fmt::format("tilus_aot_{}{}({}, {}, &tilus_bad)", u ? "u" : "", f, a, b), t);
    };
    switch (n.op) {
      case BinaryOp::Add: return arith("+");
      case BinaryOp::Sub: return arith("-");
      case BinaryOp::Mul: return arith("*");
      case BinaryOp::Div: return helper("div");
      case BinaryOp::Mod: return helper("mod");
      // Unsigned floor division is division.
      case BinaryOp::FloorDiv: return u ? helper("div") : helper("floordiv");
      case BinaryOp::FloorMod: return u ? helper("mod") : helper("floormod");
      case BinaryOp::Min: return wrap(fmt::format("tilus_aot_{}min({}, {})", u ? "u" : "", a, b), t);
      case BinaryOp::Max: return wrap(fmt::format("tilus_aot_{}max({}, {})", u ? "u" : "", a, b), t);
      case BinaryOp::BitAnd: return wrap(fmt::format("({} & {})", a, b), t);
      case BinaryOp::BitOr: return wrap(fmt::format("({} | {})", a, b), t);
      case BinaryOp::BitXor: return wrap(fmt::format("({} ^ {})", a, b), t);
      case BinaryOp::Shl: return wrap(fmt::format("tilus_aot_shl({}, {}, {}, &tilus_bad)", a, b, t.bits()), t);
      case BinaryOp::Shr:
        return wrap(fmt::format("tilus_aot_shr({}, {}, {}, {}, &tilus_bad)", a, b, t.bits(), u ? 1 : 0), t);
      case BinaryOp::And: return fmt::format("({} && {})", a, b);
      case BinaryOp::Or: return fmt::format("({} || {})", a, b);
      default: break;
    }
    const char* op = n.op == BinaryOp::Eq ? "==" : n.op == BinaryOp::Ne ? "!=" : n.op == BinaryOp::Lt ? "<"
                     : n.op == BinaryOp::Le ? "<=" : n.op == BinaryOp::Gt ? ">" : ">=";
    if (u && !u64) return fmt::format("((unsigned long long){} {} (unsigned long long){})", a, op, b);
    return fmt::format("({} {} {})", a, op, b);
  }

  const std::vector<Var>& vars_;
  const std::vector<std::string>& names_;
  std::string kernel_, what_;
};

struct Arch {
  int major = 0, minor = 0;
  bool specific = false;
};
Arch parse_arch(const std::string& arch) {
  Arch a;
  std::string digits = arch.rfind("sm_", 0) == 0 ? arch.substr(3) : "";
  if (!digits.empty() && digits.back() == 'a') {
    a.specific = true;
    digits.pop_back();
  }
  if (digits.size() < 2 || !std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(c); }))
    throw CompileError(fmt::format("tilus AOT: '{}' is not a GPU arch (sm_80, sm_90a, ...)", arch));
  a.major = std::stoi(digits.substr(0, digits.size() - 1));
  a.minor = digits.back() - '0';
  return a;
}

// The C names of a kernel's parameters: the Script's, with a trailing '_' where one would be a C
// keyword, the stream's name or one of the bundle's own (tilus_...).
std::vector<std::string> c_names(const KernelSource& s) {
  std::vector<std::string> names;
  for (const KernelParam& p : s.params) {
    std::string n = is_identifier(p.name) ? p.name : "arg" + std::to_string(names.size());
    while (c_keywords().count(n) || n.rfind("tilus_", 0) == 0 ||
           std::find(names.begin(), names.end(), n) != names.end())
      n += "_";
    names.push_back(n);
  }
  return names;
}

std::string signature(const std::string& fn, const KernelSource& s) {
  std::vector<std::string> names = c_names(s);
  std::string params = "struct CUstream_st* stream";
  for (size_t i = 0; i < s.params.size(); ++i) {
    const KernelParam& p = s.params[i];
    params += ", " + (p.dtype.is_pointer() ? c_pointer(p) : std::string(c_scalar(p.dtype))) + " " + names[i];
  }
  return fmt::format("tilus_aot_status {}({})", fn, params);
}

// " when lo <= m <= hi, ..." for a bucket's ranges ("" for none).
std::string bucket_text(const std::vector<AotRange>& when, const std::vector<std::string>& names) {
  std::string out;
  for (const AotRange& r : when) {
    std::string lo = r.lo == std::numeric_limits<int64_t>::min() ? "" : fmt::format("{} <= ", r.lo);
    std::string hi = r.hi == std::numeric_limits<int64_t>::max() ? "" : fmt::format(" <= {}", r.hi);
    out += fmt::format("{}{}{}{}", out.empty() ? " when " : ", ", lo, names[size_t(r.param)], hi);
  }
  return out;
}

std::string archs_of(const std::vector<std::string>& archs) { return fmt::format("{}", fmt::join(archs, ", ")); }

}  // namespace

namespace detail {
std::string aot_c_expression(const Expr& e, const std::vector<Var>& vars, const std::vector<std::string>& names) {
  return CExpr(vars, names, "?", "the expression")(e);
}
}  // namespace detail

AotFacts aot_all_specialized(const Program& traced) {
  AotFacts facts;
  const Kernel& k = traced.kernels.at(0);
  for (size_t i = 0; i < k.params.size(); ++i) {
    DataType t = k.params[i].dtype();
    if (t.is_pointer() || t.is_integer()) facts[int(i)] = kSpecializationDivisor;
  }
  return facts;
}

AotBundle::AotBundle(std::string name) : name_(std::move(name)) {
  if (!is_identifier(name_) || c_keywords().count(name_) || name_.rfind("tilus_", 0) == 0)
    throw CompileError(fmt::format("tilus AOT: the bundle's name '{}' must be a C identifier (letters, digits, '_'; "
                                   "not a keyword, not starting with tilus_): it prefixes every function",
                                   name_));
}

void AotBundle::add(const std::string& name, const Program& traced, const std::vector<std::string>& archs,
                    std::vector<AotFacts> specializations, DiskCache* cache, std::vector<AotRange> when) {
  std::string fn = name_ + "_" + name;
  if (!is_identifier(name))
    throw CompileError(fmt::format("tilus AOT: kernel name '{}' must be a C identifier (letters, digits, '_')", name));
  if (fn == name_ + "_last_error" || fn == name_ + "_set_checks")
    throw CompileError(fmt::format("tilus AOT: bundle {} already has a function {}", name_, fn));
  Entry* existing = nullptr;
  for (Entry& e : entries_)
    if (e.name == fn) existing = &e;
  if (existing && existing->variants.back().when.empty())
    throw CompileError(fmt::format("tilus AOT: bundle {} already has a function {} for any sizes: give the earlier "
                                   "add a `when` range to add another size bucket",
                                   name_, fn));
  if (archs.empty()) throw CompileError(fmt::format("tilus AOT: kernel {}: no arch to compile for", fn));
  if (traced.kernels.empty()) throw CompileError(fmt::format("tilus AOT: kernel {}: the program has no kernel", fn));
  if (specializations.empty()) specializations = {aot_all_specialized(traced), {}};
  // Most specialized first, each set once: the launch function takes the first that holds.
  std::stable_sort(specializations.begin(), specializations.end(),
                   [](const AotFacts& a, const AotFacts& b) { return a.size() > b.size(); });
  specializations.erase(std::unique(specializations.begin(), specializations.end()), specializations.end());
  const Kernel& k = traced.kernels[0];
  for (const AotRange& r : when)
    if (r.param < 0 || r.param >= int(k.params.size()) || !k.params[size_t(r.param)].dtype().is_integer() ||
        r.lo > r.hi)
      throw CompileError(fmt::format("tilus AOT: kernel {}: size bucket {{parameter {}: [{}, {}]}} names no integer "
                                     "parameter or is empty",
                                     fn, r.param, r.lo, r.hi));
  for (const AotFacts& f : specializations)
    for (auto& [index, d] : f)
      if (index < 0 || index >= int(k.params.size()) || d < 1 || (d & (d - 1)))
        throw CompileError(fmt::format("tilus AOT: kernel {}: specialization fact {{{}: {}}} names no parameter or is "
                                       "not a power of two",
                                       fn, index, d));
  for (const std::string& arch : archs) parse_arch(arch);
  // The best arch first (arch-specific before portable at one compute capability).
  std::vector<std::string> ordered = archs;
  std::stable_sort(ordered.begin(), ordered.end(), [](const std::string& a, const std::string& b) {
    Arch x = parse_arch(a), y = parse_arch(b);
    return std::tie(x.major, x.minor, x.specific) > std::tie(y.major, y.minor, y.specific);
  });
  ordered.erase(std::unique(ordered.begin(), ordered.end()), ordered.end());
  Entry entry{fn, {}, k.loc};
  for (const std::string& arch : ordered) {
    for (const AotFacts& facts : specializations) {
      Program p = traced;
      specialize(p, facts);
      Variant v{facts, compile_program(p, arch, cache), when};
      const KernelSource& s = v.kernel.source;
      for (size_t i = 0; i < s.params.size(); ++i) {
        const KernelParam& param = s.params[i];
        if (param.is_blob() || (!param.dtype.is_pointer() && !c_scalar(param.dtype)))
          throw CompileError(fmt::format("tilus AOT: kernel {}: parameter '{}' ({}) cannot be passed from C: bundles "
                                         "take pointers and scalars of bool, 8- to 64-bit integers, float32 and "
                                         "float64",
                                         fn, param.name, param.type_name()),
                             k.loc);
      }
      const Entry& first = existing ? *existing : entry;
      if (!first.variants.empty() && signature(fn, s) != signature(fn, first.variants[0].kernel.source))
        throw CompileError(fmt::format("tilus AOT: {}: every size bucket of a function takes the same C arguments; it "
                                       "takes ({}), this program ({})",
                                       fn, signature(fn, first.variants[0].kernel.source), signature(fn, s)),
                           k.loc);
      entry.variants.push_back(std::move(v));
    }
  }
  if (existing) {
    for (Variant& v : entry.variants) existing->variants.push_back(std::move(v));
  } else {
    entries_.push_back(std::move(entry));
  }
}

std::string AotBundle::header() const {
  std::string guard = name_;
  std::transform(guard.begin(), guard.end(), guard.begin(), [](char c) { return char(std::toupper(c)); });
  std::string out = fmt::format(
      "/* {0}.h: the tilus ahead-of-time bundle {0} (tilus {1}). Generated by tilus; do not edit.\n"
      " *\n"
      " * Each function launches one kernel on `stream` (a CUstream or cudaStream_t; NULL: the default\n"
      " * stream) in the calling thread's current CUDA context (the primary context of device 0 when it has\n"
      " * none) and returns without waiting for it. It picks the first variant compiled for this GPU whose\n"
      " * specialization the arguments meet, checks the arguments (null pointers; with checks on, that each\n"
      " * pointer is device memory whose allocation holds what the kernel reaches; the grid) and loads the\n"
      " * cubin into the context at its first use. On failure it launches nothing and returns a nonzero\n"
      " * status; {0}_last_error() says why. Thread-safe. Build: {0}.c with a C11 compiler (GCC or Clang),\n"
      " * link -ldl -lpthread; running needs the CUDA driver (libcuda.so.1), loaded at the first call. */\n"
      "#ifndef {2}_H\n#define {2}_H\n\n#include <stdbool.h>\n#include <stdint.h>\n\n"
      "#ifdef __cplusplus\nextern \"C\" {{\n#endif\n\n"
      "struct CUstream_st; /* CUstream, cudaStream_t */\n\n"
      "#ifndef TILUS_AOT_STATUS_DEFINED\n#define TILUS_AOT_STATUS_DEFINED\n"
      "typedef enum tilus_aot_status {{\n"
      "  TILUS_AOT_SUCCESS = 0,\n"
      "  TILUS_AOT_ERROR_ARGUMENT = 1,   /* an argument the kernel cannot take: nothing was launched */\n"
      "  TILUS_AOT_ERROR_NO_VARIANT = 2, /* the bundle has no kernel compiled for this GPU */\n"
      "  TILUS_AOT_ERROR_CUDA = 3        /* no CUDA driver or device, or a driver call failed */\n"
      "}} tilus_aot_status;\n#endif\n\n"
      "/* Why this thread's last failed call of the bundle failed (\"\" before any failure). */\n"
      "const char* {0}_last_error(void);\n"
      "/* Pointer extent checks (one cuMemGetAddressRange per pointer argument): on (1) by default. */\n"
      "void {0}_set_checks(int enabled);\n",
      name_, TILUS_VERSION, guard);
  for (const Entry& e : entries_) {
    const KernelSource& s = e.variants[0].kernel.source;
    std::vector<std::string> names = c_names(s);
    std::string doc = fmt::format("\n/* {} ({}): Script {}", e.name, e.loc.str(), s.name);
    for (size_t i = 0; i < s.params.size(); ++i) {
      const KernelParam& p = s.params[i];
      if (!p.dtype.is_pointer()) continue;
      doc += fmt::format("\n *   {}: {}{}", names[i], p.dtype.pointee().name(),
                         p.contract.writes() ? fmt::format(", written ({})", p.contract.write_inst) : ", read");
      for (const ViewContract& v : p.contract.views)
        doc += fmt::format("; reaches {} elements", v.extent.defined() ? to_string(v.extent) : std::string("?"));
    }
    auto grid_of = [](const KernelSource& k) {
      std::string grid;
      for (const Expr& g : k.grid) grid += (grid.empty() ? "" : ", ") + to_string(g);
      return fmt::format("grid ({}), {} threads per block", grid, k.block_threads);
    };
    // Size buckets may be other configurations: then each variant says its own grid.
    bool same_grid = std::all_of(e.variants.begin(), e.variants.end(),
                                 [&](const Variant& v) { return grid_of(v.kernel.source) == grid_of(s); });
    if (same_grid) doc += "\n *   " + grid_of(s);
    doc += "\n * Variants, tried in this order:";
    for (const Variant& v : e.variants) {
      std::string facts;
      for (auto& [i, d] : v.facts)
        facts += fmt::format("{}{} % {} == 0", facts.empty() ? "" : ", ", names[size_t(i)], d);
      std::string grid = grid_of(v.kernel.source);
      doc += fmt::format("\n *   {}{}{}{}{}", v.kernel.source.arch, facts.empty() ? ": any arguments" : ": " + facts,
                         bucket_text(v.when, names), v.kernel.source.tensor_maps.empty() ? "" : " (TMA)",
                         same_grid ? "" : "; " + grid.substr(0, grid.find(", " + std::to_string(v.kernel.source.block_threads))));
    }
    out += comment(doc) + " */\n" + signature(e.name, s) + ";\n";
  }
  out += "\n#ifdef __cplusplus\n}  /* extern \"C\" */\n#endif\n\n#endif\n";
  return out;
}

std::string AotBundle::source() const {
  std::string out = fmt::format(
      "/* {0}.c: the tilus ahead-of-time bundle {0} (tilus {1}): its cubins and launch functions.\n"
      " * Generated by tilus; do not edit. */\n"
      "#include \"{0}.h\"\n#include \"tilus_aot_runtime.h\"\n\n"
      "const char* {0}_last_error(void) {{ return tilus_aot_error; }}\n"
      "void {0}_set_checks(int enabled) {{ tilus_aot_checks = enabled != 0; }}\n",
      name_, TILUS_VERSION);
  for (const Entry& e : entries_) {
    const KernelSource& s0 = e.variants[0].kernel.source;
    std::vector<std::string> names = c_names(s0);
    std::vector<std::string> archs;
    for (const Variant& v : e.variants)
      if (std::find(archs.begin(), archs.end(), v.kernel.source.arch) == archs.end())
        archs.push_back(v.kernel.source.arch);
    // The cubins and the variants' launch facts.
    std::string table;
    for (size_t vi = 0; vi < e.variants.size(); ++vi) {
      const CompiledKernel& k = e.variants[vi].kernel;
      const KernelSource& s = k.source;
      out += fmt::format("\n_Alignas(64) static const unsigned char {}_cubin_{}[{}] = {{", e.name, vi, k.cubin.size());
      for (size_t i = 0; i < k.cubin.size(); ++i)
        out += fmt::format("{}{}", i % 24 == 0 ? "\n" : "", int(static_cast<unsigned char>(k.cubin[i]))) + ",";
      out += "\n};\n";
      Arch a = parse_arch(s.arch);
      table += fmt::format("    {{{}, {}, {}, {}, {}, {}_cubin_{}, {}, {}, {{{}, {}, {}}}, {}}},\n", c_string(s.name),
                           c_string(s.arch), a.major, a.minor, a.specific ? 1 : 0, e.name, vi, s.block_threads,
                           s.shared_memory_bytes, s.cluster[0], s.cluster[1], s.cluster[2], s.cooperative ? 1 : 0);
    }
    out += fmt::format("\nstatic const tilus_aot_variant_t {0}_variants[{1}] = {{\n{2}}};\n"
                       "static tilus_aot_modules_t {0}_modules[{1}];\n",
                       e.name, e.variants.size(), table);
    std::string params, call_args;
    for (size_t i = 0; i < s0.params.size(); ++i) {
      const KernelParam& p = s0.params[i];
      params += ", " + (p.dtype.is_pointer() ? c_pointer(p) : std::string(c_scalar(p.dtype))) + " " + names[i];
      call_args += ", " + names[i];
    }
    // One function per variant: its checks, grid, global tensors, tensor maps and launch.
    for (size_t vi = 0; vi < e.variants.size(); ++vi) {
      const KernelSource& s = e.variants[vi].kernel.source;
      std::string body;
      auto line = [&](const std::string& text) { body += "  " + text + "\n"; };
      line(fmt::format("static const char tilus_fn[] = {};", c_string(e.name)));
      line(fmt::format("const tilus_aot_variant_t* tilus_v = &{}_variants[{}];", e.name, vi));
      line("const tilus_aot_loaded_t* tilus_l = NULL;");
      line("tilus_aot_status tilus_s;");
      line("int tilus_bad = 0;");
      line("long long tilus_x;");
      line("(void)tilus_x;");
      line("(void)tilus_bad;");
      // Pointers: not null; with checks on, their allocations hold what each view reaches.
      for (size_t i = 0; i < s.params.size(); ++i) {
        const KernelParam& p = s.params[i];
        if (!p.dtype.is_pointer()) continue;
        bool checked = false;
        for (const ViewContract& v : p.contract.views) {
          if (!v.extent.defined()) continue;
          CExpr c(s, names, fmt::format("the extent of the global_view at {}", v.loc.str()));
          std::string extent;
          try {
            extent = c(v.extent);
          } catch (const CompileError&) {
            continue;  // not evaluable from C: not size-checked (as the JIT skips what it cannot evaluate)
          }
          int bits = v.dtype.bits();
          line(fmt::format("tilus_x = {};", extent));
          line(fmt::format("if (!tilus_bad && (tilus_s = tilus_aot_check_pointer(tilus_fn, {}, {}, tilus_x > 0 ? "
                           "(tilus_x * {} + 7) / 8 : 0, {}))) return tilus_s;",
                           c_string(names[i]), names[i], bits,
                           c_string(fmt::format("its global_view at {}: {}", v.loc.str(), v.type))));
          line("tilus_bad = 0;");
          checked = true;
        }
        if (!checked)
          line(fmt::format("if ((tilus_s = tilus_aot_check_pointer(tilus_fn, {}, {}, 0, \"\"))) return tilus_s;",
                           c_string(names[i]), names[i]));
      }
      // The grid.
      line("unsigned tilus_grid[3] = {1, 1, 1};");
      for (size_t d = 0; d < 3; ++d) {
        std::string value = "1", text = "1";
        if (d < s.grid.size()) {
          value = CExpr(s, names, fmt::format("grid dimension {} ({})", d, to_string(s.grid[d])))(s.grid[d]);
          text = to_string(s.grid[d]);
        }
        line(fmt::format("tilus_x = {};", value));
        line(fmt::format("if ((tilus_s = tilus_aot_grid(tilus_fn, {}, {}, tilus_x, tilus_bad, {}, &tilus_grid[{}]))) "
                         "return tilus_s;",
                         d, c_string(text), s.cluster[d], d));
      }
      // The kernel's assumptions about its scalars (it was compiled trusting them).
      for (const Assumption& a : s.assumptions) {
        std::string text = fmt::format("assume({}) at {}", to_string(a.cond), a.loc.str());
        line(fmt::format("tilus_x = {};", CExpr(s, names, text)(a.cond)));
        line(fmt::format("if (!tilus_bad && !tilus_x) return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT, \"%s: %s does "
                         "not hold for these arguments\", tilus_fn, {});",
                         c_string(text)));
      }
      line("if ((tilus_s = tilus_aot_load(tilus_fn, tilus_v, &" + e.name + "_modules[" + std::to_string(vi) +
           "], tilus_dev, &tilus_l))) return tilus_s;");
      // Global tensors: each at a 128-byte multiple of its kind's buffer, in call order.
      std::string hidden;
      if (!s.global_tensors.empty()) {
        line("long long tilus_total[2] = {0, 0};");
        line("unsigned long long tilus_base[2] = {0, 0};");
        for (size_t g = 0; g < s.global_tensors.size(); ++g) {
          const GlobalScratch& t = s.global_tensors[g];
          int clean = t.requires_clean ? 1 : 0;
          std::string what = fmt::format("global_tensor at {} ({}{})", t.loc.str(), t.dtype().name(), shape_str(t.shape));
          line(fmt::format("tilus_x = {};", CExpr(s, names, "the size of the " + what)(t.bytes())));
          line(fmt::format("if (tilus_bad || tilus_x < 0) return tilus_aot_fail(TILUS_AOT_ERROR_ARGUMENT, \"%s: %s: "
                           "its size is %lld bytes for these arguments\", tilus_fn, {}, tilus_bad ? -1LL : tilus_x);",
                           c_string(what)));
          line(fmt::format("long long tilus_offset{} = tilus_total[{}];", g, clean));
          line(fmt::format("tilus_total[{}] += ((tilus_x > 1 ? tilus_x : 1) + 127) / 128 * 128;", clean));
        }
        for (int clean = 0; clean < 2; ++clean)
          line(fmt::format("if (tilus_total[{0}] > 0 && (tilus_s = tilus_aot_scratch(tilus_fn, tilus_dev, tilus_stream, "
                           "{0}, tilus_total[{0}], &tilus_base[{0}]))) return tilus_s;",
                           clean));
        for (size_t g = 0; g < s.global_tensors.size(); ++g) {
          line(fmt::format("unsigned long long tilus_global{} = tilus_base[{}] + (unsigned long long)tilus_offset{};",
                           g, s.global_tensors[g].requires_clean ? 1 : 0, g));
          hidden += fmt::format(", &tilus_global{}", g);
        }
      }
      // TMA tensor maps.
      for (size_t m = 0; m < s.tensor_maps.size(); ++m) {
        const TensorMapSpec& spec = s.tensor_maps[m];
        std::string copy = fmt::format("{} at {}", spec.inst, spec.loc.str());
        CExpr c(s, names, "the TMA view of " + copy);
        std::vector<std::string> dims, strides, box;
        for (size_t d = 0; d < spec.shape.size(); ++d) {
          dims.push_back(c(spec.shape[d]));
          strides.push_back(c(spec.strides[d]));
        }
        for (int64_t b : spec.box) box.push_back(std::to_string(b) + "u");  // im2col: {pixels, channels}
        line(fmt::format("_Alignas(64) unsigned char tilus_map{}[128];", m));
        line("{");
        line(fmt::format("  const long long dims[] = {{{}}};", fmt::join(dims, ", ")));
        line(fmt::format("  const long long strides[] = {{{}}};", fmt::join(strides, ", ")));
        line(fmt::format("  const unsigned box[] = {{{}}};", fmt::join(box, ", ")));
        if (spec.im2col)
          line(fmt::format("  const int im2col[] = {{{}, {}, {}}};", spec.lower, spec.upper, spec.traversal_stride));
        line(fmt::format("  unsigned long long address = (unsigned long long)(uintptr_t){} + (unsigned long long)({});",
                         names[size_t(spec.param)], c(spec.offset)));
        line(fmt::format("  static tilus_aot_map_cache_t cache;"));
        line(fmt::format("  if ((tilus_s = tilus_aot_tensor_map_cached(&cache, tilus_dev, tilus_fn, {}, {}, {}, {}, "
                         "address, dims, strides, box, {}, {}, tilus_bad, tilus_map{}))) return tilus_s;",
                         c_string(copy), c_string(names[size_t(spec.param)]), spec.dtype.storage_bytes(1),
                         spec.shape.size(), spec.swizzle_bytes, spec.im2col ? "im2col" : "NULL", m));
        line("}");
        hidden += fmt::format(", tilus_map{}", m);
      }
      std::string args;
      for (size_t i = 0; i < s.params.size(); ++i) args += fmt::format("{}(void*)&{}", i ? ", " : "", names[i]);
      if (args.empty() && !hidden.empty()) hidden = hidden.substr(2);
      std::string all = args + hidden;
      line(fmt::format("void* tilus_params[] = {{{}}};", all.empty() ? "NULL" : all));
      line("return tilus_aot_launch(tilus_fn, tilus_v, tilus_l, tilus_grid, tilus_params, tilus_stream);");
      out += fmt::format("\n/* {} for {}. */\nstatic tilus_aot_status {}_v{}(const tilus_aot_device_t* tilus_dev, "
                         "void* tilus_stream{}) {{\n{}}}\n",
                         e.name, s.arch, e.name, vi, params, body);
    }
    // The public function: the context, then the first variant that runs here and whose facts hold.
    std::string body;
    body += "  const tilus_aot_device_t* tilus_dev = NULL;\n";
    body += fmt::format("  tilus_aot_status tilus_s = tilus_aot_current({}, &tilus_dev);\n", c_string(e.name));
    body += "  if (tilus_s) return tilus_s;\n";
    for (size_t vi = 0; vi < e.variants.size(); ++vi) {
      std::string cond = fmt::format("tilus_aot_runs_on(&{}_variants[{}], tilus_dev)", e.name, vi);
      for (const AotRange& r : e.variants[vi].when) {
        if (r.lo != std::numeric_limits<int64_t>::min())
          cond += fmt::format(" && (long long){} >= {}LL", names[size_t(r.param)], r.lo);
        if (r.hi != std::numeric_limits<int64_t>::max())
          cond += fmt::format(" && (long long){} <= {}LL", names[size_t(r.param)], r.hi);
      }
      for (auto& [i, d] : e.variants[vi].facts) {
        const KernelParam& p = s0.params[size_t(i)];
        cond += p.dtype.is_pointer() ? fmt::format(" && (uintptr_t){} % {} == 0", names[size_t(i)], d)
                                     : fmt::format(" && (long long){} % {} == 0", names[size_t(i)], d);
      }
      body += fmt::format("  if ({}) return {}_v{}(tilus_dev, stream{});\n", cond, e.name, vi, call_args);
    }
    bool buckets = std::any_of(e.variants.begin(), e.variants.end(), [](const Variant& v) { return !v.when.empty(); });
    std::string built_for = archs_of(archs);
    if (buckets) {
      built_for += " and size buckets";
      for (const Variant& v : e.variants)
        if (std::string b = bucket_text(v.when, names); built_for.find(b.empty() ? " any size" : b) == std::string::npos)
          built_for += b.empty() ? " any size" : b;
    }
    body += fmt::format("  return tilus_aot_no_variant({}, {}, tilus_dev);\n", c_string(e.name), c_string(built_for));
    out += "\n" + signature(e.name, s0) + " {\n" + body + "}\n";
  }
  return out;
}

const std::vector<std::pair<std::string, std::string>>& AotBundle::runtime() {
  return detail::embedded_aot_runtime();
}

std::string AotBundle::cmake() const {
  return fmt::format(
      "# The tilus ahead-of-time bundle {0} (tilus {1}): a static library with one C function per kernel\n"
      "# ({0}.h). Generated by tilus; do not edit. Use it with add_subdirectory(<this directory>) and\n"
      "# target_link_libraries(<your target> PRIVATE {0}); running needs only the CUDA driver.\n"
      "cmake_minimum_required(VERSION 3.18)\n"
      "project({0} LANGUAGES C)\n"
      "find_package(Threads REQUIRED)\n"
      "add_library({0} STATIC {0}.c)\n"
      "set_target_properties({0} PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)\n"
      "target_include_directories({0} PUBLIC ${{CMAKE_CURRENT_SOURCE_DIR}})\n"
      "target_link_libraries({0} PRIVATE ${{CMAKE_DL_LIBS}} Threads::Threads)\n",
      name_, TILUS_VERSION);
}

std::vector<std::string> AotBundle::write(const std::string& dir) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw RuntimeError(fmt::format("tilus AOT: cannot create {}: {}", dir, ec.message()));
  std::vector<std::pair<std::string, std::string>> files = {{name_ + ".h", header()}, {name_ + ".c", source()}};
  for (auto& r : runtime()) files.push_back(r);
  files.emplace_back("CMakeLists.txt", cmake());
  std::vector<std::string> paths;
  for (auto& [file, text] : files) {
    std::string path = (fs::path(dir) / file).string();
    std::ofstream f(path, std::ios::binary);
    f << text;
    if (!f.good()) throw RuntimeError(fmt::format("tilus AOT: cannot write {}", path));
    paths.push_back(path);
  }
  return paths;
}

}  // namespace tilus
