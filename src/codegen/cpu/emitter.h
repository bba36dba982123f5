// The CPU emitter's shared state; private to src/codegen/cpu. emitter.cpp: the kernel,
// statements, scalar expressions and conversions; memory.cpp: global and shared memory,
// cp.async and copy; compute.cpp: register tensors (allocation, elementwise, casts, views,
// reshapes, dot, reductions); builtins.cpp: the thread-level builtins of seed 004.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "tilus/codegen/llvm_emitter.h"
#include "tilus/ir/inst.h"
#include "tilus/ir/inst_def.h"
#include "tilus/ir/stmt.h"
#include "tilus/ir/facts.h"

namespace tilus::cpu {

// fp8 and the sub-byte floats: stored by their bits, computed through float32.
bool is_low_float(DataType t);
// The (bits, exponent, mantissa, style) of a low float, packed for the runtime's helpers.
int32_t low_float_format(DataType t);

// A global tensor: its base address (i8*) and the parameter it was viewed from (checked mode).
struct GlobalRec {
  llvm::Value* base = nullptr;
  int param = -1;
  llvm::Value* param_base = nullptr;  // i8* of that parameter
  std::string type_str;
};

// One side of a tile access, as in the CUDA emitter: the element offset of a tile index,
// the address of an offset, and the in-bounds predicate (true when unchecked).
struct Side {
  DataType dtype;
  std::function<Expr(const std::vector<Expr>&)> offset;
  std::function<Expr(const std::vector<Expr>&)> predicate;
  llvm::Value* base = nullptr;  // i8*
  const GlobalRec* global = nullptr;
  GlobalAccess access;          // global sides: the tile's access (checked mode)
  std::optional<SharedView> shared;  // shared sides: the view (checked mode)
};

// Splitting: the tile instructions in a statement (loops counted once), and whether it holds
// a break or continue of a loop outside it (such a statement stays in the function of its
// loop). Memoized per statement node.
struct StmtInfo {
  int64_t instructions = 0;
  bool escapes = false;
  bool returns = false;  // it contains a return (which must be emitted in the block function)
};
const StmtInfo& measure(const Stmt& s, std::unordered_map<const StmtNode*, StmtInfo>& memo);

class Emitter {
 public:
  Emitter(const Kernel& kernel, llvm::LLVMContext& context, llvm::Module& module, const CpuCodegenOptions& options);
  void run(const std::string& entry);
  std::vector<CpuAccessSite> sites;
  // Whether the kernel runs thread groups concurrently (CpuBlockContext::fork).
  bool uses_fork() const { return forks_; }

  // --- types and values ------------------------------------------------------------------
  // The LLVM type of a value of t in registers (bool: i1, float16: half, bfloat16: i16).
  llvm::Type* type(DataType t);
  // The LLVM type of an element of t in memory (bool: i8).
  llvm::Type* memory_type(DataType t);
  llvm::Value* expr(const Expr& e);
  // Conversions between a register value of `from` and one of `to`, as tilus::cvt.
  llvm::Value* convert(llvm::Value* v, DataType from, DataType to);
  // 16-bit floats to and from the float32 they compute in (identity for other types).
  llvm::Value* widen(llvm::Value* v, DataType t);
  llvm::Value* narrow(llvm::Value* v, DataType t);
  // fp8 and sub-byte floats (is_low_float): code <-> value through the runtime's helpers.
  llvm::Value* low_float_decode(llvm::Value* code, DataType t);
  llvm::Value* low_float_encode(llvm::Value* v, DataType t);
  llvm::Value* constant(DataType t, double v);
  llvm::Value* i32(int64_t v) { return b.getInt32(int32_t(v)); }
  llvm::Value* i64(int64_t v) { return b.getInt64(v); }

  // --- memory ------------------------------------------------------------------------------
  llvm::Value* load_memory(llvm::Value* base, llvm::Value* elem_offset, DataType t);
  void store_memory(llvm::Value* base, llvm::Value* elem_offset, DataType t, llvm::Value* v);

