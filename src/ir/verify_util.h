// The verifier's shared helpers: formatting of operands in messages and the operand rules many
// instructions share. Internal to src/ir (the verifier and the instruction families' hooks in
// src/ir/insts/).
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <string>
#include <vector>

#include "tilus/ir/error.h"
#include "tilus/ir/inst.h"
#include "tilus/ir/inst_def.h"
#include "tilus/ir/stmt.h"

namespace tilus::verify_detail {

std::string inst_name(const InstNode& inst);
std::string ty(const Tensor& t);
std::string expr_str(const Expr& e);
std::string exprs_str(const std::vector<Expr>& es);
std::string ints_str(const std::vector<int>& v);
std::string ints_str(const std::vector<int64_t>& v);
std::string dtype_str(const Expr& e);
const char* role_str(VarRole r);
[[noreturn]] void fail(const InstNode& inst, const std::string& what);

// The static shape of a tensor; nullopt when a dim is undefined or not a constant.
std::optional<std::vector<int64_t>> static_dims(const Tensor& t);
// The shape of a tensor that the checks before made sure is static.
std::vector<int64_t> dims_of(const Tensor& t);
int64_t product(const std::vector<int64_t>& v);
bool is_integer_expr(const Expr& e);
bool same_shape_expr(const Expr& a, const Expr& b);
bool is_pow2(int64_t v);

// Rule 1 (every instruction): each tensor it defines or uses is defined and of an allowed scope.
void expect_traits(const InstNode& inst);
void expect_same_dtype(const InstNode& inst, const char* role_a, const Tensor& a, const char* role_b, const Tensor& b);
void expect_same_shape(const InstNode& inst, const char* role_a, const Tensor& a, const char* role_b, const Tensor& b);
// Rule 2: one integer offset per dim of `t`.
void expect_offsets(const InstNode& inst, const std::vector<Expr>& offsets, const char* role, const Tensor& t);
// Rule 3: dims maps the tile's dims onto distinct dims of the target tensor.
void expect_dims(const InstNode& inst, const std::vector<int>& dims, const char* tile_role, const Tensor& tile,
                 const char* target_role, const Tensor& target);
void expect_dim_set(const InstNode& inst, const std::vector<int>& dims, int rank, const std::string& of);
// An mbarrier operand: one uint64 element in shared memory.
void check_barrier(const InstNode& i, const Tensor& b);

// The verifier hook of a typed instruction's check function.
template <class T>
std::function<void(const InstNode&)> hook(void (*check)(const T&)) {
  return [check](const InstNode& i) { check(static_cast<const T&>(i)); };
}

}  // namespace tilus::verify_detail
