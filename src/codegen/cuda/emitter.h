// The CUDA emitter's shared state; private to src/codegen/cuda. One file per instruction
// family implements the emit_* methods: emitter.cpp (kernel, statements, expressions),
// memory.cpp (global and shared memory, cp.async, copy), compute.cpp (register tensors:
// allocation, elementwise, casts, views, reshapes), dot.cpp, reduce.cpp.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tilus/codegen/cuda.h"
#include "tilus/ir/inst.h"
#include "tilus/ir/inst_def.h"
#include "tilus/ir/simplify.h"
#include "tilus/ir/stmt.h"
#include "tilus/ir/facts.h"
#include "tilus/ir/target.h"

namespace tilus::cuda {

// The C++ type the emitted code uses for a dtype.
std::string ctype(DataType t);
int64_t elem_bytes(DataType t);
// fp8 and the sub-byte floats (tilus::lowfloat in the device library).
bool is_low_float(DataType t);
// `text` for a C string literal (quotes, backslashes and line breaks escaped); for a printf
// format that prints it as is, `literal_percent` doubles '%'.
std::string c_text(const std::string& text, bool literal_percent = false);

using tilus::SharedView;

// The threads running the current scope: the block, or a thread group.
struct ThreadScope {
  Var thread;          // the thread index within the group (threadIdx.x at top level)
  int64_t begin = 0;   // first thread of the group in the block
  int64_t threads = 0;
};

class Emitter {
 public:
  Emitter(const Kernel& kernel, const Target& target, const CudaOptions& options);
  KernelSource run();

  // --- text ----------------------------------------------------------------------------
  void line(const std::string& text);
  template <class... Args>
  void linef(fmt::format_string<Args...> f, Args&&... args) {
    line(fmt::format(f, std::forward<Args>(args)...));
  }
  void open(const std::string& head);  // "head {" and indent
  void close();                        // "}" and dedent
  void reopen(const std::string& head);  // "} head {": the block closed, the next one opened
  std::string fresh(const std::string& hint);
  // A scalar the emitted code declared itself (a scatter's per-element index): `v` prints as `name`.
  void name_var(const Var& v, const std::string& name) { var_names_[v.get()] = name; }

  // --- expressions ---------------------------------------------------------------------
  std::string expr(const Expr& e);
  Expr simplify(const Expr& e) const { return facts_.simplify(e); }
  // A C literal of value v in dtype t.
  std::string literal(DataType t, double v);

  // --- tensors -------------------------------------------------------------------------
  const std::string& reg(const Tensor& t);         // the register array of a tensor
  std::string declare_reg(const Tensor& t);        // declares the array; returns its name
  std::string reg_elem(const Tensor& t, int64_t slot);  // slot's value (packed arrays: .get)
  std::string reg_elem(const Tensor& t, const std::string& slot);  // the same at a C expression
  // Emits `stmt(slot)` for the slots 0 .. n-1 in order, where the statement's text depends on
  // the slot only through `slot` (a C expression). More than one slot become one
  // `#pragma unroll` loop over `tilus_s`: NVRTC unrolls it into the same code as the n
  // statements, but parses and optimizes one (a 128-slot copy was 128 lines).
  void slot_loop(int64_t n, const std::function<std::string(const std::string& slot)>& stmt);
  // A slot map (slot s reads slot m[s]) as a C expression of `slot`, where it is affine
  // (identity, a constant, a stride and offset); nullopt otherwise.
  static std::optional<std::string> affine_slots(const std::vector<int64_t>& m, const std::string& slot);
  // dst[s] = src[m[s]] (dst declared; src a register array's C name): one memcpy where m is the
  // identity of 8-bit float slots, else copy_slots.
  void copy_register(const Tensor& dst, const std::vector<int64_t>& m, const std::string& src);
  // dst[s] = value(m[s]) for every slot s of register tensor `dst` (declared), where `value`
  // prints the read of a source slot given as a C expression: a slot_loop where m is affine.
  void copy_slots(const Tensor& dst, const std::vector<int64_t>& m,
                  const std::function<std::string(const std::string& from)>& value);
  // The C name of a global_view's typed base pointer.
  const std::string& global_ptr(const Tensor& t) const;
  const KernelFacts& facts() const { return facts_; }
  const ThreadScope& scope() const { return scopes_.back(); }
  // The thread-dependent part of a layout's index per dim (slot 0), simplified.
  std::vector<Expr> spatial_index(const RegisterLayout& l);
  // The slot-dependent part of a layout's index per dim (thread 0).
  static std::vector<int64_t> local_index(const RegisterLayout& l, int64_t slot);
  // True for the threads that hold the first replica of every element (stores use it so
  // that replicated tensors are written once).
  Expr primary_replica(const RegisterLayout& l);
  // For a register tensor `src` whose layout relates to `dst_layout` by `index_map` (a map
  // from dst index to src index), the src slot of every dst slot, checked for all threads;
  // empty when some slot's data lives in another thread.
  std::vector<int64_t> slot_map(const RegisterLayout& dst, const RegisterLayout& src,
                                const std::function<std::vector<int64_t>(const std::vector<int64_t>&)>& index_map);
  // Extra shared memory after the planned tensors (reduction workspaces), aligned to 128.
  int64_t workspace(int64_t bytes);
  std::string workspace_ptr(DataType t);

