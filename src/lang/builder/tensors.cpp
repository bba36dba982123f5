// The tracer entries of the tensor instructions: views, allocations, scalars of tensors, shape
// changes, layout annotations.
#include "../builder_util.h"

namespace tilus {

using namespace builder_detail;

Tensor Builder::global_view(Expr ptr, DataType dtype, std::vector<Expr> shape, std::vector<Expr> strides, SourceLoc loc,
                            const std::string& name) {
  for (auto& d : shape) check_index(d, "shape dims", loc, "global_view");
  for (auto& d : strides) check_index(d, "strides", loc, "global_view");
  if (!strides.empty() && strides.size() != shape.size())
    throw CompileError(fmt::format("global_view: shape {} has {} dims but strides {} has {}", shape_str(shape),
                                   shape.size(), shape_str(strides), strides.size()),
                       loc);
  auto i = make_inst<GlobalViewInst>(loc);
  i->ptr = ptr;
  i->out = Tensor::global(name, dtype, std::move(shape), std::move(strides));
  if (ptr.defined() && ptr.dtype().is_pointer())  // the verifier reports anything else
    global_ptrs_[i->out.get()] = ptr.dtype().pointee() == dtype ? ptr : tilus::cast(ptr, dtype.pointer_to());
  return emit_with_output(i);
}

Expr Builder::inline_lets(Expr e) const {
  for (int round = 0; round < 64; ++round) {
    bool changed = false;
    e = substitute(e, [&](const Var& v) {
      auto it = let_values_.find(v.get());
      if (it == let_values_.end()) return Expr();
      changed = true;
      return it->second;
    });
    if (!changed) break;
  }
  return e;
}

Tensor Builder::global_tensor(DataType dtype, std::vector<Expr> shape, bool requires_clean, SourceLoc loc,
                              const std::string& name) {
  std::string what = fmt::format("global_tensor(dtype={}, shape={})", dtype.name(), shape_str(shape));
  if (dtype.is_void() || dtype.is_pointer())
    throw CompileError(fmt::format("{}: the elements must be a scalar type, not {}", what, dtype.name()), loc);
  if (shape.empty()) throw CompileError(fmt::format("{}: the shape needs at least one dim", what), loc);
  for (auto& d : shape) {
    check_index(d, "shape dims", loc, "global_tensor");
    // The runtime sizes the tensor from the arguments before the launch: lets are inlined.
    d = inline_lets(d);
    for (const Var& v : free_vars(d))
      if (v->role != VarRole::Param)
        throw CompileError(fmt::format("{}: the runtime allocates it before the launch, so its shape may use only "
                                       "the kernel's parameters and constants, but it uses '{}' ({})",
                                       what, v.name(),
                                       v->role == VarRole::Loop      ? "a loop variable"
                                       : v->role == VarRole::Builtin ? "a per-block or per-thread index"
                                                                     : "a variable of the body"),
                           loc);
    if (d.is_int_const() && d.int_value() < 0)
      throw CompileError(fmt::format("{}: dim {} is negative", what, d.int_value()), loc);
  }
  GlobalScratch g;
  g.ptr = Var(fmt::format("global_tensor_{}", kernel_.global_tensors.size()), dtype.pointer_to(), VarRole::Param);
  g.shape = shape;
  g.requires_clean = requires_clean;
  g.loc = loc;
  kernel_.global_tensors.push_back(g);
  return global_view(g.ptr, dtype, std::move(shape), {}, loc, name);
}

Expr Builder::item_ptr(const Tensor& t, std::vector<Expr> indices, SourceLoc loc) {
  bool shared = t.defined() && t.is_shared();
  auto it = global_ptrs_.find(t.get());
  if (!shared && (!t.defined() || !t.is_global() || it == global_ptrs_.end()))
    throw CompileError(fmt::format("item_ptr: only an element of a global tensor of this kernel or of a shared tensor "
                                   "has an address here, got {}",
                                   type_of(t)),
                       loc);
  // A shared tensor without indices: its first element.
  if (!(shared && indices.empty()) && indices.size() != size_t(t.rank()))
    throw CompileError(fmt::format("item_ptr: {} has {} dims but {} indices were given", t.type_str(), t.rank(),
                                   indices.size()),
                       loc);
  if (t.dtype().is_subbyte())
    throw CompileError(fmt::format("item_ptr: the elements of {} are packed below a byte and have no address of "
                                   "their own",
                                   t.type_str()),
                       loc);
  for (auto& i : indices) check_index(i, "indices", loc, "item_ptr");
  if (shared) {
    auto i = make_inst<SharedItemPtrInst>(loc);
    i->x = indices.empty() ? t : slice_shared(t, std::move(indices), {}, {}, loc);
    i->var = Var(t->name.empty() ? "ptr" : t->name + "_ptr", t.dtype().pointer_to(), VarRole::Local);
    emit(i);
    return i->var;
  }
  Expr offset = int_const(0, dtypes::int64);  // a global tensor always has its strides (Tensor::global)
  for (size_t d = 0; d < indices.size(); ++d)
    offset = offset + tilus::cast(indices[d], dtypes::int64) * tilus::cast(t->strides[d], dtypes::int64);
  offset = simplify(offset);
  return offset.is_int_const() && offset.int_value() == 0 ? it->second : it->second + offset;
}

Tensor Builder::shared_tensor(DataType dtype, std::vector<int64_t> shape, SourceLoc loc, const std::string& name) {
  check_static_shape(shape, "shared_tensor", loc);
  auto i = make_inst<AllocateSharedInst>(loc);
  i->out = Tensor::shared(name, dtype, std::move(shape));
  Tensor out = emit_with_output(i);
  whole_shared_.insert(out.get());
  return out;
}

Tensor Builder::reshape_shared(const Tensor& src, std::vector<int64_t> shape, SourceLoc loc) {
  if (!src.defined() || !src.is_shared())
    throw CompileError(fmt::format("reshape_shared: tensor must be a shared tensor, got {}", type_of(src)), loc);
  check_static_shape(shape, "reshape_shared", loc);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (n != src.num_elements())
    throw CompileError(fmt::format("reshape_shared: {} has {} elements, the shape {} has {}", src.type_str(),
                                   src.num_elements(), shape_str(shape), n),
                       loc);
  if (!whole_shared_.count(src.get()))
    throw CompileError(fmt::format("reshape_shared: {} is a slice or view of a shared tensor; only a shared_tensor "
                                   "allocation itself (or a reshape of one) can be reshaped",
                                   src.type_str()),
                       loc);
  auto i = make_inst<ReshapeSharedInst>(loc);
  i->src = src;
  i->out = Tensor::shared(src->name, src.dtype(), shape);
  Tensor out = emit_with_output(i);
  whole_shared_.insert(out.get());
  return out;
}

void Builder::free_shared(const Tensor& t, SourceLoc loc) {
  auto i = make_inst<FreeSharedInst>(loc);
  i->tensor = t;
  emit(i);
}

Tensor Builder::register_tensor(DataType dtype, std::vector<int64_t> shape, Expr init, SourceLoc loc,
                                const std::string& name) {
  check_static_shape(shape, "register_tensor", loc);
  auto i = make_inst<AllocateRegisterInst>(loc);
  i->out = Tensor::reg(name, dtype, shape);
  if (init.defined()) {
    if (!(init.dtype().is_numeric() || init.dtype().is_bool()))
      throw CompileError(fmt::format("register_tensor: init {} of type {} is not a number", to_string(init),
                                     init.dtype().name()),
                         loc);
    i->init = tilus::cast(init, dtype);
  }
  return emit_with_output(i);
}

Tensor Builder::register_tensor(DataType dtype, std::vector<int64_t> shape,
                                const std::function<Expr(const std::vector<Var>&)>& init, SourceLoc loc,
                                const std::string& name) {
  check_static_shape(shape, "register_tensor", loc);
  auto i = make_inst<AllocateRegisterInst>(loc);
  i->out = Tensor::reg(name, dtype, shape);
  for (size_t d = 0; d < shape.size(); ++d) i->axes.push_back(Var(fmt::format("i{}", d), dtypes::int32, VarRole::Binder));
  Expr v = init(i->axes);
  if (!v.defined() || !(v.dtype().is_numeric() || v.dtype().is_bool()))
    throw CompileError("register_tensor: the init function must return a number", loc);
  i->init = tilus::cast(v, dtype);
  return emit_with_output(i);
}

Tensor Builder::slice_shared(const Tensor& src, std::vector<Expr> offsets, std::vector<int> dims,
                             std::vector<int64_t> shape, SourceLoc loc) {
  auto i = make_inst<SliceSharedInst>(loc);
  i->src = src;
  i->offsets = std::move(offsets);
  i->dims = std::move(dims);
  DataType dt = src.defined() ? src.dtype() : dtypes::void_t;
  SharedLayout layout;
  if (src.defined() && src.is_shared() && src->shared_layout.defined()) {
    // Keep the strides of the kept dims.
    std::vector<int64_t> strides;
    for (int d : i->dims)
      if (d >= 0 && d < src.rank()) strides.push_back(src->shared_layout.strides()[d]);
    if (strides.size() == shape.size()) layout = SharedLayout(shape, strides, src->shared_layout.swizzle());
  }
  i->out = Tensor::shared(src.defined() ? src->name : "s", dt, shape, layout);
  return emit_with_output(i);
}

Tensor Builder::index_shared(const Tensor& src, std::vector<Expr> indices, SourceLoc loc) {
  if (!src.defined() || !src.is_shared())
    throw CompileError(fmt::format("indexing: only shared tensors can be indexed this way, got {}", type_of(src)), loc);
  if (indices.size() > size_t(src.rank()))
    throw CompileError(fmt::format("indexing: {} indices for {}", indices.size(), type_of(src)), loc);
  std::vector<int64_t> full = static_dims(src);
  if (full.size() != size_t(src.rank())) throw CompileError(fmt::format("indexing: {} has a dynamic shape", type_of(src)), loc);
  std::vector<Expr> offsets = indices;
  std::vector<int> dims;
  std::vector<int64_t> shape;
  for (int d = int(indices.size()); d < src.rank(); ++d) {
    offsets.push_back(int_const(0));
    dims.push_back(d);
    shape.push_back(full[d]);
  }
  for (auto& o : indices) check_index(o, "indices", loc, "indexing");
  return slice_shared(src, offsets, dims, shape, loc);
}

Var Builder::item(const Tensor& x, SourceLoc loc) {
  if (!x.defined() || !x.is_register() || x.num_elements() != 1)
    throw CompileError(fmt::format("item: a register tensor of one element has an item, got {}", type_of(x)), loc);
  auto i = make_inst<ItemInst>(loc);
  i->x = x;
  i->var = Var(x->name.empty() ? "item" : x->name + "_item", x.dtype(), VarRole::Local);
  emit(i);
  return i->var;
}

Tensor Builder::permute_shared(const Tensor& src, std::vector<int> dims, SourceLoc loc) {
  if (!src.defined() || !src.is_shared())
    throw CompileError(fmt::format("permute: only shared tensors are permuted this way, got {}", type_of(src)), loc);
  std::vector<int64_t> full = static_dims(src);
  std::vector<int> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 0; k < sorted.size(); ++k)
    if (sorted.size() != full.size() || sorted[k] != int(k))
      throw CompileError(fmt::format("permute: dims [{}] is not a permutation of the {} dims of {}",
                                     fmt::join(dims, ", "), full.size(), type_of(src)),
                         loc);
  std::vector<int64_t> shape;
  for (int d : dims) shape.push_back(full[size_t(d)]);
  return slice_shared(src, std::vector<Expr>(full.size(), int_const(0)), dims, shape, loc);
}

