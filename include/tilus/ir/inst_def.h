// The definition of an instruction: what every layer needs to know about it, declared once.
//
// Every instruction the user can call has an InstDef: its name, the front-end group it belongs
// to (`mbarrier`, `tma`, ... or none for a method of the Script itself), the emitters' family
// that lowers it, its traits (what it does to asynchronous work in flight, its memory proxy,
// the architecture it needs), its typed attributes with their defaults and allowed values, and
// its verifier hook. The typed instructions of inst.h add their fields there and their operand
// traits in visit_fields; an instruction whose operands, scalars and attributes are data alone
// is a DefinedInst and needs nothing but its definition (the tracer, printer, verifier, Python
// binding and Python method follow from it).
//
// The synchronization passes ask the traits (InstDef::traits), not the instruction kind; the
// emitters send an instruction to the family its definition names. The definitions live in
// src/ir/insts/<family>.cpp, one file per family.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tilus/ir/inst.h"

namespace tilus {

// What an instruction does to the asynchronous work in flight (read by insert_async_waits and
// insert_barriers).
enum class SyncRole : uint8_t {
  None,
  Commit,       // closes a group of `completion` work
  Wait,         // waits until at most `n` groups of `completion` work are pending (no `n`: all, uncommitted too)
  Arrive,       // arrives on its barrier (the first shared operand)
  Expect,       // adds expected transaction bytes to its barrier (no arrival)
  HandOver,     // arrives on its barrier once the thread's `completion` work has landed (cp_async_barrier_noinc)
  BarrierWait,  // waits on its barrier: completes the work that completes on it or was handed to it
  Barrier,      // a barrier of threads (sync)
  ProxyFence,   // orders the generic proxy's accesses before the async proxy's
};
const char* to_string(SyncRole r);

enum class Proxy : uint8_t { Generic, Async };

// The emitters' family of an instruction: each backend sends it to that family's lowering.
enum class EmitFamily : uint8_t {
  Auto,        // by its traits: memory if it touches global or shared memory, else compute
  Memory,      // global / shared memory and the cp.async groups (codegen/*/memory.cpp)
  AsyncProxy,  // mbarriers, TMA groups, proxy fences (codegen/*/async_proxy.cpp)
  Wgmma,       // codegen/cuda/wgmma.cpp (the CPU backend runs wgmma.mma as memory)
  Barrier,     // a barrier of the current thread group
  Builtin,     // thread-level builtins (codegen/*/builtins.cpp)
  Tcgen05,     // tensor memory and the tcgen05 instructions (codegen/*/tcgen05.cpp)
  Hint,        // assumptions and annotations: nothing (CUDA: __builtin_assume)
};

struct InstTraits {
  SyncRole role = SyncRole::None;
  Completion completion = Completion::Synchronous;  // of Commit / Wait / HandOver
  Proxy proxy = Proxy::Generic;
  int min_sm = 0;  // the oldest target that has it (0: any)
};

// A typed attribute of an instruction. Its value travels as text (as the printer shows it).
enum class AttrType : uint8_t { Int, Bool, String };
struct AttrDef {
  std::string name;
  AttrType type = AttrType::Int;
  std::string default_value;         // printed only when different; "": required
  std::vector<std::string> allowed;  // empty: any value of the type
};

// An operand of a DefinedInst (rules as data: scopes, dtype, element count).
struct OperandDef {
  std::string name;
  uint8_t scopes = kShared;
  Access access = Access::Read;
  std::string dtype;  // "": any
  int64_t numel = 0;  // 0: any
  std::string doc;
};

// A scalar operand of a DefinedInst.
struct ScalarDef {
  std::string name;
  bool integer = true;
  bool optional = false;
  std::string doc;
};

// Which threads may issue an instruction (checked at trace time against the current thread group).
enum class GroupRule : uint8_t {
  Any,
  OneWarp,  // exactly one warp: a group of 32 threads starting on a warp (tcgen05.mma, commit, cp)
  Warps,    // whole warps: a group of a positive multiple of 32 threads starting on a warp
};

struct InstDef {
  std::string name;   // as the user calls it: "copy_async_wait_group", "mbarrier.wait"
  std::string group;  // the front end's group ("mbarrier", "tma", ...); "": a method of the Script
  InstKind kind = InstKind::Defined;
  int variant = 0;    // which variant of the kind (InstNode::variant: an op, a scope)
  EmitFamily emit = EmitFamily::Auto;
  InstTraits traits;
  std::string summary;  // one line, as docs/instructions.md describes it
  std::vector<AttrDef> attrs;
  // DefinedInst only: its operands and scalars, in the order the front ends take them.
  std::vector<OperandDef> operands;
  std::vector<ScalarDef> scalars;
  bool side_effects = true;
  GroupRule threads = GroupRule::Any;
  // The rules beyond the data (shapes, dtypes, arity); throws CompileError.
  std::function<void(const InstNode&)> verify;