  // --- values across functions ----------------------------------------------------------------
  // A large kernel is emitted as a chain of functions (CpuCodegenOptions::chunk_instructions):
  // values made in one function and used in another pass through the block's frame, a buffer
  // of 8-byte slots. `here(v)` is v as the function being emitted can use it (v itself when
  // that function made it).
  llvm::Value* here(llvm::Value* v);
  // A global tensor's record with its addresses usable in the function being emitted.
  const GlobalRec& global(const Tensor& g);
  // Returns from the function being emitted when the launch was interrupted
  // (CpuBlockContext::cancel): at loop back-edges and after each call of a part.
  void check_cancel();

  // --- register tensors ----------------------------------------------------------------------
  llvm::Value* reg(const Tensor& t);            // the array (pointer to its first element)
  llvm::Value* declare_reg(const Tensor& t);
  llvm::Value* reg_ptr(const Tensor& t, llvm::Value* linear);
  llvm::Value* load_reg(const Tensor& t, llvm::Value* linear);
  void store_reg(const Tensor& t, llvm::Value* linear, llvm::Value* v);
  // Row-major linear index of a tile index (i32 values) in `shape`.
  llvm::Value* linear(const std::vector<llvm::Value*>& idx, const std::vector<int64_t>& shape);

  // --- loops ---------------------------------------------------------------------------------
  // for (i = 0; i < n; ++i) body(i), i an i32 value.
  void loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body);
  // Nested loops over every index of `shape` (row-major order).
  void tile_loop(const std::vector<int64_t>& shape, const std::function<void(const std::vector<llvm::Value*>&)>& body);
  // Binds fresh index variables to values for evaluating IR expressions of a tile index.
  std::vector<Expr> bind_index(const std::vector<llvm::Value*>& idx);
  void unbind(const std::vector<Expr>& vars);
  // if (cond) then() [else otherwise()]
  void if_then(llvm::Value* cond, const std::function<void()>& then, const std::function<void()>& otherwise = nullptr);