Tensor Builder::cast(const Tensor& x, DataType dtype, SourceLoc loc) {
  auto i = make_inst<CastInst>(loc);
  i->x = x;
  i->out = Tensor::reg("c", dtype, x.defined() && x.is_register() ? static_dims(x) : std::vector<int64_t>{});
  return emit_with_output(i);
}

Tensor Builder::view(const Tensor& x, std::optional<DataType> dtype, const RegisterLayout& layout, SourceLoc loc) {
  auto i = make_inst<ViewInst>(loc);
  i->x = x;
  DataType dt = dtype ? *dtype : (x.defined() ? x.dtype() : dtypes::void_t);
  std::vector<int64_t> shape;
  if (layout.defined()) {
    shape = layout.shape();
  } else if (x.defined() && x.is_register()) {
    shape = static_dims(x);
    // Reinterpreting as a narrower/wider dtype scales the last dim.
    if (!shape.empty() && dt.bits() > 0 && x.dtype().bits() != dt.bits()) {
      int64_t bits = shape.back() * x.dtype().bits();
      shape.back() = bits % dt.bits() == 0 ? bits / dt.bits() : -1;
    }
  }
  for (auto d : shape)
    if (d <= 0)
      throw CompileError(fmt::format("view: cannot view {} as {}: the last dim holds {} bits, not a multiple of {}",
                                     type_of(x), dt.name(), x.defined() && !static_dims(x).empty() ? static_dims(x).back() * x.dtype().bits() : 0,
                                     dt.bits()),
                         loc);
  i->out = Tensor::reg("v", dt, shape, layout);
  return emit_with_output(i);
}

