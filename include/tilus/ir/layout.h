// Layouts.
//
// A RegisterLayout maps (thread, local slot) to an index of a tile. It is stored as
// "modes": each tile dimension is factored into modes (major to minor); every mode is
// either spatial (indexed by a digit of the thread index) or local (a digit of the slot
// index). The thread index is the mixed-radix number formed by the spatial list (first =
// most significant), which may also hold replicated axes: thread digits that select no
// tile element, so that several threads hold the same element. The slot index is the
// mixed-radix number formed by the local list.
//
// The algebra:
//   local(2, 4)           each thread holds a 2x4 tile, row-major slots
//   column_local(2, 4)    the same with column-major slots
//   spatial(8, 4)         32 threads, one element each, row-major thread order
//   column_spatial(8, 4)  the same with column-major thread order
//   replicated(n)         rank 0: n threads that hold the same (empty) tile
//   a * b                 Kronecker composition: b is repeated in the pattern of a;
//                         thread = ta * threads(b) + tb, slot = sa * slots(b) + sb,
//                         index = ia * shape(b) + ib (ranks right-aligned, 1-padded)
//   a.divide(b)           c with c * b == a, when it exists
//   reshape, permute      a new tile shape / dimension order of the same mapping
//   reduce(dims)          the layout of a reduction's result: the reduced dims' local
//                         modes vanish and their spatial modes become replicated
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tilus/ir/expr.h"

namespace tilus {

class RegisterLayout {
 public:
  RegisterLayout() = default;
  // Raw constructor; validates the mode structure (InternalError on malformed input).
  //   shape:      tile shape
  //   mode_shape: modes of every dim, dims in order, each dim's modes major to minor;
  //               the product of a dim's modes equals its extent
  //   spatial:    mode indices or replicated axes (encoded as -extent), major to minor
  //   local:      mode indices, major to minor
  // Every mode appears exactly once in spatial or local.
  RegisterLayout(std::vector<int64_t> shape, std::vector<int64_t> mode_shape, std::vector<int> spatial,
                 std::vector<int> local);

  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& mode_shape() const { return mode_shape_; }
  const std::vector<int>& spatial_modes() const { return spatial_; }
  const std::vector<int>& local_modes() const { return local_; }
  // Which dim a mode belongs to.
  int mode_dim(int mode) const { return mode_dim_[mode]; }

  int64_t num_threads() const;
  int64_t local_size() const;
  int64_t num_elements() const;
  // True when some element is held by more than one thread.
  bool is_replicated() const;

  // The tile index held by `thread` in `slot` (thread < num_threads, slot < local_size).
  std::vector<int64_t> map(int64_t thread, int64_t slot) const;
  // Every (thread, slot) pair that holds `index`.
  std::vector<std::pair<int64_t, int64_t>> owners(const std::vector<int64_t>& index) const;
  // The tile index as expressions of a thread index expression for a given slot.
  std::vector<Expr> index_exprs(const Expr& thread, int64_t slot) const;

  // Algebra.
  RegisterLayout operator*(const RegisterLayout& inner) const;
  std::optional<RegisterLayout> divide(const RegisterLayout& inner) const;
  // nullopt when the new shape cannot be aligned with the mode boundaries.
  std::optional<RegisterLayout> reshape(const std::vector<int64_t>& shape) const;
  RegisterLayout permute(const std::vector<int>& dims) const;
  RegisterLayout reduce(const std::vector<int>& dims, bool keepdim) const;
  // Merges adjacent modes and drops unit modes; equal layouts have equal canonical forms.
  RegisterLayout canonical() const;

  // Same mapping (compares canonical forms).
  bool operator==(const RegisterLayout& o) const;
  bool operator!=(const RegisterLayout& o) const { return !(*this == o); }
  bool defined() const { return defined_; }

  // "layout(shape=[16, 8], modes=[2, 8, 4, 2], spatial=[1, 2], local=[0, 3])"
  std::string str() const;

 private:
  bool defined_ = false;
  std::vector<int64_t> shape_;
  std::vector<int64_t> mode_shape_;
  std::vector<int> mode_dim_;
  std::vector<int> spatial_;
  std::vector<int> local_;
};

RegisterLayout local(const std::vector<int64_t>& shape);
RegisterLayout column_local(const std::vector<int64_t>& shape);
RegisterLayout spatial(const std::vector<int64_t>& shape);
RegisterLayout column_spatial(const std::vector<int64_t>& shape);
RegisterLayout replicated(int64_t num_threads);

// An XOR swizzle of element offsets in the style of CUTLASS's Swizzle<B, M, S>:
//   offset ^ ((offset >> shift) & (((1 << bits) - 1) << base))
// With 16-byte units of 2-byte elements, bits=3, base=3, shift=3 is the 128-byte swizzle.
struct Swizzle {
  int bits = 0;
  int base = 0;
  int shift = 0;
  bool none() const { return bits == 0; }
  int64_t apply(int64_t offset) const;
  Expr apply(const Expr& offset) const;
  bool operator==(const Swizzle& o) const { return bits == o.bits && base == o.base && shift == o.shift; }
};

// A shared-memory layout: element offset = swizzle(sum(index[i] * strides[i])).
class SharedLayout {
 public:
  SharedLayout() = default;
  SharedLayout(std::vector<int64_t> shape, std::vector<int64_t> strides, Swizzle swizzle = {});
  static SharedLayout row_major(const std::vector<int64_t>& shape);
  static SharedLayout column_major(const std::vector<int64_t>& shape);
  // Row-major with the XOR swizzle that puts the 16-byte units of any 8 consecutive rows in
  // distinct bank groups: rows of 32, 64 or 128 bytes get TMA's 32B / 64B / 128B swizzle
  // (NVIDIA Tilus's shared_row_major_swizzle), longer rows XOR the units with the row index.
  // Plain row-major where none applies: elements that do not divide 16 bytes, rows under
  // 32 bytes or not a power of two, fewer than 8 rows, or a swizzle period the tile cannot fill.
  static SharedLayout row_major_swizzled(const std::vector<int64_t>& shape, int64_t elem_bytes);

  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  const Swizzle& swizzle() const { return swizzle_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  bool defined() const { return defined_; }
  // Elements of storage the layout spans (max offset + 1, rounded up to the swizzle period).
  int64_t storage_elements() const;
  int64_t offset(const std::vector<int64_t>& index) const;
  Expr offset(const std::vector<Expr>& index) const;
  // True when every index maps to a distinct offset.
  bool is_injective() const;
  // The layout of the sub-tensor that drops the leading `dims` dims (a slice).
  SharedLayout drop_leading(int dims) const;

  bool operator==(const SharedLayout& o) const;
  std::string str() const;

 private:
  bool defined_ = false;
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  Swizzle swizzle_;
};

}  // namespace tilus
