// Tensors: the values of the tile IR.
//   Global:   dtype, dynamic shape and strides (elements), living in global memory.
//   Shared:   dtype, static shape, shared layout (strides + optional swizzle).
//   Register: dtype, static shape, register layout (set by annotation or layout inference).
//   Tensor memory (Blackwell): dtype, static shape [lanes, columns...]: dim 0 runs over the
//            block's tensor-memory lanes, the others over its 32-bit columns (row-major for an
//            allocation; a slice or view keeps its source's strides, KernelFacts::tmem).
// A tensor's identity is its node; passes that change a tensor's layout make a new node
// and remap the uses (StmtMutator does the remapping).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tilus/ir/dtype.h"
#include "tilus/ir/expr.h"
#include "tilus/ir/layout.h"

namespace tilus {

enum class MemoryScope : uint8_t { Global, Shared, Register, TensorMemory };
const char* to_string(MemoryScope s);

struct TensorNode {
  std::string name;  // a hint for the printer
  MemoryScope scope;
  DataType dtype;
  std::vector<Expr> shape;        // static int32 constants for shared and register tensors
  std::vector<Expr> strides;      // global tensors only, in elements
  RegisterLayout layout;          // register tensors (may be undefined before inference)
  SharedLayout shared_layout;     // shared tensors
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<const TensorNode> n) : node_(std::move(n)) {}

  static Tensor global(std::string name, DataType dtype, std::vector<Expr> shape, std::vector<Expr> strides = {});
  static Tensor shared(std::string name, DataType dtype, std::vector<int64_t> shape, SharedLayout layout = {});
  static Tensor reg(std::string name, DataType dtype, std::vector<int64_t> shape, RegisterLayout layout = {});
  static Tensor tmem(std::string name, DataType dtype, std::vector<int64_t> shape);

  bool defined() const { return node_ != nullptr; }
  const TensorNode* get() const { return node_.get(); }
  const TensorNode* operator->() const { return node_.get(); }
  bool same_as(const Tensor& o) const { return node_ == o.node_; }

  MemoryScope scope() const { return node_->scope; }
  bool is_global() const { return scope() == MemoryScope::Global; }
  bool is_shared() const { return scope() == MemoryScope::Shared; }
  bool is_register() const { return scope() == MemoryScope::Register; }
  bool is_tmem() const { return scope() == MemoryScope::TensorMemory; }
  DataType dtype() const { return node_->dtype; }
  int rank() const { return static_cast<int>(node_->shape.size()); }
  const std::vector<Expr>& shape() const { return node_->shape; }
  // The static shape (InternalError for a dynamic dim).
  std::vector<int64_t> static_shape() const;
  int64_t num_elements() const;  // static tensors only

  // Copies with one field changed (a new identity).
  Tensor with_layout(const RegisterLayout& layout) const;
  Tensor with_shared_layout(const SharedLayout& layout) const;

  // "register float32[64, 64]", "shared float16[2, 64, 32]", "global float16[m, k]",
  // "tmem float32[128, 256]"
  std::string type_str() const;

 private:
  std::shared_ptr<const TensorNode> node_;
};

struct TensorPtrHash {
  size_t operator()(const Tensor& t) const { return std::hash<const void*>()(t.get()); }
};
struct TensorPtrEqual {
  bool operator()(const Tensor& a, const Tensor& b) const { return a.same_as(b); }
};

// numpy broadcasting of static shapes (right-aligned, 1 broadcasts); nullopt when the
// shapes are incompatible.
std::optional<std::vector<int64_t>> broadcast_shapes(const std::vector<std::vector<int64_t>>& shapes);

// "[64, 32]"
std::string shape_str(const std::vector<int64_t>& shape);
std::string shape_str(const std::vector<Expr>& shape);

}  // namespace tilus