Tensor Builder::reshape(const Tensor& x, std::vector<int64_t> shape, SourceLoc loc) {
  // One -1 is inferred from the element count.
  int inferred = -1;
  int64_t known = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1 && inferred < 0) inferred = int(d);
    else known *= shape[d];
  }
  if (inferred >= 0 && x.defined() && x.is_register() && known > 0 && x.num_elements() % known == 0)
    shape[inferred] = x.num_elements() / known;
  for (auto d : shape)
    if (d <= 0) throw CompileError(fmt::format("reshape: cannot reshape {} to {}", type_of(x), shape_str(shape)), loc);
  auto i = make_inst<ReshapeInst>(loc);
  i->x = x;
  i->out = Tensor::reg("rs", x.defined() ? x.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

Tensor Builder::squeeze(const Tensor& x, std::vector<int> dims, SourceLoc loc) {
  auto i = make_inst<SqueezeInst>(loc);
  i->x = x;
  int r = x.defined() ? x.rank() : 0;
  dims = normalize_dims(dims, x, "squeeze", loc);
  i->dims = dims;
  std::vector<int64_t> shape;
  if (x.defined() && x.is_register()) {
    auto s = static_dims(x);
    for (int d = 0; d < r; ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) shape.push_back(s[d]);
  }
  i->out = Tensor::reg("sq", x.defined() ? x.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

Tensor Builder::unsqueeze(const Tensor& x, std::vector<int> dims, SourceLoc loc) {
  auto i = make_inst<UnsqueezeInst>(loc);
  i->x = x;
  int out_rank = (x.defined() ? x.rank() : 0) + int(dims.size());
  for (int& d : dims) d = normalize_dim(d, out_rank);
  i->dims = dims;
  std::vector<int64_t> shape;
  if (x.defined() && x.is_register()) {
    auto s = static_dims(x);
    size_t k = 0;
    for (int d = 0; d < out_rank; ++d) {
      if (std::find(dims.begin(), dims.end(), d) != dims.end()) shape.push_back(1);
      else if (k < s.size()) shape.push_back(s[k++]);
    }
  }
  i->out = Tensor::reg("us", x.defined() ? x.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

Tensor Builder::transpose(const Tensor& x, SourceLoc loc) {
  auto i = make_inst<TransposeInst>(loc);
  i->x = x;
  std::vector<int64_t> shape;
  if (x.defined() && x.is_register() && static_dims(x).size() == 2) shape = {static_dims(x)[1], static_dims(x)[0]};
  i->out = Tensor::reg("tr", x.defined() ? x.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

Tensor Builder::repeat(const Tensor& x, std::vector<int64_t> repeats, SourceLoc loc) {
  auto i = make_inst<RepeatInst>(loc);
  i->x = x;
  i->repeats = repeats;
  std::vector<int64_t> shape;
  if (x.defined() && x.is_register()) {
    auto s = static_dims(x);
    size_t rank = std::max(s.size(), repeats.size());
    shape.assign(rank, 1);
    for (size_t d = 0; d < rank; ++d) {
      int64_t sd = d + s.size() >= rank ? s[d + s.size() - rank] : 1;
      int64_t rd = d + repeats.size() >= rank ? repeats[d + repeats.size() - rank] : 1;
      shape[d] = sd * std::max<int64_t>(rd, 1);
    }
  }
  i->out = Tensor::reg("rp", x.defined() ? x.dtype() : dtypes::void_t, shape);
  return emit_with_output(i);
}

void Builder::assign_tensor(const Tensor& dst, const Tensor& src, SourceLoc loc) {
  emit(dst_src_inst<AssignInst>(dst, src, std::move(loc)));
}

void Builder::annotate_layout(const Tensor& t, const RegisterLayout& layout, SourceLoc loc) {
  auto i = make_inst<AnnotateLayoutInst>(loc);
  i->tensor = t;
  i->layout = layout;
  emit(i);
}

void Builder::annotate_shared_layout(const Tensor& t, const SharedLayout& layout, SourceLoc loc) {
  auto i = make_inst<AnnotateLayoutInst>(loc);
  i->tensor = t;
  i->shared_layout = layout;
  emit(i);
}

}  // namespace tilus
