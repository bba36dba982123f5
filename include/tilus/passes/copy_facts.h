// Facts about tile accesses that the copy-selection pass and the CUDA emitter must agree
// on: how wide a vector each side of an access can move, and which register layouts are
// the fragments of ldmatrix / stmatrix. The pass decides with them (and records the
// decision in the IR); the emitter uses the same functions for the accesses no pass
// selects (load_global, store_global, load_shared, store_shared).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tilus/ir/inst.h"
#include "tilus/ir/layout.h"
#include "tilus/ir/program.h"
#include "tilus/ir/simplify.h"

namespace tilus {

// A shared tensor as an address map: element (i...) of the view is element
// (offsets + place(i)) of its root allocation.
struct SharedView {
  Tensor root;
  int64_t base_bytes = 0;     // the root's offset in the block's shared memory (128-aligned)
  std::vector<Expr> offsets;  // per root dim
  std::vector<int> dims;      // view dim k -> root dim dims[k]
};

// A tile of a global tensor: tile dim k runs along global dim dims[k] from `offsets`.
struct GlobalAccess {
  DataType dtype;
  int64_t pointer_alignment = 1;  // bytes known to divide the base pointer
  std::vector<Expr> shape, strides, offsets;
  std::vector<int> dims;
  std::vector<int> checked;  // global dims with a bounds predicate
};

// The address maps of the tensor-defining instructions, as the pass and the emitter both
// track them: a global_view (no tile yet), a shared_tensor (at its planned offset, 0 before
// planning: every tensor is 128-aligned, more than any vector), a slice_shared of `src`.
GlobalAccess global_access(const Kernel& kernel, const GlobalViewInst& view);
SharedView root_view(const AllocateSharedInst& alloc);
SharedView slice_view(const SharedView& src, const SliceSharedInst& slice);
// A tile of `base` at `offsets`, tile dim k on global dim dims[k] (-1: none); `checked`
// nullopt checks every dim.
GlobalAccess tile_access(GlobalAccess base, std::vector<Expr> offsets, std::vector<int> dims,
                         const std::optional<std::vector<int>>& checked);

// The region dim that each dim of a `tile_rank`-dim tile index lands on, right-aligned:
// -1 where the region has no such dim or has extent 1 there (broadcast: index 0).
std::vector<int> region_dims(int tile_rank, const std::vector<Expr>& extents);
// A copy region as a view of `tile_rank` dims: offsets moved by the region's, dims from
// region_dims (-1: fixed at the offset).
SharedView region_view(SharedView base, const CopyRegion& r, int tile_rank);
GlobalAccess region_access(GlobalAccess base, const CopyRegion& r, int tile_rank);

// Address maps of a tile index (one IR expression per tile dim), shared by both emitters:
// the global index of a tile element, its element offset from the tensor's base pointer and
// its in-bounds predicate (the `checked` dims only; true when none), and the element offset
// of a shared view's element from its root's base.
std::vector<Expr> global_index(const GlobalAccess& g, const std::vector<Expr>& tile);
Expr global_offset(const GlobalAccess& g, const std::vector<Expr>& tile);
Expr global_predicate(const GlobalAccess& g, const std::vector<Expr>& tile);
Expr shared_offset(const SharedView& s, const std::vector<Expr>& tile);

// Bytes known to divide a pointer: the specialization facts of a pointer parameter.
int64_t pointer_alignment(const Kernel& kernel, const Expr& ptr);

// The largest vector (in elements, a power of two, at most 16 bytes, dividing `run`) that
// stays contiguous and aligned along tile dim `dim` for every vector start that is a
// multiple of itself; 1 when none is. For global accesses a checked dim must also be
// all-in or all-out across a vector.
int64_t global_vector_width(const BoundContext& ctx, const GlobalAccess& g, int dim, int64_t run);
int64_t shared_vector_width(const BoundContext& ctx, const SharedView& s, int dim, int64_t run);

// The run of consecutive slots that are consecutive elements of one tile dim: the
// innermost local mode, when it is also the minor-most mode of its dim.
struct Contiguity {
  int dim = -1;     // tile dim, -1 when slots are not contiguous
  int64_t run = 1;  // slots per run
};
Contiguity contiguity(const RegisterLayout& l);

// ldmatrix / stmatrix fragments: in each group of 2N slots (N = 4, 2, 1 matrices) lane l of
// every warp holds, in slots 2j and 2j + 1, the elements (l / 4, 2 (l % 4) + {0, 1}) of 8x8
// matrix j (`trans`: the transposed position), with the matrix's row start on a multiple of
// 8 along the contiguous dim `cdim`. Checked for every thread and slot of a 2-D layout over
// `threads` threads; nullopt when some slot does not fit.
struct MatrixGroup {
  int64_t slot = 0, n = 1;
  bool trans = false;
};
std::optional<std::vector<MatrixGroup>> match_matrix_fragments(const RegisterLayout& l, int cdim, int64_t threads);

// How ldmatrix (load) / stmatrix (store) moves register tensor `reg` from / to the 2-D
// shared view `view`, for a thread scope of `threads` threads starting at thread `begin`:
// 16-bit data, fragments that match, 16-byte aligned rows along the contiguous dim `cdim`,
// and sm_80+ (ldmatrix) / sm_90+ (stmatrix). nullopt when any of it fails.
struct MatrixPlan {
  int cdim = 1;
  std::vector<MatrixGroup> groups;
};
std::optional<MatrixPlan> plan_matrix_copy(const BoundContext& ctx, int sm, const SharedView& view,
                                           const Tensor& reg, int64_t threads, int64_t begin, bool load);

}  // namespace tilus