  // --- instruction families ------------------------------------------------------------------
  void emit_memory(const InstNode& inst);
  void emit_async_proxy(const InstNode& inst);
  // A call of the runtime's mbarrier operation on the barrier at `barrier` (i8*).
  void mbarrier_op(int32_t op, llvm::Value* barrier, llvm::Value* value, int32_t site = -1);
  llvm::Value* barrier_ptr(const InstNode& inst, const Tensor& barrier);
  // The threads of the thread group an instruction runs in.
  int64_t group_threads(const InstNode& inst);
  std::unordered_map<const InstNode*, int64_t> group_threads_;
  void emit_compute(const InstNode& inst);
  // out += a @ b over whole register tiles (dot, wgmma.mma).
  void matmul_accumulate(const Tensor& a, const Tensor& b, const Tensor& out);
  // Register tiles the emitter makes itself (wgmma's operand copies), kept alive so that their
  // storage keys stay unique.
  std::vector<Tensor> scratch_tensors_;
  // builtins.cpp: the thread-level builtins (seed 004) in tile terms.
  void emit_builtin(const InstNode& inst);
  // A call of the runtime's CpuBlockContext::service (CpuServiceOp), returning its i64.
  llvm::Value* service(int32_t op, llvm::Value* a, llvm::Value* b, llvm::Value* p = nullptr);
  // The shared memory (i8*) of block `rank` of the cluster (this block's: shared_base).
  llvm::Value* peer_shared(llvm::Value* rank);
  // The address of `ptr` (in this block's shared memory) in block `rank`'s.
  llvm::Value* peer_address(llvm::Value* ptr, llvm::Value* rank);
  // tcgen05.cpp: tensor memory and the tcgen05 instructions.
  void emit_tcgen05(const InstNode& inst);
  // The i8* of element `tile` (one expression per dim) of a tensor-memory tensor, in the tensor
  // memory `tmem` (i8*; this block's when null).
  llvm::Value* tmem_element(const InstNode& inst, const Tensor& t, const std::vector<Expr>& tile,
                            llvm::Value* tmem = nullptr);
  // Moves a rank-2 tensor-memory tile to (load) / from a register tensor of its shape (its columns
  // from col0 on).
  void tmem_registers(const InstNode& inst, const Tensor& tmem_tile, const Tensor& regs, bool load,
                      llvm::Value* tmem = nullptr, int64_t col0 = 0);
  void emit_tcgen05_mma(const DefinedInst& inst);
  // The first thread (in the block) of the thread group being emitted.
  int64_t group_begin() const { return group_begins_.empty() ? 0 : group_begins_.back(); }
  // A constant i32 table as a private global (for per-thread maps of layouts).
  std::pair<llvm::ArrayType*, llvm::GlobalVariable*> table(const std::vector<int32_t>& values, const char* name);
  Side global_side(const Tensor& g, const GlobalAccess& access);
  Side shared_side(const SharedView& view);
  Side region_side(const InstNode& inst, const CopyRegion& r, int tile_rank);
  // Moves register tensor r to (load=false) / from (load=true) memory side `mem`.
  // A load fills the elements outside `mem` with `fill` (load_global's other=; undefined: zero).
  void register_access(const InstNode& inst, bool load, const Tensor& r, const Side& mem, const Expr& fill = Expr());
  // body(tile index, linear register index, in-bounds and checked) for every element of a tile
  // of `shape` that a register tensor moves to or from `mem`.
  // `prepare(lin)` (optional) runs for each element before its predicate is evaluated (a scatter
  // binds the element's index there).
  void each_element(const InstNode& inst, const Side& mem, const std::vector<int64_t>& shape,
                    const std::function<void(const std::vector<Expr>&, llvm::Value*, llvm::Value*)>& body,
                    const std::function<void(llvm::Value*)>& prepare = nullptr);
  // One element of an atomic: a compare-exchange loop on the element's bits at `base`[`offset`]
  // (blocks run on several host threads); returns the old value.
  llvm::Value* atomic_element(const AtomicInst& i, llvm::Value* base, llvm::Value* offset, llvm::Value* v,
                              llvm::Value* compare);
  // Memory to memory over a tile of `shape`.
  void transfer(const InstNode& inst, const Side& src, const Side& dst, const std::vector<int64_t>& shape);
  // Checked mode: the condition under which an access at tile index `tile` (bound vars) is
  // legal; where `pred` (the access's bounds predicate) holds and the access is not legal, it
  // reports the failure. Returns nullptr when unchecked.
  llvm::Value* check_access(const InstNode& inst, const Side& side, const std::vector<Expr>& tile, llvm::Value* pred);
  // Checked mode: runs `access` only when the shared sides' tiles of `shape` stay inside their
  // allocations (KernelFacts::shared_bounds), and reports the first that does not.
  void guard_shared(const InstNode& inst, std::initializer_list<const Side*> sides, const std::vector<int64_t>& shape,
                    const std::function<void()>& access);
  // Runs `copy` (a TMA box) only when its first element is 16-byte aligned, and reports it
  // otherwise (KernelFacts::tma_start); in every mode: the GPU faults on such a box.
  void guard_tma_start(const CopyInst& i, const std::function<void()>& copy);
  // Calls the runtime's report (CpuBlockContext::report) for `site`.
  void report(int32_t site, llvm::Value* dim, const std::vector<llvm::Value*>& index, llvm::Value* byte_offset);

  [[noreturn]] void fail(const InstNode& inst, const std::string& message) const;

  const Kernel& kernel;
  llvm::LLVMContext& ctx;
  llvm::Module& module;
  llvm::IRBuilder<> b;
  CpuCodegenOptions options;
  llvm::Function* fn = nullptr;
  llvm::Value* shared_base = nullptr;  // i8*
  llvm::Value* block_ctx = nullptr;    // CpuBlockContext*
  KernelFacts facts;
  std::unordered_map<const TensorNode*, GlobalRec> globals;

