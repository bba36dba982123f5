// The tracer core: records instructions and statements into a kernel.
//
// Both faces of tilus drive this one class: the C++ Script methods (lang/script.h) and the
// Python bindings. Every method takes the user's source location explicitly; every recorded
// instruction is checked at once (ir/verifier.h), so a mistake is reported at the line
// that made it.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tilus/ir/error.h"
#include "tilus/ir/inst.h"
#include "tilus/ir/program.h"
#include "tilus/ir/stmt.h"

namespace tilus {

struct CopyArgs {
  std::optional<int64_t> coalesced_width;
  bool disable_tma = false;
  std::optional<std::string> eviction_policy;
  std::map<std::string, std::string> annotations;
  RegisterLayout loop_layout;
  CopyApi api = CopyApi::Copy;
  Tensor barrier;  // tma_copy: the mbarrier of its transaction
};

class Builder {
 public:
  explicit Builder(std::string kernel_name, SourceLoc loc = {});

  // --- kernel signature and attributes --------------------------------------------------
  Var add_param(const std::string& name, DataType dtype, SourceLoc loc = {});
  void add_constant(const std::string& name, const std::string& printed_value);
  void set_blocks(std::vector<Expr> blocks, SourceLoc loc);
  void set_warps(int64_t warps, SourceLoc loc);
  // Thread-block cluster shape, 1 to 3 dimensions (missing ones are 1).
  void set_cluster(const std::vector<int64_t>& cluster_blocks, SourceLoc loc);
  void set_min_blocks(int64_t min_blocks, SourceLoc loc);
  // min_blocks blocks of the kernel's warps fit on an SM (kMaxWarpsPerSm).
  void check_min_blocks(SourceLoc loc) const;
  // The finished kernel (checks that blocks and warps were set).
  Program finish();

  // --- control flow -------------------------------------------------------------------
  // `pipeline`: the Script's num_stages / warp_specialize / persistent request (checked here).
  Var begin_for(const std::string& var_name, Expr begin, Expr end, Expr step, Unroll unroll, SourceLoc loc,
                LoopPipeline pipeline = {});
  void end_for();
  void begin_if(Expr cond, SourceLoc loc);
  void end_if();
  // Attaches an else branch to the last if statement of the current scope (the innermost
  // if of an else-if chain). Call after end_if().
  void begin_else(SourceLoc loc);
  void end_else();
  void begin_while(Expr cond, SourceLoc loc);
  void end_while();
  void emit_break(SourceLoc loc, const char* what = "break");
  void emit_continue(SourceLoc loc);
  // The threads that run it leave the kernel.
  void emit_return(SourceLoc loc);
  void begin_thread_group(ThreadGroupKind kind, int64_t thread_begin, int64_t num_threads, SourceLoc loc);
  void end_thread_group();
  Var let(const std::string& name, Expr value, SourceLoc loc);
  Var declare(const std::string& name, DataType dtype, Expr init, SourceLoc loc);
  void assign(const Var& var, Expr value, SourceLoc loc);
  // A mutable variable, or an uninitialized register tensor, recorded just before the
  // innermost open scope: the merge of a value bound in both branches of an if (each branch
  // assigns it), usable after the if.
  Var declare_outside(const std::string& name, DataType dtype, Expr init, SourceLoc loc);
  Tensor register_tensor_outside(DataType dtype, std::vector<int64_t> shape, SourceLoc loc, const std::string& name);
  // Names a tensor recorded by this builder after the variable it is bound to (the printer's
  // and the emitters' hint).
  void name(const Tensor& t, const std::string& name);
  // Depth of open scopes (0 at the kernel body's top level).
  int depth() const { return static_cast<int>(scopes_.size()) - 1; }
  // The open scopes, outermost first, each by a number no other scope of this trace has: a
  // variable declared in scope path P is visible where P is a prefix of the current path.
  std::vector<int64_t> scope_path() const {
    std::vector<int64_t> p;
    for (auto& s : scopes_) p.push_back(s.serial);
    return p;
  }
  // Where the most recent instruction was recorded (for statements that have no call
  // site of their own, such as an assignment to a C++ tensor handle).
  const SourceLoc& last_loc() const { return last_loc_; }

