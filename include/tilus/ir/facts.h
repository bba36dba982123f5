// Facts about a kernel: the one analysis that every pass and both emitters read, so that no
// two of them can disagree about what is known.
//
//   - scalars: the range and divisor of every variable (block indices over the grid, or the
//     hardware's limits where the grid is unknown; the thread index over the block and over
//     each thread group; loop variables over their loops, with the exact last value of a
//     strided loop; let-bound values; register-tensor axes; integer parameters' divisors
//     from the kernel's specialization);
//   - pointers: the bytes known to divide each pointer parameter (its 16-byte alignment
//     specialization);
//   - tensors as address maps: every global_view as a GlobalAccess, every shared tensor
//     (an allocation at its planned offset, or a slice of one) as a SharedView;
//   - which global dims an access checks: what insert_bounds_predicates recorded on the
//     instruction (checked_dims; `nullopt`, before that pass, checks every dim);
//   - the argument contract: what each pointer parameter's array must be for the kernel's
//     global views to stay inside it, and whether the kernel writes through it.
//
// Variables are bound once in the IR (a loop variable, a let, an axis), so a fact holds
// wherever its variable can be named; the analysis is one walk of the body.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "tilus/ir/contract.h"
#include "tilus/ir/inst.h"
#include "tilus/ir/program.h"
#include "tilus/ir/simplify.h"

namespace tilus {

// A shared tensor as an address map: element (i...) of the view is element
// (offsets + place(i)) of its root allocation.
struct SharedView {
  Tensor root;
  int64_t base_bytes = 0;     // the root's offset in the block's shared memory (0 before planning)
  bool planned = false;       // plan_shared_memory has placed the root
  std::vector<Expr> offsets;  // per root dim
  std::vector<int> dims;      // view dim k -> root dim dims[k] (-1: none, fixed at the offset)
  // A reshape_shared view is a root of its own (its shape, row-major with the allocation's
  // swizzle) over the bytes of `alias`, the shared_tensor allocation it reshapes: the
  // barrier and async-wait passes take its accesses as accesses of all of `alias`.
  Tensor alias;
};

// A tensor-memory tensor as an address map: element (l, i1, ..., ik) of the view is in lane
// lane_offset + l of its root allocation, at bit col_bits + sum(ij * col_strides_bits[j]) of
// that lane's columns (32 bits each). An allocation is row-major over its column dims; slices and
// views keep their source's strides.
struct TmemView {
  Tensor root;                            // the tcgen05.alloc tensor
  const Tcgen05AllocInst* alloc = nullptr;
  int64_t lane_offset = 0;
  Expr col_bits;                          // int32
  std::vector<int64_t> col_strides_bits;  // per view dim; 0 for dim 0 (the lanes)
  // The first 32-bit column of the view (col_bits / 32).
  Expr first_column() const;
};

// A run-time check that a shared tile stays inside its root allocation along one root dim:
// where a slice, region or index put a non-constant offset (constant ones the verifier
// checked) that the facts cannot prove in range. The CPU backend's checked mode and the CUDA
// emitter under TILUS_DEBUG_BOUNDS test them before the access.
struct SharedBoundsCheck {
  int dim = 0;         // root dim
  Expr offset;         // the tile's first index along it
  int64_t extent = 1;  // the tile's extent along it
  int64_t size = 0;    // the root's extent along it
  Expr ok;             // 0 <= offset && offset + extent <= size
};

// The start of a TMA box along its innermost (contiguous) global dim: the hardware faults
// ("an illegal instruction") when the box's first element is not 16-byte aligned, that is
// (the tensor map's base and strides being 16-byte aligned) when the innermost coordinate is
// not a multiple of 16 bytes' worth of elements. select_instructions rejects a start proven
// misaligned; the CPU backend and the CUDA emitter under TILUS_DEBUG_BOUNDS test `ok` where
// neither is proven.
struct TmaStartCheck {
  Expr offset;                // the innermost coordinate, in elements (simplified)
  int64_t multiple = 1;       // the elements in 16 bytes
  Expr ok;                    // offset % multiple == 0
  std::optional<bool> aligned;  // proven aligned (true) or misaligned (false); unknown: empty
};

// A tile of a global tensor: tile dim k runs along global dim dims[k] from `offsets`.
struct GlobalAccess {
  DataType dtype;
  int64_t pointer_alignment = 1;  // bytes known to divide the base pointer
  std::vector<Expr> shape, strides, offsets;
  std::vector<int> dims;
  std::vector<int> checked;  // global dims with a bounds predicate
  // The pointer parameter the view is built on (-1: none) and the view's first element's byte
  // offset from it (int64 over the scalars; undefined when it is not the parameter moved by
  // integers).
  int param = -1;
  Expr param_offset_bytes;
};

class KernelFacts {
 public:
  explicit KernelFacts(const Kernel& kernel);

  // --- scalars ---------------------------------------------------------------------------
  const BoundContext& bounds() const { return ctx_; }
  Expr simplify(const Expr& e) const { return tilus::simplify(e, ctx_); }
  // The largest power of two known to divide e (after simplification).
  int64_t divisor(const Expr& e) const { return ctx_.divisor(simplify(e)); }
  // True only when the condition is proven for every execution that reaches it.
  bool holds(const Expr& cond) const;
  // The thread index inside a thread group, ranging over [0, num_threads).
  const Var& group_thread(const ThreadGroupStmtNode& group) const;
  // Bytes known to divide a pointer expression (1 unless it is a specialized parameter).
  int64_t pointer_alignment(const Expr& ptr) const;
  // The pointer an address expression is built on, as an index into the launch's pointers:
  // the kernel's parameters, then its global tensors (Kernel::global_tensors); -1: none.
  int pointer_param(const Expr& ptr) const;
  // The variable of such an index.
  const Var& pointer_var(int index) const;