 private:
  void emit_stmt(const Stmt& s);
  void emit_inst(const InstNode& inst);
  void emit_inst_body(const InstNode& inst);
  void emit_printf(const PrintfInst& inst);
  llvm::Value* binary(const BinaryNode& n);
  llvm::Value* call(const CallNode& n);
  // An array of n elements in the entry block of the function being emitted.
  llvm::Value* alloca_in_entry(llvm::Type* t, int64_t n, const std::string& name);
  // Storage that lives as long as the block (register tensors, declared scalars), found by
  // its IR node: an alloca of the kernel's function, or, in a split kernel, a region of the
  // frame that every part reaches through its frame argument. The second form finds it
  // (nullptr: none yet).
  llvm::Value* block_storage(const void* key, llvm::Type* t, int64_t n, const std::string& name);
  llvm::Value* block_storage(const void* key, llvm::Type* t);
  void emit_seq(const SeqStmtNode& seq);
  // Emits `stmts` as a function of their own and calls it.
  void emit_part(const std::vector<Stmt>& stmts);
  // Emits `stmts` as a function of their own (the block function's arguments and the frame).
  llvm::Function* build_part(const std::vector<Stmt>& stmts);
  // Sibling thread groups that wait on each other's work (an mbarrier wait in one of them): run
  // concurrently through the runtime's fork, each group a function of its own.
  static bool concurrent(const std::vector<Stmt>& groups);
  void emit_fork(const std::vector<Stmt>& groups);
  // Consecutive statements of a sequence, emitted as the chunking of a large kernel says.
  void emit_stmts(const std::vector<Stmt>& stmts);
  bool forks_ = false;  // the kernel forks (set by run() before emitting)
  llvm::GlobalVariable* frame_size_ = nullptr;  // the frame's bytes, for fork (set at the end)
  int64_t frame_slot(llvm::Instruction* v);  // its byte offset in the frame, stored where v is made
  llvm::Value* frame_of(const llvm::Function* f);
  llvm::Value* frame_at(int64_t offset, llvm::Type* t);  // a t* into the frame, in the current function
  // Ends a function: its entry block branches to `start`, blocks left open are unreachable.
  void finish_function(llvm::BasicBlock* start);
  llvm::Function* intrinsic(llvm::Intrinsic::ID id, llvm::ArrayRef<llvm::Type*> types);

  std::unordered_map<const VarNode*, llvm::Value*> values_;    // immutable scalars
  struct BlockStorage {
    llvm::Value* alloca = nullptr;
    int64_t offset = -1;  // in the frame, when split
  };
  std::unordered_map<const void*, BlockStorage> block_storage_;
  struct LoopTargets {
    llvm::BasicBlock* brk;
    llvm::BasicBlock* cont;
  };
  std::vector<LoopTargets> loops_;
  llvm::BasicBlock* entry_ = nullptr;
  uint64_t binder_ids_ = 0;
  // Splitting state: the kernel's function, the frame (a byte array of the kernel's function,
  // sized at the end), the order in which functions were begun, each forwarded value's slot,
  // the loads of forwarded values and the frame pointers made at function entries.
  llvm::Function* root_ = nullptr;
  llvm::AllocaInst* frame_ = nullptr;
  int64_t frame_bytes_ = 0;
  std::unordered_map<const llvm::Function*, int> order_;
  std::unordered_map<const llvm::Value*, int64_t> slots_;
  std::map<std::pair<const llvm::Function*, const llvm::Value*>, llvm::Value*> entry_loads_;
  std::map<std::tuple<const llvm::Function*, int64_t, llvm::Type*>, llvm::Value*> frame_pointers_;
  std::deque<GlobalRec> globals_here_;  // global(): stable addresses for Side::global
  std::unordered_map<const StmtNode*, StmtInfo> infos_;
  std::vector<int64_t> group_begins_;  // first thread of each enclosing thread group
};

}  // namespace tilus::cpu
