// Instructions of the tile IR: one struct per instruction with typed fields and the source
// location of the call that recorded it.
//
// Every instruction declares its traits once, in visit_fields(): the tensor it defines and
// the tensors it uses, each with its access (read / write / alias) and the memory scopes it
// allows, its scalar expressions, the variables it binds, and printable attributes. The
// printer, the mutator base, the verifier's scope rule and the generic analyses (liveness,
// dead code, shared-memory hazards) all work through that one method, so a new instruction
// needs no change in them. How a memory instruction or a dot becomes machine instructions
// (and so whether it is asynchronous, and through which thread mapping it touches memory)
// is its lowering record (lowering.h), written by select_instructions.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tilus/ir/error.h"
#include "tilus/ir/expr.h"
#include "tilus/ir/layout.h"
#include "tilus/ir/lowering.h"
#include "tilus/ir/tensor.h"

namespace tilus {

#define TILUS_INSTRUCTIONS(X) \
  X(GlobalView)               \
  X(AllocateShared)           \
  X(FreeShared)               \
  X(AllocateRegister)         \
  X(SliceShared)              \
  X(ReshapeShared)            \
  X(LoadGlobal)               \
  X(StoreGlobal)              \
  X(LoadShared)               \
  X(StoreShared)              \
  X(CopyAsync)                \
  X(CopyAsyncCommitGroup)     \
  X(CopyAsyncWaitGroup)       \
  X(CopyAsyncWaitAll)         \
  X(Copy)                     \
  X(Im2col)                   \
  X(Dot)                      \
  X(Cast)                     \
  X(View)                     \
  X(Reshape)                  \
  X(Squeeze)                  \
  X(Unsqueeze)                \
  X(Transpose)                \
  X(Repeat)                   \
  X(Elementwise)              \
  X(Reduce)                   \
  X(Assign)                   \
  X(Sync)                     \
  X(MbarrierInit)             \
  X(Mbarrier)                 \
  X(TmaCommitGroup)           \
  X(TmaWaitGroup)             \
  X(FenceProxyAsync)          \
  X(WgmmaFence)               \
  X(WgmmaMma)                 \
  X(WgmmaCommitGroup)         \
  X(WgmmaWaitGroup)           \
  X(SetMaxNReg)               \
  X(ThreadIndex)              \
  X(Shuffle)                  \
  X(LoadGlobalVector)         \
  X(StoreGlobalVector)        \
  X(Atomic)                   \
  X(Item)                     \
  X(SharedItemPtr)            \
  X(Semaphore)                \
  X(Printf)                   \
  X(Assume)                   \
  X(AnnotateLayout)            \
  X(Tcgen05Alloc)             \
  X(Tcgen05Slice)             \
  X(Tcgen05View)              \
  X(Tcgen05Load)              \
  X(ClcQuery)                 \
  X(Defined)

enum class InstKind : uint8_t {
#define TILUS_ENUM(name) name,
  TILUS_INSTRUCTIONS(TILUS_ENUM)
#undef TILUS_ENUM
};

// How an instruction uses a tensor operand.
enum class Access : uint8_t {
  Read,       // reads elements
  Write,      // writes elements
  ReadWrite,  // both
  Alias,      // refers to it without touching memory (views, annotations)
};

struct CopyRegion;
struct InstDef;

// The memory scopes an operand may have (a bit per MemoryScope).
enum Scopes : uint8_t {
  kGlobal = 1,
  kShared = 2,
  kRegister = 4,
  kAnyScope = kGlobal | kShared | kRegister,
  kTensorMemory = 8,  // Blackwell's tensor memory (tcgen05 instructions only)
};
Scopes scope_bit(MemoryScope s);
// "a global", "a shared or register", ...
std::string scopes_str(uint8_t scopes);

class FieldVisitor {
 public:
  virtual ~FieldVisitor() = default;
  virtual void output(const char* name, Tensor& t, uint8_t scopes) {}
  // `region`: the part of the tensor the instruction touches, where it is not all of it.
  virtual void operand(const char* name, Tensor& t, Access access, uint8_t scopes, const CopyRegion* region) {}
  virtual void expr(const char* name, Expr& e) {}
  virtual void exprs(const char* name, std::vector<Expr>& es) {
    for (auto& e : es) expr(name, e);
  }
  virtual void binder(const char* name, Var& v) {}
  virtual void attr(const char* name, const std::string& value) {}
};

struct InstNode {
  SourceLoc loc;
  // How it is lowered (select_instructions; undefined before, and for instructions that
  // neither touch memory nor multiply).
  Lowering lowering;
  virtual ~InstNode() = default;
  virtual InstKind kind() const = 0;
  // The instruction's name as the user calls it ("load_global", "copy_async", ...).
  virtual const char* name() const = 0;
  // The name shown by the printer and in errors ("add", "exp", "sum" for the generic nodes).
  virtual std::string display_name() const { return name(); }
  virtual void visit_fields(FieldVisitor& v) = 0;
  virtual std::shared_ptr<InstNode> clone() const = 0;
  // Side effects beyond writing its operands (barriers, async groups, printing).
  virtual bool has_side_effects() const { return false; }
  // Which of its kind's definitions it is (an op, a scope); 0 for kinds with one definition.
  virtual int variant() const { return 0; }
  // Its definition (inst_def.h): name, group, traits, attributes, verifier hook.
  const InstDef& def() const;

