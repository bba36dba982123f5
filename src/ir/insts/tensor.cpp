// The tensor instructions: views, allocations, scalars of tensors, layout annotations.
// Each instruction's definition (inst_def.h): name, group, emitters' family, traits, attributes
// and its verifier hook, the check below.
#include "../verify_util.h"

namespace tilus {

namespace {
using namespace verify_detail;

void check_global_view(const GlobalViewInst& i) {
  if (!i.ptr.defined()) fail(i, fmt::format("ptr must be a pointer expression, got none (for out {})", ty(i.out)));
  DataType pt = i.ptr.dtype();
  if (!pt.is_pointer())
    fail(i, fmt::format("ptr must be a pointer expression, got {} of type {} (for out {})", expr_str(i.ptr), pt.name(),
                        ty(i.out)));
  DataType pointee = pt.pointee();
  if (pointee != i.out.dtype() && !pointee.is_void())
    fail(i, fmt::format("ptr {} has type {}, which points to {}, but the view out is {}: the dtype must be the "
                        "pointee's ({}) unless the pointer is void*",
                        expr_str(i.ptr), pt.name(), pointee.name(), ty(i.out), pointee.name()));
  const std::vector<Expr>& shape = i.out.shape();
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d].is_int_const() && shape[d].int_value() < 0)
      fail(i, fmt::format("shape {} has the negative extent {} in dim {} (out {}): a view's extents are at least 0",
                          exprs_str(shape), shape[d].int_value(), d, ty(i.out)));
}

void check_allocate_register(const AllocateRegisterInst& i) {
  if (!i.axes.empty() && i.axes.size() != size_t(i.out.rank()))
    fail(i, fmt::format("the init function binds {} axes but out {} has rank {}", i.axes.size(), ty(i.out),
                        i.out.rank()));
  for (auto& a : i.axes)
    if (!a.defined() || !a.dtype().is_integer())
      fail(i, fmt::format("the axes of out {} must be integer variables, got {} of type {}", ty(i.out), expr_str(a),
                          dtype_str(a)));
  if (i.init.defined()) {
    DataType t = i.init.dtype();
    if (!(t.is_numeric() || t.is_bool()))
      fail(i, fmt::format("init must be a number or bool, got {} of type {} (for out {})", expr_str(i.init), t.name(),
                          ty(i.out)));
    if (t != i.out.dtype())
      fail(i, fmt::format("init {} has type {} but out is {}: the init must have the out's dtype", expr_str(i.init),
                          t.name(), ty(i.out)));
  }
}

void check_slice_shared(const SliceSharedInst& i) {
  expect_offsets(i, i.offsets, "src", i.src);
  expect_dims(i, i.dims, "out", i.out, "src", i.src);
  expect_same_dtype(i, "src", i.src, "out", i.out);
  auto src = dims_of(i.src), out = dims_of(i.out);
  for (size_t k = 0; k < i.dims.size(); ++k)
    if (out[k] > src[i.dims[k]])
      fail(i, fmt::format("out is {} and src is {}: out dim {} ({}) is larger than src dim {} ({})", ty(i.out),
                          ty(i.src), k, out[k], i.dims[k], src[i.dims[k]]));
  // Constant offsets must keep the slice inside src.
  for (int d = 0; d < i.src.rank(); ++d) {
    if (!i.offsets[d].is_int_const()) continue;
    int64_t o = i.offsets[d].int_value();
    auto it = std::find(i.dims.begin(), i.dims.end(), d);
    int64_t extent = it == i.dims.end() ? 1 : out[it - i.dims.begin()];
    if (o < 0 || o + extent > src[d])
      fail(i, fmt::format("offsets {}: dim {} takes [{}, {}), outside src {} (out {})", exprs_str(i.offsets), d, o,
                          o + extent, ty(i.src), ty(i.out)));
  }
}

void check_reshape_shared(const ReshapeSharedInst& i) {
  expect_same_dtype(i, "src", i.src, "out", i.out);
  if (i.src.defined() && i.out.defined() && i.src.num_elements() != i.out.num_elements())
    fail(i, fmt::format("out is {} and src is {}: a reshape keeps the number of elements ({} != {})", ty(i.out),
                        ty(i.src), i.out.num_elements(), i.src.num_elements()));
}