  [[noreturn]] void fail(const InstNode& inst, const std::string& message) const;

  const Kernel& kernel;
  const Target& target;
  const CudaOptions options;

 private:
  void emit_stmt(const Stmt& s);
  void emit_inst(const InstNode& inst);
  // Instruction families.
  void emit_memory(const InstNode& inst);
  void emit_compute(const InstNode& inst);
  void emit_dot(const InstNode& inst);
  void emit_reduce(const InstNode& inst);
  void emit_barrier(const InstNode& inst);
  void emit_printf(const InstNode& inst);
  void emit_async_proxy(const InstNode& inst);
  void emit_tma_copy(const CopyInst& inst);
  void emit_tma_im2col(const Im2colInst& inst);
  // wgmma.cpp: wgmma.fence / mma / commit_group / wait_group.
  void emit_wgmma(const InstNode& inst);
  // tcgen05.cpp: tensor memory and the tcgen05 instructions.
  void emit_tcgen05(const InstNode& inst);
  void emit_tcgen05_ldst(const InstNode& inst, const Tensor& tmem, const Tensor& regs, bool load);
  void emit_tcgen05_mma(const DefinedInst& inst);
  // The 32-bit tensor-memory address of a tensor-memory tensor (its allocation's plus its offsets).
  std::string tmem_address(const InstNode& inst, const Tensor& t);
  // The wgmma accumulators emitted so far that are visible here (C name as 32-bit registers,
  // register count), which a wait_group fences.
  std::vector<std::pair<std::string, int64_t>> wgmma_accumulators();
  // The pins (wgmma_fence_operand lines) of those of the tensors that are in scope here.
  void pin_wgmma_registers(const std::vector<const TensorNode*>& tensors);
  // Whether a register tensor's array is declared in a block still open here.
  bool visible(const TensorNode* t) const;
  // The 32-bit shared address of a one-element mbarrier view.
  std::string barrier_address(const InstNode& inst, const Tensor& barrier);
  // The condition that picks the first thread of the current thread group.
  std::string elected();
  // TILUS_DEBUG_BOUNDS' check of a shared tile at a run-time offset (memory.cpp).
  void guard_shared_tile(const InstNode& inst, const SharedView& view, const std::vector<int64_t>& shape);
  // builtins.cpp: the thread-level builtins (named barriers, __syncwarp, cluster and grid
  // barriers, setmaxnreg, per-thread indices, shuffles, ldg / stg).
  void emit_builtin(const InstNode& inst);
  // The lanes of the current thread group in its warp (all 32 for a group of whole warps).
  uint32_t group_lanes() const;

  std::string out_;
  int indent_ = 0;
  std::unordered_set<std::string> names_;
  std::unordered_map<const void*, std::string> var_names_;
  std::unordered_map<const TensorNode*, std::string> regs_;
  std::unordered_map<const TensorNode*, std::string> global_ptrs_;
  std::vector<ThreadScope> scopes_;
  KernelFacts facts_;
  int64_t workspace_bytes_ = 0;
  int barrier_ids_ = 1;  // named barrier ids for thread groups (0 is __syncthreads)
  std::unordered_map<int64_t, int> group_barriers_;
  std::unordered_set<int64_t> user_barriers_;  // ids the kernel names itself (sync_threads, named_barrier_arrive)
  // The block indices the kernel reads (blockIdx, the cluster's), each once at its start:
  // variable -> initializer.
  std::map<std::string, std::string> block_reads_;
  const std::string& block_read(const std::string& name, const std::string& init);
  bool has_wgmma_ = false;                      // a wgmma.mma anywhere: no printf of the emitter's own
  bool cooperative_ = false;                   // sync_grid: a cooperative launch
  std::vector<int> blocks_;                     // the open C blocks, innermost last (ids)
  int next_block_ = 1;
  std::unordered_map<const TensorNode*, int> reg_blocks_;  // the block a register array is declared in
  std::vector<std::pair<const TensorNode*, int64_t>> wgmma_accs_;  // wgmma.mma accumulators (32-bit registers)
  std::unordered_map<const TensorNode*, std::string> tmem_roots_;  // tcgen05.alloc tensor -> its address variable
  std::vector<std::pair<const TensorNode*, int64_t>> tcgen05_loads_;  // tcgen05.ld results not yet waited for
  std::vector<const TensorNode*> wgmma_ds_;  // every wgmma.mma's accumulator, in program order (fences pin them)

  friend struct MemoryEmitter;
};

// Declares the L2 cache policy variable of an eviction policy and returns its name ("" for none or
// evict_normal): the hint of cp.async, vectorized global accesses and TMA copies.
// The L2 cache policy of an eviction hint, or the raw 64-bit policy `raw` where defined.
std::string declare_policy(Emitter& em, std::optional<EvictPolicy> e, const Expr& raw = Expr());

}  // namespace tilus::cuda