  // --- instructions -------------------------------------------------------------------
  Tensor global_view(Expr ptr, DataType dtype, std::vector<Expr> shape, std::vector<Expr> strides, SourceLoc loc,
                     const std::string& name = "g");
  // global_tensor: global memory the runtime provides at every launch (Kernel::global_tensors),
  // viewed as a row-major tensor; its shape may use only the parameters (and lets over them).
  Tensor global_tensor(DataType dtype, std::vector<Expr> shape, bool requires_clean, SourceLoc loc,
                       const std::string& name = "g");
  // The address of element `indices` of a global tensor of this kernel (Tilus's
  // g[i, j].item_ptr()): a typed pointer expression.
  Expr item_ptr(const Tensor& t, std::vector<Expr> indices, SourceLoc loc);
  // lock_semaphore / release_semaphore (SemaphoreInst).
  void semaphore(SemaphoreOp op, Expr semaphore, Expr value, SourceLoc loc);
  Tensor shared_tensor(DataType dtype, std::vector<int64_t> shape, SourceLoc loc, const std::string& name = "s");
  void free_shared(const Tensor& t, SourceLoc loc);
  // init: undefined (uninitialized), a scalar, or a function of the index variables.
  Tensor register_tensor(DataType dtype, std::vector<int64_t> shape, Expr init, SourceLoc loc,
                         const std::string& name = "r");
  Tensor register_tensor(DataType dtype, std::vector<int64_t> shape,
                         const std::function<Expr(const std::vector<Var>&)>& init, SourceLoc loc,
                         const std::string& name = "r");
  // src[offsets...] with the leading len(offsets) dims fixed (Python's sa[i]): a view.
  Tensor slice_shared(const Tensor& src, std::vector<Expr> offsets, std::vector<int> dims, std::vector<int64_t> shape,
                      SourceLoc loc);
  Tensor index_shared(const Tensor& src, std::vector<Expr> indices, SourceLoc loc);
  // The bytes of a shared_tensor allocation (or of a reshape of one) under another shape with
  // as many elements, both row-major (NVIDIA Tilus's reshape_shared): a view.
  Tensor reshape_shared(const Tensor& src, std::vector<int64_t> shape, SourceLoc loc);
  // `other`: the value of the elements outside src (undefined: zero), taken in src's dtype.
  Tensor load_global(const Tensor& src, std::vector<Expr> offsets, std::vector<int64_t> shape, std::vector<int> dims,
                     SourceLoc loc, Expr other = Expr());
  // x.item(): the one element of a register tensor as a scalar (every thread of the group holds it).
  Var item(const Tensor& x, SourceLoc loc);
  // atomic.{global,shared}_<op>: returns the old values (docs/instructions.md). Global dst: the
  // tile at `offsets` (none: all zero) through `dims` (default: the trailing dims); shared dst:
  // the whole tensor.
  Tensor atomic(AtomicOp op, const Tensor& dst, const Tensor& values, const Tensor& compare, std::vector<Expr> offsets,
                std::vector<int> dims, const std::string& sem, const std::string& scope, SourceLoc loc);
  // atomic.{global,shared}_scatter_<op> and, with `store`, store_{global,shared}_scatter (op
  // exch, nothing returned): element k of values to dst at k's coordinates with dim `dim` taken
  // from indices[k] (AtomicInst::scatter_dim).
  Tensor atomic_scatter(AtomicOp op, bool store, const Tensor& dst, int dim, const Tensor& indices,
                        const Tensor& values, const std::string& sem, const std::string& scope, SourceLoc loc);
  void store_global(const Tensor& dst, const Tensor& src, std::vector<Expr> offsets, std::vector<int> dims,
                    SourceLoc loc);
  Tensor load_shared(const Tensor& src, SourceLoc loc);
  void store_shared(const Tensor& dst, const Tensor& src, SourceLoc loc);
  void copy_async(const Tensor& src, const Tensor& dst, std::vector<Expr> offsets, std::vector<int> dims,
                  const std::optional<std::string>& evict, bool check_bounds, SourceLoc loc);
  void copy_async_commit_group(SourceLoc loc);
  void copy_async_wait_group(int64_t n, SourceLoc loc);
  void copy_async_wait_all(SourceLoc loc);
  void copy(CopyRegion src, CopyRegion dst, const CopyArgs& args, SourceLoc loc);
  // Hopper data movement (mbarriers, TMA, proxy fences; docs/instructions.md).
  Tensor mbarrier_alloc(std::vector<Expr> counts, SourceLoc loc);
  void mbarrier(MbarrierOp op, const Tensor& barrier, Expr value, const std::string& sem, const std::string& scope,
                Expr cta_id, SourceLoc loc);
  // A definition-driven instruction (a DefinedInst, inst_def.h) from named arguments: the one
  // tracer entry of every instruction whose definition is data alone.
  void defined(const std::string& name, const std::vector<std::pair<std::string, Tensor>>& tensors,
               const std::vector<std::pair<std::string, Expr>>& scalars,
               const std::vector<std::pair<std::string, std::string>>& attrs, SourceLoc loc);
  // A wait whose phase is element 0 of a one-element register tensor.
  void mbarrier_wait(const Tensor& barrier, const Tensor& phase, const std::string& sem, const std::string& scope,
                     SourceLoc loc);
  // tma.global_to_shared (barrier defined) / tma.shared_to_global: the tile of the shared
  // tensor at `offsets` of the global one, along global dims `dims` (default: the trailing ones).
  // `multicast_mask` (loads; undefined: none): the cluster's blocks that receive the box.
  // `cta_group` 2 (loads, Blackwell): the bytes complete on the barrier at `barrier`'s offset in
  // block `barrier_rank` of the cluster (undefined: this block's), the pair's mbarrier.
  void tma_copy_tile(const Tensor& global, const Tensor& shared, std::vector<Expr> offsets, std::vector<int> dims,
                     const Tensor& barrier, bool load, SourceLoc loc, Expr multicast_mask = Expr(),
                     Expr cache_policy = Expr(), int64_t cta_group = 1, Expr barrier_rank = Expr());
  void c2d_im2col(const Tensor& img, const Tensor& col, Expr nhw_step, Expr c_step, int64_t kernel, int64_t stride,
                  int64_t dilation, int64_t pad, const std::optional<std::string>& eviction_policy, SourceLoc loc,
                  const Tensor& barrier = Tensor());
  void tma_commit_group(SourceLoc loc);
  void tma_wait_group(int64_t n, bool read, SourceLoc loc);
  void fence_proxy_async(const std::string& space, SourceLoc loc);
  // wgmma (sm_90a; docs/instructions.md): d += a @ b asynchronously over the warp group(s).
  void wgmma_fence(SourceLoc loc);
  void wgmma_mma(const Tensor& a, const Tensor& b, const Tensor& d, SourceLoc loc, bool enable_input_d = true);
  void wgmma_commit_group(SourceLoc loc);
  void wgmma_wait_group(int64_t n, SourceLoc loc);
  // A view of a shared tensor with its dims reordered: view dim k is src dim dims[k]
  // (transpose: {1, 0}).
  Tensor permute_shared(const Tensor& src, std::vector<int> dims, SourceLoc loc);
  Tensor dot(const Tensor& a, const Tensor& b, const Tensor& c, SourceLoc loc);
  // a @ b into a fresh zero accumulator "acc" of [a.shape[0], b.shape[1]] and `acc_dtype`
  // (default float32 for float inputs, int32 otherwise): dot's default for both front ends.
  Tensor dot(const Tensor& a, const Tensor& b, std::optional<DataType> acc_dtype, SourceLoc loc);
  Tensor cast(const Tensor& x, DataType dtype, SourceLoc loc);
  Tensor view(const Tensor& x, std::optional<DataType> dtype, const RegisterLayout& layout, SourceLoc loc);
  Tensor reshape(const Tensor& x, std::vector<int64_t> shape, SourceLoc loc);
  Tensor squeeze(const Tensor& x, std::vector<int> dims, SourceLoc loc);
  Tensor unsqueeze(const Tensor& x, std::vector<int> dims, SourceLoc loc);
  Tensor transpose(const Tensor& x, SourceLoc loc);
  Tensor repeat(const Tensor& x, std::vector<int64_t> repeats, SourceLoc loc);
  // Elementwise over broadcast tensor operands: body is built from one variable per tensor
  // operand. Scalar operands are captured by the body directly.
  Tensor elementwise(const std::string& op, const std::vector<Tensor>& inputs,
                     const std::function<Expr(const std::vector<Expr>&)>& body, SourceLoc loc);
  Tensor unary(const std::string& op, const Tensor& x, SourceLoc loc);     // abs, exp, ..., neg, not, bitnot, square
  // torch's gelu: approximate "none" (the erf form) or "tanh".
  Tensor gelu(const Tensor& x, const std::string& approximate, SourceLoc loc);
  // a (op) b where either side may be a scalar (an undefined Tensor plus a scalar Expr).
  Tensor binary(BinaryOp op, const Tensor& a, const Expr& a_scalar, const Tensor& b, const Expr& b_scalar,
                SourceLoc loc);
  Tensor where(const Tensor& cond, const Tensor& x, const Expr& x_scalar, const Tensor& y, const Expr& y_scalar,
               SourceLoc loc);
  Tensor clip(const Tensor& x, const Expr& lo, const Expr& hi, SourceLoc loc);
  Tensor reduce(ReduceOp op, const Tensor& x, std::optional<std::vector<int>> dims, bool keepdim, SourceLoc loc);
  // The prefix scan of x along `dim` with `op` ("add", "mul", "max", "min", "and", "or", "xor"),
  // inclusive or exclusive (NVIDIA Tilus's scan / cumsum / cumprod). A composition: log2(n)
  // Hillis-Steele steps through a shared buffer of twice the scanned extent whose first half
  // holds the identity, so each step reads its partner as a shifted slice; group barriers between.
  Tensor scan(const std::string& op, const Tensor& x, int dim, bool exclusive, SourceLoc loc);
  void assign_tensor(const Tensor& dst, const Tensor& src, SourceLoc loc);
  void sync(SourceLoc loc);
  // The thread-level builtins (seed 004; docs/instructions.md).
  void sync_threads(std::optional<int64_t> barrier_id, std::optional<int64_t> arrive_count, SourceLoc loc);
  void named_barrier_arrive(int64_t barrier_id, int64_t arrive_count, SourceLoc loc);
  void sync_warp(Expr mask, SourceLoc loc);
  void cluster_sync(SourceLoc loc);
  void sync_grid(SourceLoc loc);
  void set_max_nreg(int64_t reg_count, bool is_inc, SourceLoc loc);
  // get_lane_idx, get_warp_idx_sync, get_warp_idx, get_warp_group_idx, shuffle_elect.
  Tensor thread_index(const std::string& op, int64_t warp_size, int64_t warps_per_group, int64_t thread_extent,
                      SourceLoc loc);
  // shfl_xor, shfl_down, shfl_up, shfl_sync (`lane`: the offset or the source lane).
  Tensor shuffle(const std::string& op, const Tensor& value, Expr lane, Expr mask, int64_t width, SourceLoc loc);
  Tensor ldg(int64_t bits, CopyRegion src, Expr pred, SourceLoc loc);
  void stg(int64_t bits, CopyRegion dst, const Tensor& value, Expr pred, SourceLoc loc);
  // Threads of the innermost thread group (the block outside any): `what` names the caller
  // in the error when the block's warps are not set yet.
  int64_t group_threads(const char* what, const SourceLoc& loc) const;
  // The first thread (in the block) of the innermost thread group (0 outside any).
  int64_t group_begin() const;
  // The kernel's cluster shape as set so far ({1, 1, 1}: none).
  const std::array<int64_t, 3>& cluster() const { return kernel_.cluster; }
  void printf(std::string format, std::vector<Expr> args, SourceLoc loc);
  void assume(Expr cond, SourceLoc loc);
  void annotate_layout(const Tensor& t, const RegisterLayout& layout, SourceLoc loc);
  void annotate_shared_layout(const Tensor& t, const SharedLayout& layout, SourceLoc loc);

