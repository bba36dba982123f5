// The tracer entries of Blackwell's instructions that define a tensor: tcgen05.alloc, slice (and
// indexing), view, load, and cluster launch control's query_response. The other tcgen05 and clc
// instructions are definition-driven (Builder::defined).
#include "../builder_util.h"

namespace tilus {

using namespace builder_detail;

Tensor Builder::tcgen05_alloc(DataType dtype, std::vector<int64_t> shape, int64_t cta_group, SourceLoc loc) {
  check_static_shape(shape, "tcgen05.alloc", loc);
  auto i = make_inst<Tcgen05AllocInst>(loc);
  i->out = Tensor::tmem("t", dtype, std::move(shape));
  i->cta_group = cta_group;
  return emit_with_output(i);
}

Tensor Builder::tcgen05_slice(const Tensor& t, std::vector<Expr> offsets, std::vector<int> dims,
                              std::vector<int64_t> shape, SourceLoc loc) {
  check_static_shape(shape, "tcgen05.slice", loc);
  for (auto& o : offsets) {
    check_index(o, "offsets", loc, "tcgen05.slice");
    o = simplify(o);
  }
  auto i = make_inst<Tcgen05SliceInst>(loc);
  i->src = t;
  i->offsets = std::move(offsets);
  i->dims = std::move(dims);
  i->out = Tensor::tmem(t.defined() ? t->name : "t", t.defined() ? t.dtype() : dtypes::void_t, std::move(shape));
  return emit_with_output(i);
}

Tensor Builder::tcgen05_index(const Tensor& t, std::vector<std::optional<Expr>> indices, SourceLoc loc) {
  if (!t.defined() || !t.is_tmem())
    throw CompileError(fmt::format("indexing: a tensor-memory tensor is indexed here, got {}", type_of(t)), loc);
  std::vector<int64_t> full = static_dims(t);
  if (indices.size() > full.size())
    throw CompileError(fmt::format("indexing: {} indices for {}", indices.size(), type_of(t)), loc);
  if (!indices.empty() && indices[0])
    throw CompileError(fmt::format("indexing {}: the lane dim (0) is kept whole (t[:, i, ...]); slice lanes with "
                                   "tcgen05.slice",
                                   type_of(t)),
                       loc);
  std::vector<Expr> offsets;
  std::vector<int> dims;
  std::vector<int64_t> shape;
  for (size_t d = 0; d < full.size(); ++d) {
    bool fixed = d < indices.size() && indices[d].has_value();
    offsets.push_back(fixed ? *indices[d] : int_const(0));
    if (!fixed) {
      dims.push_back(int(d));
      shape.push_back(full[d]);
    }
  }
  return tcgen05_slice(t, std::move(offsets), std::move(dims), std::move(shape), loc);
}

Tensor Builder::tcgen05_view(const Tensor& t, DataType dtype, std::vector<int64_t> shape, SourceLoc loc) {
  check_static_shape(shape, "tcgen05.view", loc);
  auto i = make_inst<Tcgen05ViewInst>(loc);
  i->src = t;
  i->out = Tensor::tmem(t.defined() ? t->name : "t", dtype, std::move(shape));
  return emit_with_output(i);
}

Tensor Builder::tcgen05_load(const Tensor& t, SourceLoc loc) {
  auto i = make_inst<Tcgen05LoadInst>(loc);
  i->src = t;
  i->out = Tensor::reg("r", t.defined() ? t.dtype() : dtypes::void_t,
                       t.defined() && t.is_tmem() ? static_dims(t) : std::vector<int64_t>{});
  return emit_with_output(i);
}

std::array<Var, 4> Builder::clc_query_response(const Tensor& response, SourceLoc loc) {
  auto i = make_inst<ClcQueryInst>(loc);
  i->response = response;
  i->is_canceled = Var("is_canceled", dtypes::boolean, VarRole::Local);
  i->x = Var("clc_x", dtypes::int32, VarRole::Local);
  i->y = Var("clc_y", dtypes::int32, VarRole::Local);
  i->z = Var("clc_z", dtypes::int32, VarRole::Local);
  emit(i);
  return {i->is_canceled, i->x, i->y, i->z};
}

}  // namespace tilus
