#include "tilus/ir/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "tilus/ir/error.h"

namespace tilus {

const char* to_string(MemoryScope s) {
  switch (s) {
    case MemoryScope::Global: return "global";
    case MemoryScope::Shared: return "shared";
    case MemoryScope::Register: return "register";
    case MemoryScope::TensorMemory: return "tmem";
  }
  return "?";
}

namespace {
std::vector<Expr> const_shape(const std::vector<int64_t>& shape) {
  std::vector<Expr> out;
  for (int64_t d : shape) out.push_back(int_const(d));
  return out;
}

std::shared_ptr<TensorNode> new_node(std::string name, MemoryScope scope, DataType dtype) {
  auto n = std::make_shared<TensorNode>();
  n->name = std::move(name);
  n->scope = scope;
  n->dtype = dtype;
  return n;
}
}  // namespace

Tensor Tensor::global(std::string name, DataType dtype, std::vector<Expr> shape, std::vector<Expr> strides) {
  auto n = new_node(std::move(name), MemoryScope::Global, dtype);
  if (strides.empty() && !shape.empty()) {
    strides.resize(shape.size());
    Expr s = int_const(1);
    for (int i = int(shape.size()) - 1; i >= 0; --i) {
      strides[i] = s;
      s = (i == int(shape.size()) - 1 && s.is_int_const(1)) ? shape[i] : s * shape[i];
    }
  }
  n->shape = std::move(shape);
  n->strides = std::move(strides);
  return Tensor(n);
}

Tensor Tensor::shared(std::string name, DataType dtype, std::vector<int64_t> shape, SharedLayout layout) {
  auto n = new_node(std::move(name), MemoryScope::Shared, dtype);
  n->shape = const_shape(shape);
  n->shared_layout = layout.defined() ? std::move(layout) : SharedLayout::row_major(shape);
  return Tensor(n);
}

Tensor Tensor::reg(std::string name, DataType dtype, std::vector<int64_t> shape, RegisterLayout layout) {
  auto n = new_node(std::move(name), MemoryScope::Register, dtype);
  n->shape = const_shape(shape);
  n->layout = std::move(layout);
  return Tensor(n);
}

Tensor Tensor::tmem(std::string name, DataType dtype, std::vector<int64_t> shape) {
  auto n = std::make_shared<TensorNode>();
  n->name = std::move(name);
  n->scope = MemoryScope::TensorMemory;
  n->dtype = dtype;
  n->shape = const_shape(shape);
  return Tensor(n);
}

std::vector<int64_t> Tensor::static_shape() const {
  std::vector<int64_t> out;
  for (auto& d : node_->shape) {
    if (!d.is_int_const()) throw InternalError(fmt::format("tensor {} has a dynamic shape {}", node_->name, shape_str(node_->shape)));
    out.push_back(d.int_value());
  }
  return out;
}

int64_t Tensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : static_shape()) n *= d;
  return n;
}

Tensor Tensor::with_layout(const RegisterLayout& layout) const {
  auto n = std::make_shared<TensorNode>(*node_);
  n->layout = layout;
  return Tensor(n);
}

Tensor Tensor::with_shared_layout(const SharedLayout& layout) const {
  auto n = std::make_shared<TensorNode>(*node_);
  n->shared_layout = layout;
  return Tensor(n);
}

std::string Tensor::type_str() const {
  return fmt::format("{} {}{}", to_string(scope()), dtype().name(), shape_str(shape()));
}

std::optional<std::vector<int64_t>> broadcast_shapes(const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      size_t d = rank - s.size() + i;
      if (s[i] == 1) continue;
      if (out[d] == 1) out[d] = s[i];
      else if (out[d] != s[i]) return std::nullopt;
    }
  }
  return out;
}

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string shape_str(const std::vector<Expr>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + to_string(shape[i]);
  return s + "]";
}

}  // namespace tilus