  void visit_fields(FieldVisitor& v) const { const_cast<InstNode*>(this)->visit_fields(v); }
  // The tensor defined by this instruction (undefined if none).
  Tensor output() const;
  // Tensor operands with their access.
  std::vector<std::pair<Tensor, Access>> operands() const;
  struct Operand {
    const char* name;
    Tensor tensor;
    Access access;
    uint8_t scopes;
    const CopyRegion* region;  // nullptr: the whole tensor
    bool defines;              // the tensor the instruction defines (its output)
  };
  // Every tensor the instruction defines (access Write) or uses, with its traits.
  std::vector<Operand> traits() const;
  // Some tensor it defines or uses may be in global or shared memory (the emitters' memory
  // family).
  bool touches_memory() const;
  // True when removing the instruction cannot change the program's behaviour if its
  // output is unused.
  bool is_pure() const;
};

using Inst = std::shared_ptr<const InstNode>;

template <class T>
const T* inst_as(const Inst& i) {
  return i && i->kind() == T::static_kind ? static_cast<const T*>(i.get()) : nullptr;
}

#define TILUS_INST_COMMON(Name, user_name)                                                    \
  static constexpr InstKind static_kind = InstKind::Name;                                     \
  InstKind kind() const override { return InstKind::Name; }                                   \
  const char* name() const override { return user_name; }                                     \
  std::shared_ptr<InstNode> clone() const override { return std::make_shared<Name##Inst>(*this); } \
  using InstNode::visit_fields;                                                               \
  void visit_fields(FieldVisitor& v) override;

enum class EvictPolicy : uint8_t { Normal, First, Last };
const char* to_string(EvictPolicy e);
std::optional<EvictPolicy> parse_evict_policy(const std::string& s);

enum class ReduceOp : uint8_t { Sum, Max, Min, Any, All };
const char* to_string(ReduceOp op);

// ptr viewed as a global tensor with out's shape and strides.
struct GlobalViewInst : InstNode {
  TILUS_INST_COMMON(GlobalView, "global_view")
  Tensor out;
  Expr ptr;
};

struct AllocateSharedInst : InstNode {
  TILUS_INST_COMMON(AllocateShared, "shared_tensor")
  Tensor out;
  int64_t offset = -1;  // byte offset in the block's shared memory (set by plan_shared_memory)
};

struct FreeSharedInst : InstNode {
  TILUS_INST_COMMON(FreeShared, "free_shared")
  Tensor tensor;
  bool has_side_effects() const override { return true; }
};

// A register tensor, optionally initialized: element (axes...) = init.
struct AllocateRegisterInst : InstNode {
  TILUS_INST_COMMON(AllocateRegister, "register_tensor")
  Tensor out;
  std::vector<Var> axes;
  Expr init;  // undefined: uninitialized
};

// A view of a sub-tensor of a shared tensor: out[i...] = src[offsets + place(i)], where
// out's dims map onto src's dims `dims` (the other src dims are fixed at their offset).
struct SliceSharedInst : InstNode {
  TILUS_INST_COMMON(SliceShared, "slice_shared")
  Tensor out;
  Tensor src;
  std::vector<Expr> offsets;
  std::vector<int> dims;
};

// out: the bytes of the shared_tensor allocation `src` (or of a reshape of it) under another
// shape with as many elements, both row-major (NVIDIA Tilus's reshape_shared); a view.
struct ReshapeSharedInst : InstNode {
  TILUS_INST_COMMON(ReshapeShared, "reshape_shared")
  Tensor out;
  Tensor src;
};

// out[i...] = src[offsets + place(i)]: out's dims map onto src's dims `dims`.
// Out-of-bounds elements read as zero (bounds predicates).
struct LoadGlobalInst : InstNode {
  TILUS_INST_COMMON(LoadGlobal, "load_global")
  Tensor out;
  Tensor src;
  std::vector<Expr> offsets;
  std::vector<int> dims;
  // The global dims whose bounds are checked (set by insert_bounds_predicates; nullopt
  // before it runs, which the emitters treat as "check every dim").
  std::optional<std::vector<int>> checked_dims;
  // The value of the elements outside src (Triton's `other=`), a scalar of out's dtype;
  // undefined: zero. insert_bounds_predicates drops it where no dim is checked.
  Expr other;
};

// dst[offsets + place(i)] = src[i...]; out-of-bounds elements are not written.
struct StoreGlobalInst : InstNode {
  TILUS_INST_COMMON(StoreGlobal, "store_global")
  Tensor dst;
  Tensor src;
  std::vector<Expr> offsets;
  std::vector<int> dims;
  std::optional<std::vector<int>> checked_dims;  // as in LoadGlobalInst
};

struct LoadSharedInst : InstNode {
  TILUS_INST_COMMON(LoadShared, "load_shared")
  Tensor out;
  Tensor src;
};

struct StoreSharedInst : InstNode {
  TILUS_INST_COMMON(StoreShared, "store_shared")
  Tensor dst;
  Tensor src;
};

// Asynchronous global -> shared tile copy (cp.async); see docs/instructions.md.
struct CopyAsyncInst : InstNode {
  TILUS_INST_COMMON(CopyAsync, "copy_async")
  Tensor src;  // global
  Tensor dst;  // shared
  std::vector<Expr> offsets;
  std::vector<int> dims;
  EvictPolicy evict = EvictPolicy::Normal;
  bool check_bounds = true;
  std::optional<std::vector<int>> checked_dims;  // as in LoadGlobalInst
};

struct CopyAsyncCommitGroupInst : InstNode {
  TILUS_INST_COMMON(CopyAsyncCommitGroup, "copy_async_commit_group")
  bool has_side_effects() const override { return true; }
};

struct CopyAsyncWaitGroupInst : InstNode {
  TILUS_INST_COMMON(CopyAsyncWaitGroup, "copy_async_wait_group")
  int64_t n = 0;
  bool has_side_effects() const override { return true; }
};

struct CopyAsyncWaitAllInst : InstNode {
  TILUS_INST_COMMON(CopyAsyncWaitAll, "copy_async_wait_all")
  bool has_side_effects() const override { return true; }
};

// A region of a tensor: the box [offsets, offsets + extents). Register tensors are always
// whole (offsets 0, extents = shape).
struct CopyRegion {
  Tensor tensor;
  std::vector<Expr> offsets;
  std::vector<Expr> extents;
  // Global regions: the dims whose bounds are checked (as in LoadGlobalInst).
  std::optional<std::vector<int>> checked_dims;
};

// Which method recorded a CopyInst: they differ in who waits for it.
enum class CopyApi : uint8_t {
  Copy,               // copy: synchronous; the passes add the waits
  AsyncCopy,          // async_copy: cp.async + commit; the kernel waits
  TmaCopy,            // tma_copy: arrive-expect-tx + TMA load on `barrier`; the kernel waits on it
  TmaGlobalToShared,  // tma.global_to_shared: TMA load completing on `barrier` (no expect-tx)
  TmaSharedToGlobal,  // tma.shared_to_global: TMA store; the kernel commits and waits (tma.*_group)
};
const char* to_string(CopyApi api);

// The copy between any two of global / shared / register regions (`copy`), and its
// explicitly asynchronous forms (`async_copy`: cp.async + commit, no wait; the TMA methods). All switches of
// the call are kept: typed fields, plus `annotations` (user annotations win over the keyword
// arguments, resolved by the tracer). select_instructions records its choice in the
// lowering record. A copy selected as cp.async commits its own group (the async-wait pass
// waits for it; async_copy leaves the wait to the kernel).
struct CopyInst : InstNode {
  TILUS_INST_COMMON(Copy, "copy")
  CopyRegion src;
  CopyRegion dst;
  std::optional<int64_t> coalesced_width;
  bool disable_tma = false;
  bool use_tma = false;       // annotation: TMA or an error
  bool use_cp_async = false;  // annotation: cp.async or an error
  CopyApi api = CopyApi::Copy;
  // TMA loads of tma_copy / tma.global_to_shared: the mbarrier their bytes complete on (a
  // one-element uint64 shared tensor or view, from mbarrier.alloc).
  Tensor barrier;
  // tma.global_to_shared: the blocks of the cluster (bit i: rank i) that receive the box, at
  // the same shared offset, completing on their barrier at the same offset (undefined: this
  // block only).
  Expr multicast_mask;
  std::optional<EvictPolicy> eviction_policy;
  // tma.global_to_shared with cta_group=2 (Blackwell's pairs of blocks): the load's bytes
  // complete on the barrier at `barrier`'s offset in block `barrier_rank` of the cluster (a
  // barrier mapped with cluster.map_shared_addr; undefined: this block's own barrier).
  int64_t cta_group = 1;
  Expr barrier_rank;
  // tma.global_to_shared / shared_to_global: a raw 64-bit L2 cache policy (what createpolicy
  // makes, e.g. CUTLASS's 0x12F0000000000000 for evict-first), issued with the .L2::cache_hint
  // form (undefined: none).
  Expr cache_policy;
  std::map<std::string, std::string> annotations;
  RegisterLayout loop_layout;  // optional thread mapping for the SIMT path
  bool scalar = false;          // both sides single elements: a direct store

  std::string display_name() const override { return to_string(api); }
  bool has_side_effects() const override { return api != CopyApi::Copy; }
  // The kernel waits for it itself (async_copy and the TMA methods).
  bool user_waits() const { return api != CopyApi::Copy; }
};

// c2d_im2col: the [bm, bk] tile (nhw_step, c_step) of the im2col matrix of an NHWC image
// into the shared tensor `col`: col[i, j] = img[n, oh * stride + kh * dilation - pad,
// ow * stride + kw * dilation - pad, c] for pixel m = nhw_step * bm + i = (n, oh, ow) of the
// [N, OH, OW] output and k = c_step * bk + j = (kh, kw, c) of [kernel, kernel, C]; zero outside
// the image and past the matrix (im2col_map in ir/facts.h has the address map).
struct Im2colInst : InstNode {
  TILUS_INST_COMMON(Im2col, "c2d_im2col")
  Tensor img;  // global [N, H, W, C]
  Tensor col;  // shared [bm, bk]
  Expr nhw_step, c_step;
  int64_t kernel = 1, stride = 1, dilation = 1, pad = 0;
  std::optional<EvictPolicy> eviction_policy;
  // Split-phase (like tma_copy): the group's first thread arrives once on `barrier` with the
  // tile's bytes and issues a TMA im2col load, and the kernel waits on the barrier itself
  // (undefined: synchronous).
  Tensor barrier;
  bool has_side_effects() const override { return barrier.defined(); }
};

// out = a @ b + c  (a: [m, k], b: [k, n], c and out: [m, n]).
struct DotInst : InstNode {
  TILUS_INST_COMMON(Dot, "dot")
  Tensor out;
  Tensor a, b, c;
};

struct CastInst : InstNode {
  TILUS_INST_COMMON(Cast, "cast")
  Tensor out;
  Tensor x;
};

// Reinterprets the per-thread registers of x with out's dtype and/or layout.
struct ViewInst : InstNode {
  TILUS_INST_COMMON(View, "view")
  Tensor out;
  Tensor x;
};

struct ReshapeInst : InstNode {
  TILUS_INST_COMMON(Reshape, "reshape")
  Tensor out;
  Tensor x;
};

struct SqueezeInst : InstNode {
  TILUS_INST_COMMON(Squeeze, "squeeze")
  Tensor out;
  Tensor x;
  std::vector<int> dims;
};

struct UnsqueezeInst : InstNode {
  TILUS_INST_COMMON(Unsqueeze, "unsqueeze")
  Tensor out;
  Tensor x;
  std::vector<int> dims;
};

struct TransposeInst : InstNode {
  TILUS_INST_COMMON(Transpose, "transpose")
  Tensor out;
  Tensor x;
};

// out = x tiled repeats[i] times along dim i (ranks right-aligned).
struct RepeatInst : InstNode {
  TILUS_INST_COMMON(Repeat, "repeat")
  Tensor out;
  Tensor x;
  std::vector<int64_t> repeats;
};

// out[i] = body(params bound to inputs[j][broadcast(i)]). Every unary, binary, comparison,
// where and clip call records this one node; `op` is the user's name for it.
struct ElementwiseInst : InstNode {
  TILUS_INST_COMMON(Elementwise, "elementwise")
  Tensor out;
  std::vector<Tensor> inputs;
  std::vector<Var> params;
  Expr body;
  std::string op;
  std::string display_name() const override { return op; }
};

struct ReduceInst : InstNode {
  TILUS_INST_COMMON(Reduce, "reduce")
  Tensor out;
  Tensor x;
  std::vector<int> dims;
  bool keepdim = false;
  ReduceOp op = ReduceOp::Sum;
  std::string display_name() const override { return to_string(op); }
};

// dst = src (register tensors of one shape and dtype); records re-assignment of a
// register variable, and `out=` arguments.
struct AssignInst : InstNode {
  TILUS_INST_COMMON(Assign, "assign")
  Tensor dst;
  Tensor src;
};

// A barrier. `scope` says which threads it waits for:
//   Group:   the current thread group (`sync()`, `sync_threads()`); the emitter picks
//            __syncthreads, a named barrier or __syncwarp;
//   Named:   `sync_threads(barrier_id, arrive_count)`: bar.sync barrier_id, arrive_count
//            (arrive_count threads of the block, the current group among them);
//   NamedArrive: `named_barrier_arrive(barrier_id, arrive_count)`: bar.arrive barrier_id,
//            arrive_count: the group's threads count towards the barrier and go on without
//            waiting (the signal half: other groups wait at it with sync_threads);
//   Warp:    `sync_warp(mask)`: __syncwarp(mask) (mask undefined: the group's lanes);
//   Cluster: `cluster.sync()`: barrier.cluster.arrive + wait (every thread of the cluster);
//   Grid:    `sync_grid()` / `sync_global()`: every thread of the grid (a cooperative launch).
enum class SyncScope : uint8_t { Group, Named, Warp, Cluster, Grid, NamedArrive };
struct SyncInst : InstNode {
  TILUS_INST_COMMON(Sync, "sync")
  SyncScope scope = SyncScope::Group;
  int64_t barrier_id = 0;    // Named, NamedArrive: 1..15
  int64_t arrive_count = 0;  // Named, NamedArrive: a positive multiple of 32
  Expr mask;                 // Warp: a uint32 lane mask (undefined: the group's lanes)
  std::string display_name() const override;
  bool has_side_effects() const override { return true; }
  int variant() const override { return int(scope); }
};

// mbarrier.alloc: barriers[i] expects counts[i] arrivals per phase. `barriers` is a uint64
// shared tensor of shape [n]; the first thread of the current thread group initializes them.
struct MbarrierInitInst : InstNode {
  TILUS_INST_COMMON(MbarrierInit, "mbarrier.alloc")
  Tensor barriers;
  std::vector<Expr> counts;
  bool has_side_effects() const override { return true; }
};

enum class MbarrierOp : uint8_t {
  Arrive,          // every thread of the group arrives `value` times
  ArriveExpectTx,  // every thread arrives once and adds `value` bytes to the transaction count
  ExpectTx,        // every thread adds `value` bytes to the transaction count (no arrival)
  Wait,            // every thread waits until the phase of parity `value` has completed
  // cp_async_barrier_noinc: every thread arrives once when all its earlier cp.async copies have
  // landed (cp.async.mbarrier.arrive.noinc; the arrival counts toward the barrier's expected
  // count). `value` is 1.
  CpAsyncArrive,
};
const char* to_string(MbarrierOp op);

// One operation on one mbarrier (a one-element uint64 shared tensor or view). Arrivals and
// waits synchronize; they are not data accesses (the passes treat them as reads).
struct MbarrierInst : InstNode {
  TILUS_INST_COMMON(Mbarrier, "mbarrier")
  MbarrierOp op = MbarrierOp::Arrive;
  Tensor barrier;
  Expr value;
  std::string sem = "release";  // arrive: release / relaxed; wait: acquire / relaxed
  std::string scope = "cta";    // cta / cluster
  Expr cta_id;                  // Arrive: the block of the cluster whose barrier it is (undefined: this one)
  // Wait: the phase kept in a one-element register tensor (NVIDIA Tilus's examples keep phases
  // in register tensors); `value` is then undefined.
  Tensor value_tensor;
  std::string display_name() const override {
    return op == MbarrierOp::CpAsyncArrive ? "cp_async_barrier_noinc" : std::string("mbarrier.") + to_string(op);
  }
  bool has_side_effects() const override { return true; }
  int variant() const override { return int(op); }
};

// tma.commit_group: closes the group of TMA stores issued since the last commit.
struct TmaCommitGroupInst : InstNode {
  TILUS_INST_COMMON(TmaCommitGroup, "tma.commit_group")
  bool has_side_effects() const override { return true; }
};

// tma.wait_group: waits until at most n groups of TMA stores are pending; `read`: only until
// they have read their shared source (it may be overwritten), not until their writes land.
struct TmaWaitGroupInst : InstNode {
  TILUS_INST_COMMON(TmaWaitGroup, "tma.wait_group")
  int64_t n = 0;
  bool read = false;
  bool has_side_effects() const override { return true; }
};

// fence.proxy_async: orders this thread's generic-proxy accesses of `space` ("shared",
// "global") with async-proxy (TMA) accesses.
struct FenceProxyAsyncInst : InstNode {
  TILUS_INST_COMMON(FenceProxyAsync, "fence.proxy_async")
  std::string space = "shared";
  bool has_side_effects() const override { return true; }
};

// wgmma.fence: orders the warp group's earlier register and shared-memory accesses before the
// wgmma.mma that follow (PTX requires one before the first wgmma.mma and whenever the
// accumulator's registers were touched by other instructions since).
struct WgmmaFenceInst : InstNode {
  TILUS_INST_COMMON(WgmmaFence, "wgmma.fence")
  bool has_side_effects() const override { return true; }
};

// wgmma.mma: d += a @ b over the warp groups of the current thread group, asynchronously: d
// (and the shared operands) may be touched again only after a wgmma.wait_group that covers
// its commit group. a: [m, k] shared (K-major: a view whose K stride is 1) or register, b:
// [k, n] shared (K-major, e.g. a transposed [n, k] tile, or MN-major: a row-major [k, n] tile one
// swizzle span wide) or [blocks, k, n / blocks] (MN-major column blocks side by side along n, each
// one swizzle span wide), d: [m, n] register, read and written.
struct WgmmaMmaInst : InstNode {
  TILUS_INST_COMMON(WgmmaMma, "wgmma.mma")
  Tensor a, b, d;
  // b's n: [k, n], or [blocks, k, n / blocks].
  int64_t n() const {
    auto s = b.static_shape();
    return s.size() == 3 ? s[0] * s[2] : s[1];
  }
  bool from_dot = false;  // made by lower_dots_to_wgmma from a dot (printed from_dot=true)
  // false: d = a @ b, d's earlier values ignored (wgmma's scale-d 0 on the first k step; printed
  // enable_input_d=false). d stays a read-write operand: the passes need not know.
  bool enable_input_d = true;
  bool has_side_effects() const override { return true; }
};

// wgmma.commit_group: closes the group of wgmma.mma issued since the last commit.
struct WgmmaCommitGroupInst : InstNode {
  TILUS_INST_COMMON(WgmmaCommitGroup, "wgmma.commit_group")
  bool has_side_effects() const override { return true; }
};

// wgmma.wait_group: waits until at most n wgmma groups of this warp group are pending.
// `ordered` (set by the order_wgmma_waits pass, printed ordered=true): the wait stays after the
// work the program put before it (a fence ptxas does not schedule across precedes it).
struct WgmmaWaitGroupInst : InstNode {
  TILUS_INST_COMMON(WgmmaWaitGroup, "wgmma.wait_group")
  int64_t n = 0;
  bool ordered = false;
  bool has_side_effects() const override { return true; }
};

// setmaxnreg.inc/dec.sync.aligned.u32 reg_count: the warp group's per-thread register budget
// (sm_90a).
struct SetMaxNRegInst : InstNode {
  TILUS_INST_COMMON(SetMaxNReg, "set_max_nreg")
  int64_t reg_count = 0;
  bool is_inc = true;
  std::string display_name() const override { return is_inc ? "inc_max_nreg" : "dec_max_nreg"; }
  bool has_side_effects() const override { return true; }
};

// A per-thread value as a tile: out has one element per thread of the current thread group
// (layout spatial(n)); element t is the value of the group's thread t. `op` is the user's
// name: get_lane_idx, get_warp_idx_sync, get_warp_idx, get_warp_group_idx (int32; indices of
// the thread in the block: block thread / warp_size ...) or shuffle_elect (bool: true for the
// first thread of every `thread_extent` threads of the group; 0: the group's first thread).
struct ThreadIndexInst : InstNode {
  TILUS_INST_COMMON(ThreadIndex, "thread_index")
  Tensor out;
  std::string op;
  int64_t warp_size = 32;
  int64_t warps_per_group = 4;
  int64_t thread_extent = 0;
  std::string display_name() const override { return op; }
};

// A warp shuffle of a register tensor: slot s of thread t of out is slot s of thread src(t) of
// value (both in value's layout), src as __shfl_{xor,down,up,}_sync computes it from the lane
// (`op`: shfl_xor, shfl_down, shfl_up, shfl_sync; `lane`: the offset, or shfl_sync's srcLane).
struct ShuffleInst : InstNode {
  TILUS_INST_COMMON(Shuffle, "shuffle")
  Tensor out;
  Tensor value;
  std::string op;
  Expr lane;
  Expr mask;          // undefined: the group's lanes
  int64_t width = 32;
  std::string display_name() const override { return op; }
};

// ldg32/64/128/256: every thread of the current group loads the `bits`-bit vector of the global
// region `src` (its bytes are bits / 8) into `out` (the region's shape, every thread holding all
// of it). `pred` (a bool scalar, undefined: true) false gives zeros. No bounds predicate.
struct LoadGlobalVectorInst : InstNode {
  TILUS_INST_COMMON(LoadGlobalVector, "ldg")
  Tensor out;
  CopyRegion src;
  Expr pred;
  int64_t bits = 32;
  std::string display_name() const override { return "ldg" + std::to_string(bits); }
};

// stg32/64/128/256: the `bits`-bit vector `value` (held whole by every thread) stored to the
// global region `dst`; skipped when `pred` is false. No bounds predicate.
struct StoreGlobalVectorInst : InstNode {
  TILUS_INST_COMMON(StoreGlobalVector, "stg")
  CopyRegion dst;
  Tensor value;
  Expr pred;
  int64_t bits = 32;
  std::string display_name() const override { return "stg" + std::to_string(bits); }
};

// self.atomic.{global,shared}_{add,sub,min,max,exch,cas}: element-wise atomic read-modify-write
// of `dst` (a global tile at `offsets` through `dims`, as store_global places it, or a whole
// shared tensor) with the matching element of `values`: each element once, by the thread that
// holds it (the primary replica, as stores do). `out` receives the elements' values before the
// operation; cas writes `values` where the element equals `compare`. Out-of-bounds global
// elements are skipped (their `out` is zero). `sem`: relaxed / acquire / release / acq_rel;
// `scope`: cta / cluster / gpu / sys.
enum class AtomicOp : uint8_t { Add, Sub, Min, Max, Exch, Cas };
const char* to_string(AtomicOp op);
struct AtomicInst : InstNode {
  TILUS_INST_COMMON(Atomic, "atomic")
  AtomicOp op = AtomicOp::Add;
  Tensor out;
  Tensor dst;
  Tensor values;
  Tensor compare;  // cas only
  std::vector<Expr> offsets;  // global dst
  std::vector<int> dims;      // global dst
  std::optional<std::vector<int>> checked_dims;  // as in LoadGlobalInst
  std::string sem = "relaxed";
  std::string scope = "gpu";
  // Scatter (NVIDIA Tilus's atomic.*_scatter_* and store_*_scatter): element k goes to dst at
  // k's tile coordinates with coordinate `scatter_dim` replaced by indices[k] (an integer
  // register tensor of values' shape); an index outside dst's extent is skipped. `store`: a plain
  // (non-atomic) store, op Exch, no old values.
  Tensor indices;
  int scatter_dim = -1;
  bool store = false;
  bool scatter() const { return scatter_dim >= 0; }
  // Where element k with index `index` (int64) is written: inside dst along the scatter dim.
  // The one rule both emitters apply (an index outside dst is skipped).
  Expr scatter_in_bounds(const Expr& index) const;
  std::string display_name() const override;  // atomic.global_add, ...
  bool has_side_effects() const override { return true; }
};

// x.item(): the scalar `var` (a local of x's dtype, visible after the instruction in its scope)
// takes the one element of the register tensor x, which every thread of the group holds.
struct ItemInst : InstNode {
  TILUS_INST_COMMON(Item, "item")
  Var var;
  Tensor x;
  // It defines `var` for what follows, which dead-code elimination cannot see through tensors.
  bool has_side_effects() const override { return true; }
};

// var = the generic address of the first element of the shared tensor (or view) x, a pointer
// to its dtype (NVIDIA Tilus's SharedTensor.item_ptr()). Accesses made through it are the
// kernel's own: the passes do not see them.
struct SharedItemPtrInst : InstNode {
  TILUS_INST_COMMON(SharedItemPtr, "item_ptr")
  Var var;
  Tensor x;
  bool has_side_effects() const override { return true; }
};

// lock_semaphore / release_semaphore on an int32 in global memory (NVIDIA Tilus's names):
// Lock: the group's first thread spins on acquire loads until the semaphore holds `value`, then
// the group meets at a barrier (every thread sees what was written before the release).
// Release: the group meets at a barrier (its earlier writes come first), then the first thread
// stores `value` with release semantics at GPU scope.
enum class SemaphoreOp : uint8_t { Lock, Release };
struct SemaphoreInst : InstNode {
  TILUS_INST_COMMON(Semaphore, "semaphore")
  SemaphoreOp op = SemaphoreOp::Lock;
  Expr semaphore;  // an int32 pointer
  Expr value;      // int32
  std::string display_name() const override {
    return op == SemaphoreOp::Lock ? "lock_semaphore" : "release_semaphore";
  }
  bool has_side_effects() const override { return true; }
};

struct PrintfInst : InstNode {
  TILUS_INST_COMMON(Printf, "printf")
  std::string format;
  std::vector<Expr> args;
  bool has_side_effects() const override { return true; }
};

struct AssumeInst : InstNode {
  TILUS_INST_COMMON(Assume, "assume")
  Expr cond;
  bool has_side_effects() const override { return true; }
};

struct AnnotateLayoutInst : InstNode {
  TILUS_INST_COMMON(AnnotateLayout, "annotate_layout")
  Tensor tensor;
  RegisterLayout layout;
  SharedLayout shared_layout;
  bool has_side_effects() const override { return true; }
};

// --- Blackwell: tensor memory and tcgen05 (NVIDIA Tilus's self.tcgen05), cluster launch control ---

// tcgen05.alloc: `out`, a tensor in tensor memory of [lanes, columns...] (lanes 32, 64 or 128),
// allocated by the first warp of the current thread group (tcgen05.alloc writes its address to a
// shared slot, which every thread of the group then reads). `cta_group` 2 allocates the same
// columns in both blocks of a pair (cluster ranks 2i and 2i + 1) for tcgen05.mma with
// cta_group=2.
struct Tcgen05AllocInst : InstNode {
  TILUS_INST_COMMON(Tcgen05Alloc, "tcgen05.alloc")
  Tensor out;
  int64_t cta_group = 1;
  // Where tcgen05.alloc writes the address: a byte offset in the block's shared memory (set by
  // plan_shared_memory; -1 before it).
  int64_t slot_offset = -1;
  // The 32-bit columns allocated: those the tensor spans, rounded up to a power of two of at
  // least 32 (what tcgen05.alloc takes).
  int64_t columns() const;
  bool has_side_effects() const override { return true; }
};

// tcgen05.slice: the view of `src` at `offsets` (one per src dim; the lane offset a constant)
// whose dim k is src dim dims[k]; dims keeps the lane dim (0) and the last dim.
struct Tcgen05SliceInst : InstNode {
  TILUS_INST_COMMON(Tcgen05Slice, "tcgen05.slice")
  Tensor out;
  Tensor src;
  std::vector<Expr> offsets;
  std::vector<int> dims;
};

// tcgen05.view: the columns of `src` as another dtype and shape: the dims but the last keep
// their extents, the last keeps its bits.
struct Tcgen05ViewInst : InstNode {
  TILUS_INST_COMMON(Tcgen05View, "tcgen05.view")
  Tensor out;
  Tensor src;
};

// tcgen05.load: out = the rank-2 tensor-memory tile `src` in registers (tcgen05.ld, warp w of the
// group reading lanes 32w..32w+31): asynchronous, the registers hold it after tcgen05.wait_load.
struct Tcgen05LoadInst : InstNode {
  TILUS_INST_COMMON(Tcgen05Load, "tcgen05.load")
  Tensor out;
  Tensor src;
};

// clc.query_response: the 16-byte response of clc.try_cancel in `response` decoded into scalars:
// `is_canceled` (bool) and, where it is true, the first block index (x, y, z) of the canceled
// cluster (int32; undefined otherwise). Every thread of the group reads it.
struct ClcQueryInst : InstNode {
  TILUS_INST_COMMON(ClcQuery, "clc.query_response")
  Tensor response;
  Var is_canceled, x, y, z;
  // It defines the scalars for what follows (as item).
  bool has_side_effects() const override { return true; }
};

#undef TILUS_INST_COMMON

// The lane a shuffle reads for lane `lane` (0..31) as PTX shfl.sync computes it: b's low 5
// bits; xor / down / up keep their own value where the source leaves the `width`-lane segment
// (xor: above it), shfl_sync reads lane b % width of the segment.
int64_t shuffle_source_lane(const std::string& op, int64_t lane, int64_t b, int64_t width);
// Why a shuffle of a replicated layout would leave the replicas of an element different (empty
// when it cannot): each replica reads its own source thread, and replicas in different lanes
// or slots may read different elements. `b`: the offset / source lane when it is a constant.
std::string shuffle_replica_problem(const ShuffleInst& inst, std::optional<int64_t> b);

// Makes an instruction of type T with a location.
template <class T>
std::shared_ptr<T> make_inst(SourceLoc loc) {
  auto i = std::make_shared<T>();
  i->loc = std::move(loc);
  return i;
}

}  // namespace tilus