  // The method's name inside its group ("wait" for "mbarrier.wait").
  std::string method() const { return group.empty() ? name : name.substr(group.size() + 1); }
  const AttrDef* attr(std::string_view n) const;
};

// Every definition, in family order.
const std::vector<const InstDef*>& inst_defs();
// The definition of a name (nullptr: none).
const InstDef* find_inst_def(std::string_view name);

// The value of an integer attribute of an instruction as visit_fields shows it (nullopt: absent).
std::optional<int64_t> int_attr(const InstNode& inst, std::string_view name);
// The shared operand an instruction arrives on or waits on (its first shared operand).
Tensor sync_barrier(const InstNode& inst);

// The checks every instruction gets from its definition: attribute values among the allowed
// ones; for a DefinedInst, its operands' dtypes and element counts and its scalars' types.
void verify_definition_rules(const InstNode& inst);

// A definition-driven instruction: operands, scalars and attributes in its definition's order.
struct DefinedInst : InstNode {
  static constexpr InstKind static_kind = InstKind::Defined;
  const InstDef* definition = nullptr;
  std::vector<Tensor> tensors;     // definition->operands
  std::vector<Expr> scalars;       // definition->scalars (undefined: an optional one left out)
  std::vector<std::string> attrs;  // definition->attrs, as text

  InstKind kind() const override { return InstKind::Defined; }
  const char* name() const override { return definition->name.c_str(); }
  std::shared_ptr<InstNode> clone() const override { return std::make_shared<DefinedInst>(*this); }
  using InstNode::visit_fields;
  void visit_fields(FieldVisitor& v) override;
  bool has_side_effects() const override { return definition->side_effects; }

  const Tensor& tensor(std::string_view name) const;
  const Expr& scalar(std::string_view name) const;
  const std::string& attr(std::string_view name) const;
};

// A DefinedInst of the named definition from named arguments (the one tracer entry of every
// definition-driven instruction). Missing attributes take their defaults; an unknown or
// missing name is a CompileError naming the instruction.
std::shared_ptr<DefinedInst> make_defined(std::string_view name, const std::vector<std::pair<std::string, Tensor>>& tensors,
                                          const std::vector<std::pair<std::string, Expr>>& scalars,
                                          const std::vector<std::pair<std::string, std::string>>& attrs, SourceLoc loc);

// The families of definitions (one function per src/ir/insts/<family>.cpp).
namespace insts {
void add_tensor(std::vector<InstDef>& defs);
void add_memory(std::vector<InstDef>& defs);
void add_compute(std::vector<InstDef>& defs);
void add_mbarrier(std::vector<InstDef>& defs);
void add_tma(std::vector<InstDef>& defs);
void add_fence(std::vector<InstDef>& defs);
void add_wgmma(std::vector<InstDef>& defs);
void add_tcgen05(std::vector<InstDef>& defs);
void add_clc(std::vector<InstDef>& defs);
void add_thread(std::vector<InstDef>& defs);
void add_debug(std::vector<InstDef>& defs);
}  // namespace insts

}  // namespace tilus