  // --- tensors ---------------------------------------------------------------------------
  // The address map of a global_view / shared tensor of this kernel; CompileError at
  // `user`'s location when `t` is not one (a tensor from another kernel, or a use before
  // the definition).
  const GlobalAccess& global(const InstNode& user, const Tensor& t) const;
  const SharedView& shared(const InstNode& user, const Tensor& t) const;
  const TmemView& tmem(const InstNode& user, const Tensor& t) const;
  // A tile of global tensor `g` at `offsets`, tile dim k on global dim dims[k] (-1: none).
  GlobalAccess tile(const InstNode& user, const Tensor& g, std::vector<Expr> offsets, std::vector<int> dims,
                    const std::optional<std::vector<int>>& checked_dims) const;
  // One end of a copy as a tile of `tile_rank` dims (region_dims).
  GlobalAccess global_region(const InstNode& user, const CopyRegion& r, int tile_rank) const;
  SharedView shared_region(const InstNode& user, const CopyRegion& r, int tile_rank) const;
  // The checks a tile of `tile_shape` (tile dim k on root dim view.dims[k]) of a shared view
  // needs at run time (none when every offset is constant or proven in range).
  std::vector<SharedBoundsCheck> shared_bounds(const SharedView& view, const std::vector<int64_t>& tile_shape) const;
  // The alignment of a TMA box of `dtype` elements whose innermost coordinate is `offset`.
  TmaStartCheck tma_start(const Expr& offset, DataType dtype) const;

  // --- the argument contract ------------------------------------------------------------
  // Per parameter (empty for scalars and parameters no view is built on).
  const std::vector<PointerContract>& contracts() const { return contracts_; }
  // The kernel's assumptions about its scalar parameters (divisibility facts such as
  // `c % 64 == 0` also feed divisor()).
  const std::vector<Assumption>& assumptions() const { return assumptions_; }
  // `e` with the kernel's let-bound variables replaced by their values (recursively), so that
  // what the launcher evaluates from the arguments (a tensor map's shape) names no local.
  Expr inline_lets(const Expr& e) const;

  const Kernel& kernel() const { return kernel_; }

 private:
  friend class FactCollector;
  const Kernel& kernel_;
  BoundContext ctx_;
  std::unordered_map<const ThreadGroupStmtNode*, Var> group_threads_;
  std::unordered_map<const TensorNode*, GlobalAccess> globals_;
  std::unordered_map<const TensorNode*, SharedView> shared_;
  std::unordered_map<const TensorNode*, TmemView> tmem_;
  std::unordered_map<const TensorNode*, int> view_params_;  // global view -> its pointer parameter
  std::vector<PointerContract> contracts_;
  std::vector<Assumption> assumptions_;
  std::unordered_map<const ExprNode*, Expr> lets_;  // let variable -> its value
};

// The region dim that each dim of a `tile_rank`-dim tile index lands on, right-aligned:
// -1 where the region has no such dim or has extent 1 there (broadcast: index 0).
std::vector<int> region_dims(int tile_rank, const std::vector<Expr>& extents);

// Address maps of a tile index (one IR expression per tile dim), shared by both emitters:
// the global index of a tile element, its element offset from the tensor's base pointer, its
// in-bounds predicate (the checked dims only; true when none), and the element offset of a
// shared view's element from its root's base.
std::vector<Expr> global_index(const GlobalAccess& g, const std::vector<Expr>& tile);
Expr global_offset(const GlobalAccess& g, const std::vector<Expr>& tile);
Expr global_predicate(const GlobalAccess& g, const std::vector<Expr>& tile);
Expr shared_offset(const SharedView& s, const std::vector<Expr>& tile);
// The element offset of a shared view's first element from its root, before the swizzle (the
// address a TMA box takes: TMA applies the swizzle itself).
Expr shared_start_unswizzled(const SharedView& s);

// c2d_im2col's geometry (Im2colInst over an NHWC image, int64 expressions): the output size,
// whether it is empty (an image smaller than the window), and the im2col matrix's extents.
struct Im2colInst;
struct Im2colGeometry {
  Expr n, h, w, c;    // the image
  Expr oh, ow;        // output pixels per column and row (<= 0: none)
  Expr nonempty;      // oh > 0 && ow > 0
  Expr rows, cols;    // the matrix: n * oh * ow pixels, kernel * kernel * c
};
Im2colGeometry im2col_geometry(const Im2colInst& inst, const GlobalAccess& img);
// Matrix row m as an output pixel (n, oh, ow) and column k as a kernel position and channel
// (kh, kw, ch). The divisors are clamped to at least 1: defined for every m and k, meaningful
// where the geometry is nonempty.
struct Im2colPosition {
  Expr n, oh, ow, kh, kw, ch;
};
Im2colPosition im2col_position(const Im2colInst& inst, const Im2colGeometry& g, const Expr& m, const Expr& k);
// The gathers' address map, for both emitters: the element offset in the image of col tile
// index (i, j), and whether it is inside the image and the im2col matrix.
struct Im2colMap {
  Expr offset, predicate;
};
Im2colMap im2col_map(const Im2colInst& inst, const GlobalAccess& img, const std::vector<Expr>& tile);

}  // namespace tilus