void check_item(const ItemInst& i) {
  if (!i.x.defined() || !i.x.is_register() || i.x.num_elements() != 1)
    fail(i, fmt::format("x must be a register tensor of one element, got {}", ty(i.x)));
  if (i.x.dtype().is_subbyte()) fail(i, fmt::format("x is {}: cast it to a byte-sized type first", ty(i.x)));
  if (!i.var.defined() || i.var.dtype() != i.x.dtype() || i.var->role != VarRole::Local)
    fail(i, "var must be a local scalar of x's dtype");
}

void check_shared_item_ptr(const SharedItemPtrInst& i) {
  if (!i.x.defined() || !i.x.is_shared()) fail(i, fmt::format("x must be a shared tensor, got {}", ty(i.x)));
  if (i.x.dtype().is_subbyte())
    fail(i, fmt::format("x is {}: its elements are packed below a byte and have no address of their own", ty(i.x)));
  if (!i.var.defined() || i.var.dtype() != i.x.dtype().pointer_to() || i.var->role != VarRole::Local)
    fail(i, "var must be a local scalar pointing to x's dtype");
}

void check_assign(const AssignInst& i) {
  expect_same_dtype(i, "dst", i.dst, "src", i.src);
  expect_same_shape(i, "dst", i.dst, "src", i.src);
}

void check_annotate_layout(const AnnotateLayoutInst& i) {
  const Tensor& t = i.tensor;
  if (t.is_register()) {
    if (!i.layout.defined() || i.shared_layout.defined())
      fail(i, fmt::format("a register tensor takes a register layout, got {} with {}", ty(t),
                          i.shared_layout.defined() ? "a shared layout " + i.shared_layout.str() : "no layout"));
    if (i.layout.shape() != dims_of(t))
      fail(i, fmt::format("layout {} has shape {} but tensor is {}", i.layout.str(), ints_str(i.layout.shape()), ty(t)));
  } else {
    if (!i.shared_layout.defined() || i.layout.defined())
      fail(i, fmt::format("a shared tensor takes a shared layout, got {} with {}", ty(t),
                          i.layout.defined() ? "a register layout " + i.layout.str() : "no layout"));
    if (i.shared_layout.shape() != dims_of(t))
      fail(i, fmt::format("shared layout {} has shape {} but tensor is {}", i.shared_layout.str(),
                          ints_str(i.shared_layout.shape()), ty(t)));
  }
}

}  // namespace

void insts::add_tensor(std::vector<InstDef>& d) {
  using verify_detail::hook;
  d.push_back({.name = "global_view", .kind = InstKind::GlobalView,
               .summary = "a pointer parameter viewed as a global tensor", .verify = hook(check_global_view)});
  d.push_back({.name = "shared_tensor", .kind = InstKind::AllocateShared, .summary = "a shared tensor of static shape",
               .attrs = {{"offset", AttrType::Int, "-1"}}});
  d.push_back({.name = "free_shared", .kind = InstKind::FreeShared, .summary = "ends a shared tensor's lifetime"});
  d.push_back({.name = "register_tensor", .kind = InstKind::AllocateRegister,
               .summary = "a register tensor, optionally initialized", .verify = hook(check_allocate_register)});
  d.push_back({.name = "slice_shared", .kind = InstKind::SliceShared,
               .summary = "a sub-tensor view of a shared tensor (sa[i])", .attrs = {{"dims", AttrType::String, ""}},
               .verify = hook(check_slice_shared)});
  d.push_back({.name = "reshape_shared", .kind = InstKind::ReshapeShared,
               .summary = "a shared allocation under another shape", .verify = hook(check_reshape_shared)});
  d.push_back({.name = "item", .kind = InstKind::Item, .emit = EmitFamily::Builtin,
               .summary = "the one element of a register tensor as a scalar", .verify = hook(check_item)});
  d.push_back({.name = "item_ptr", .kind = InstKind::SharedItemPtr, .emit = EmitFamily::Builtin,
               .summary = "the generic address of a shared tensor's element", .verify = hook(check_shared_item_ptr)});
  d.push_back({.name = "assign", .kind = InstKind::Assign, .summary = "dst = src (register tensors)",
               .verify = hook(check_assign)});
  d.push_back({.name = "annotate_layout", .kind = InstKind::AnnotateLayout, .emit = EmitFamily::Hint,
               .summary = "fixes a tensor's layout for layout inference", .verify = hook(check_annotate_layout)});

}

}  // namespace tilus
