// The registry of instruction definitions, the rules they carry as data, and DefinedInst.
#include "tilus/ir/inst_def.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>

namespace tilus {

const char* to_string(SyncRole r) {
  switch (r) {
    case SyncRole::None: return "none";
    case SyncRole::Commit: return "commit";
    case SyncRole::Wait: return "wait";
    case SyncRole::Arrive: return "arrive";
    case SyncRole::Expect: return "expect";
    case SyncRole::HandOver: return "hand-over";
    case SyncRole::BarrierWait: return "barrier-wait";
    case SyncRole::Barrier: return "barrier";
    case SyncRole::ProxyFence: return "proxy-fence";
  }
  return "?";
}

const AttrDef* InstDef::attr(std::string_view n) const {
  for (auto& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

namespace {

struct Registry {
  std::vector<InstDef> storage;
  std::vector<const InstDef*> all;
  std::unordered_map<std::string_view, const InstDef*> by_name;
  std::map<std::pair<int, int>, const InstDef*> by_kind;  // (kind, variant)

  Registry() {
    // One function per family (src/ir/insts/<family>.cpp), in the order docs/instructions.md
    // lists them.
    for (auto add : {insts::add_tensor, insts::add_memory, insts::add_compute, insts::add_mbarrier, insts::add_tma,
                     insts::add_fence, insts::add_wgmma, insts::add_tcgen05, insts::add_clc, insts::add_thread,
                     insts::add_debug})
      add(storage);
    for (auto& d : storage) {
      all.push_back(&d);
      by_name.emplace(d.name, &d);
      if (d.kind != InstKind::Defined) by_kind.emplace(std::make_pair(int(d.kind), d.variant), &d);
    }
  }
};

const Registry& registry() {
  static const Registry r;
  return r;
}

// The attribute values an instruction shows (as the printer does).
struct AttrCollector : FieldVisitor {
  std::vector<std::pair<std::string, std::string>> attrs;
  void attr(const char* name, const std::string& value) override { attrs.emplace_back(name, value); }
};

[[noreturn]] void fail(const InstNode& inst, const std::string& what) {
  throw CompileError(fmt::format("{}: {}", inst.display_name(), what), inst.loc);
}

std::string quoted_list(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + fmt::format("'{}'", v[i]);
  return s;
}

bool valid_value(const AttrDef& a, const std::string& v) {
  switch (a.type) {
    case AttrType::Bool: return v == "true" || v == "false";
    case AttrType::Int: {
      if (v.empty()) return false;
      size_t i = v[0] == '-' ? 1 : 0;
      return i < v.size() && std::all_of(v.begin() + long(i), v.end(), [](char c) { return c >= '0' && c <= '9'; });
    }
    case AttrType::String: return true;
  }
  return false;
}

const char* type_name(AttrType t) { return t == AttrType::Int ? "an integer" : t == AttrType::Bool ? "true or false" : "a string"; }

}  // namespace

const std::vector<const InstDef*>& inst_defs() { return registry().all; }

const InstDef* find_inst_def(std::string_view name) {
  auto& r = registry().by_name;
  auto it = r.find(name);
  return it == r.end() ? nullptr : it->second;
}

const InstDef& InstNode::def() const {
  if (kind() == InstKind::Defined) return *static_cast<const DefinedInst&>(*this).definition;
  auto& r = registry().by_kind;
  auto it = r.find({int(kind()), variant()});
  if (it == r.end()) it = r.lower_bound({int(kind()), -1});  // the kind's first definition
  if (it == r.end() || it->first.first != int(kind()))
    throw Error(fmt::format("internal error: instruction {} has no definition", name()));
  return *it->second;
}

std::optional<int64_t> int_attr(const InstNode& inst, std::string_view name) {
  AttrCollector c;
  inst.visit_fields(c);
  for (auto& [n, v] : c.attrs)
    if (n == name) return std::stoll(v);
  return std::nullopt;
}

Tensor sync_barrier(const InstNode& inst) {
  for (auto& o : inst.traits())
    if (!o.defines && o.tensor.defined() && o.tensor.is_shared()) return o.tensor;
  return Tensor();
}

void verify_definition_rules(const InstNode& inst) {
  const InstDef& d = inst.def();
  AttrCollector c;
  inst.visit_fields(c);
  for (auto& [name, value] : c.attrs) {
    const AttrDef* a = d.attr(name);
    if (!a) continue;  // shown for information (offsets the passes set, ...)
    if (!valid_value(*a, value))
      fail(inst, fmt::format("{} must be {}, got '{}'", name, type_name(a->type), value));
    if (!a->allowed.empty() && std::find(a->allowed.begin(), a->allowed.end(), value) == a->allowed.end())
      fail(inst, fmt::format("{} must be one of {}, got '{}'", name, quoted_list(a->allowed), value));
  }
  auto* di = inst.kind() == InstKind::Defined ? static_cast<const DefinedInst*>(&inst) : nullptr;
  if (!di) return;
  for (size_t i = 0; i < d.operands.size(); ++i) {
    const OperandDef& o = d.operands[i];
    const Tensor& t = di->tensors[i];
    bool ok = t.defined() && (o.dtype.empty() || t.dtype().name() == o.dtype) &&
              (o.numel == 0 || t.num_elements() == o.numel);
    if (!ok) {
      std::string want = scopes_str(o.scopes) + " tensor";
      if (!o.dtype.empty()) want += " of " + o.dtype;
      if (o.numel) want += fmt::format(" with {} element{}", o.numel, o.numel == 1 ? "" : "s");
      if (!o.doc.empty()) want += " (" + o.doc + ")";
      fail(inst, fmt::format("{} must be {}, got {}", o.name, want, t.defined() ? t.type_str() : "an undefined tensor"));
    }
  }
  for (size_t i = 0; i < d.scalars.size(); ++i) {
    const ScalarDef& s = d.scalars[i];
    const Expr& e = di->scalars[i];
    if (!e.defined()) {
      if (!s.optional) fail(inst, fmt::format("{} is required", s.name));
      continue;
    }
    if (s.integer && !e.dtype().is_integer())
      fail(inst, fmt::format("{} must be an integer, got {} of type {}", s.name, to_string(e), e.dtype().name()));
  }
}

// --- DefinedInst ------------------------------------------------------------------------------------

void DefinedInst::visit_fields(FieldVisitor& v) {
  for (size_t i = 0; i < definition->operands.size(); ++i) {
    const OperandDef& o = definition->operands[i];
    v.operand(o.name.c_str(), tensors[i], o.access, o.scopes, nullptr);
  }
  for (size_t i = 0; i < definition->scalars.size(); ++i)
    if (scalars[i].defined()) v.expr(definition->scalars[i].name.c_str(), scalars[i]);
  for (size_t i = 0; i < definition->attrs.size(); ++i)
    if (attrs[i] != definition->attrs[i].default_value) v.attr(definition->attrs[i].name.c_str(), attrs[i]);
}

const Tensor& DefinedInst::tensor(std::string_view n) const {
  for (size_t i = 0; i < definition->operands.size(); ++i)
    if (definition->operands[i].name == n) return tensors[i];
  throw Error(fmt::format("internal error: {} has no operand {}", name(), n));
}

const Expr& DefinedInst::scalar(std::string_view n) const {
  for (size_t i = 0; i < definition->scalars.size(); ++i)
    if (definition->scalars[i].name == n) return scalars[i];
  throw Error(fmt::format("internal error: {} has no scalar {}", name(), n));
}

const std::string& DefinedInst::attr(std::string_view n) const {
  for (size_t i = 0; i < definition->attrs.size(); ++i)
    if (definition->attrs[i].name == n) return attrs[i];
  throw Error(fmt::format("internal error: {} has no attribute {}", name(), n));
}

std::shared_ptr<DefinedInst> make_defined(std::string_view name, const std::vector<std::pair<std::string, Tensor>>& tensors,
                                          const std::vector<std::pair<std::string, Expr>>& scalars,
                                          const std::vector<std::pair<std::string, std::string>>& attrs, SourceLoc loc) {
  const InstDef* d = find_inst_def(name);
  if (!d || d->kind != InstKind::Defined)
    throw CompileError(fmt::format("{}: no such definition-driven instruction", name), loc);
  auto inst = make_inst<DefinedInst>(std::move(loc));
  inst->definition = d;
  inst->tensors.resize(d->operands.size());
  inst->scalars.resize(d->scalars.size());
  for (auto& a : d->attrs) inst->attrs.push_back(a.default_value);
  auto unknown = [&](const std::string& what, const std::string& n) {
    throw CompileError(fmt::format("{}: unknown {} {}", name, what, n), inst->loc);
  };
  for (auto& [n, t] : tensors) {
    auto it = std::find_if(d->operands.begin(), d->operands.end(), [&](const OperandDef& o) { return o.name == n; });
    if (it == d->operands.end()) unknown("operand", n);
    inst->tensors[size_t(it - d->operands.begin())] = t;
  }
  for (auto& [n, e] : scalars) {
    auto it = std::find_if(d->scalars.begin(), d->scalars.end(), [&](const ScalarDef& s) { return s.name == n; });
    if (it == d->scalars.end()) unknown("scalar", n);
    inst->scalars[size_t(it - d->scalars.begin())] = e;
  }
  for (auto& [n, v] : attrs) {
    auto it = std::find_if(d->attrs.begin(), d->attrs.end(), [&](const AttrDef& a) { return a.name == n; });
    if (it == d->attrs.end()) unknown("attribute", n);
    inst->attrs[size_t(it - d->attrs.begin())] = v;
  }
  for (size_t i = 0; i < d->attrs.size(); ++i)
    if (inst->attrs[i].empty() && d->attrs[i].default_value.empty())
      throw CompileError(fmt::format("{}: attribute {} is required", name, d->attrs[i].name), inst->loc);
  return inst;
}

}  // namespace tilus