  // Blackwell (docs/instructions.md): tensor memory and tcgen05 (the instructions that define a
  // tensor; the others are definition-driven: defined()), cluster launch control.
  Tensor tcgen05_alloc(DataType dtype, std::vector<int64_t> shape, int64_t cta_group, SourceLoc loc);
  // The view of `t` at `offsets` (one per dim of t) with dims `dims` of extents `shape`.
  Tensor tcgen05_slice(const Tensor& t, std::vector<Expr> offsets, std::vector<int> dims, std::vector<int64_t> shape,
                       SourceLoc loc);
  // t[i, ...]: the view with the dims that the indices (after the lane dim, which an index
  // leaves whole) fix removed; Python's t_acc[:, stage, :].
  Tensor tcgen05_index(const Tensor& t, std::vector<std::optional<Expr>> indices, SourceLoc loc);
  Tensor tcgen05_view(const Tensor& t, DataType dtype, std::vector<int64_t> shape, SourceLoc loc);
  Tensor tcgen05_load(const Tensor& t, SourceLoc loc);
  // clc.query_response: (is_canceled, x, y, z).
  std::array<Var, 4> clc_query_response(const Tensor& response, SourceLoc loc);

  // Records an already-built instruction (checked like the others).
  void emit(std::shared_ptr<InstNode> inst);

