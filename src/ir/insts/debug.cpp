// Printing and assumptions.
// Each instruction's definition (inst_def.h): name, group, emitters' family, traits, attributes
// and its verifier hook, the check below.
#include "../verify_util.h"

namespace tilus {

namespace {
using namespace verify_detail;

// The format as a C string literal would spell it.
std::string escaped(const std::string& f) {
  std::string out;
  for (char c : f) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else out += c;
  }
  return out;
}

void check_printf(const PrintfInst& i) {
  int64_t conversions = 0;
  const std::string& f = i.format;
  for (size_t k = 0; k < f.size(); ++k) {
    if (f[k] != '%') continue;
    if (k + 1 < f.size() && f[k + 1] == '%') {
      ++k;
      continue;
    }
    if (k + 1 == f.size())
      fail(i, fmt::format("the format \"{}\" ends with a lone '%' (write %% for a percent sign)", escaped(f)));
    ++conversions;
  }
  if (conversions != int64_t(i.args.size()))
    fail(i, fmt::format("the format \"{}\" has {} % conversions but {} arguments were given: {}", escaped(f), conversions,
                        i.args.size(), exprs_str(i.args)));
  for (auto& a : i.args)
    if (!a.defined() || !(a.dtype().is_numeric() || a.dtype().is_bool() || a.dtype().is_pointer()))
      fail(i, fmt::format("arguments must be scalar numbers, bools or pointers, got {} of type {}", expr_str(a),
                          dtype_str(a)));
}

void check_assume(const AssumeInst& i) {
  if (!i.cond.defined() || !i.cond.dtype().is_bool())
    fail(i, fmt::format("the condition must be a bool expression, got {} of type {}", expr_str(i.cond),
                        dtype_str(i.cond)));
}

}  // namespace

void insts::add_debug(std::vector<InstDef>& d) {
  using verify_detail::hook;
  d.push_back({.name = "printf", .kind = InstKind::Printf, .summary = "a formatted print from every thread",
               .verify = hook(check_printf)});
  d.push_back({.name = "assume", .kind = InstKind::Assume, .emit = EmitFamily::Hint,
               .summary = "a condition the compiler may assume", .verify = hook(check_assume)});

}

}  // namespace tilus