 private:
  struct Scope {
    std::vector<Stmt> stmts;
    // What closes the scope.
    enum Kind { Body, For, If, Else, While, ThreadGroup } kind = Body;
    SourceLoc loc;
    Var loop_var;
    Expr a, b, c;   // for: begin/end/step; if/while: cond
    Unroll unroll;
    LoopPipeline pipeline;
    ThreadGroupKind group_kind = ThreadGroupKind::ThreadGroup;
    int64_t thread_begin = 0, num_threads = 0;
    Stmt pending_if;  // else: the if statement the else branch attaches to
    int64_t serial = 0;  // see scope_path()
  };

  void push(Scope s);
  // Opens an `if` or `while` scope on a condition (`what` names it in errors).
  void push_condition(int kind, const char* what, const Expr& cond, const SourceLoc& loc);
  Scope pop(Scope::Kind expected, const char* what);
  void emit_stmt(Stmt s);
  // Runs `record` with the innermost open scope set aside, so what it records lands just
  // before that scope's statement.
  void record_before_innermost_scope(const std::function<void()>& record);
  Tensor emit_with_output(std::shared_ptr<InstNode> inst);
  bool in_loop() const;
  // Threads of the innermost thread group (or the whole block).
  void check_index(const Expr& e, const char* what, const SourceLoc& loc, const std::string& inst) const;

  Kernel kernel_;
  bool blocks_set_ = false, warps_set_ = false;
  std::vector<Scope> scopes_;
  int64_t next_serial_ = 1;
  bool finished_ = false;
  SourceLoc last_loc_;
  std::unordered_set<const void*> mutable_vars_;  // variables made by declare()
  std::unordered_map<const void*, Expr> let_values_;  // variables made by let(), for set_blocks
  // Each global_view's pointer, typed as its elements (for item_ptr).
  std::unordered_map<const void*, Expr> global_ptrs_;
  // shared_tensor allocations and their reshapes: what reshape_shared takes.
  std::unordered_set<const void*> whole_shared_;
  // e with the lets it uses replaced by their values (for what is evaluated before a launch).
  Expr inline_lets(Expr e) const;
};

}  // namespace tilus
