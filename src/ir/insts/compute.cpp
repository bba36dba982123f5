// The register-tile computations: dot, casts and views, shape changes, elementwise and reductions.
// Each instruction's definition (inst_def.h): name, group, emitters' family, traits, attributes
// and its verifier hook, the check below.
#include "../verify_util.h"

namespace tilus {

namespace {
using namespace verify_detail;

void check_dot(const DotInst& i) {
  int r = i.a.rank();
  if (r != 2 && r != 3)
    fail(i, fmt::format("a must have rank 2 ([m, k]) or 3 ([batch, m, k]), got {}", ty(i.a)));
  for (auto [role, t] : {std::pair<const char*, const Tensor*>{"b", &i.b}, {"c", &i.c}, {"out", &i.out}})
    if (t->rank() != r)
      fail(i, fmt::format("a is {} and {} is {}: the ranks differ ({} vs {})", ty(i.a), role, ty(*t), r, t->rank()));
  auto a = dims_of(i.a), b = dims_of(i.b), c = dims_of(i.c), out = dims_of(i.out);
  int o = r - 2;  // the first matrix dim
  if (r == 3 && (a[0] != b[0] || a[0] != c[0]))
    fail(i, fmt::format("a is {}, b is {} and c is {}: the batch dims differ", ty(i.a), ty(i.b), ty(i.c)));
  int64_t m = a[o], k = a[o + 1], n = b[o + 1];
  if (b[o] != k)
    fail(i, fmt::format("a is {} and b is {}: the inner dims differ ({} vs {})", ty(i.a), ty(i.b), k, b[o]));
  if (c[o] != m || c[o + 1] != n)
    fail(i, fmt::format("a is {} and b is {}, so c must be [{}, {}], got {}", ty(i.a), ty(i.b), m, n, ty(i.c)));
  if (out != c) fail(i, fmt::format("c is {} but out is {}: the shapes differ", ty(i.c), ty(i.out)));
  DataType ab = i.a.dtype(), ct = i.c.dtype();
  if (ab != i.b.dtype())
    fail(i, fmt::format("a is {} and b is {}: a and b must have one dtype ({} vs {})", ty(i.a), ty(i.b), ab.name(),
                        i.b.dtype().name()));
  if (!ab.is_numeric())
    fail(i, fmt::format("a and b must be numeric, got a {} and b {}", ty(i.a), ty(i.b)));
  if (!ct.is_numeric()) fail(i, fmt::format("the accumulator c must be numeric, got {}", ty(i.c)));
  if (ab.is_float() && !ct.is_float())
    fail(i, fmt::format("a is {} and b is {}: float operands need a float accumulator, got c {}", ty(i.a), ty(i.b),
                        ty(i.c)));
  if (ab.is_integer() && !ct.is_integer())
    fail(i, fmt::format("a is {} and b is {}: integer operands need an integer accumulator, got c {}", ty(i.a), ty(i.b),
                        ty(i.c)));
  if (i.out.dtype() != ct)
    fail(i, fmt::format("c is {} but out is {}: out must have c's dtype ({} vs {})", ty(i.c), ty(i.out), ct.name(),
                        i.out.dtype().name()));
}

void check_cast(const CastInst& i) {
  expect_same_shape(i, "x", i.x, "out", i.out);
  for (auto* t : {&i.x, &i.out})
    if (!(t->dtype().is_numeric() || t->dtype().is_bool()))
      fail(i, fmt::format("cannot cast {} to {}: casts convert numbers and bools ({} is neither)", ty(i.x), ty(i.out),
                          t->dtype().name()));
}

void check_view(const ViewInst& i) {
  int64_t xbits = product(dims_of(i.x)) * i.x.dtype().bits();
  int64_t obits = product(dims_of(i.out)) * i.out.dtype().bits();
  if (xbits != obits)
    fail(i, fmt::format("cannot view {} ({} bits) as {} ({} bits): the total bits differ", ty(i.x), xbits, ty(i.out),
                        obits));
  const RegisterLayout& xl = i.x->layout;
  const RegisterLayout& ol = i.out->layout;
  if (xl.defined() && ol.defined()) {
    if (xl.num_threads() != ol.num_threads())
      fail(i, fmt::format("cannot view {} as {}: the layouts span {} vs {} threads", ty(i.x), ty(i.out),
                          xl.num_threads(), ol.num_threads()));
    int64_t xt = xl.local_size() * i.x.dtype().bits();
    int64_t ot = ol.local_size() * i.out.dtype().bits();
    if (xt != ot)
      fail(i, fmt::format("cannot view {} as {}: each thread holds {} bits of x but {} bits of out", ty(i.x), ty(i.out),
                          xt, ot));
  }
}

void check_reshape(const ReshapeInst& i) {
  expect_same_dtype(i, "x", i.x, "out", i.out);
  int64_t a = product(dims_of(i.x)), b = product(dims_of(i.out));
  if (a != b)
    fail(i, fmt::format("cannot reshape {} ({} elements) to {} ({} elements)", ty(i.x), a, ty(i.out), b));
}

void check_squeeze(const SqueezeInst& i) {
  expect_same_dtype(i, "x", i.x, "out", i.out);
  expect_dim_set(i, i.dims, i.x.rank(), "x " + ty(i.x));
  auto x = dims_of(i.x);
  std::vector<int64_t> expect;
  for (int d = 0; d < i.x.rank(); ++d) {
    bool squeezed = std::find(i.dims.begin(), i.dims.end(), d) != i.dims.end();
    if (squeezed && x[d] != 1)
      fail(i, fmt::format("dims {}: dim {} of x {} has extent {}, not 1", ints_str(i.dims), d, ty(i.x), x[d]));
    if (!squeezed) expect.push_back(x[d]);
  }
  if (dims_of(i.out) != expect)
    fail(i, fmt::format("squeezing dims {} of x {} gives {}, but out is {}", ints_str(i.dims), ty(i.x), ints_str(expect),
                        ty(i.out)));
}

void check_unsqueeze(const UnsqueezeInst& i) {
  expect_same_dtype(i, "x", i.x, "out", i.out);
  int out_rank = i.x.rank() + int(i.dims.size());
  expect_dim_set(i, i.dims, out_rank, fmt::format("the output of unsqueezing x {}", ty(i.x)));
  auto x = dims_of(i.x);
  std::vector<int64_t> expect;
  size_t k = 0;
  for (int d = 0; d < out_rank; ++d) {
    if (std::find(i.dims.begin(), i.dims.end(), d) != i.dims.end()) expect.push_back(1);
    else expect.push_back(x[k++]);
  }
  if (dims_of(i.out) != expect)
    fail(i, fmt::format("unsqueezing x {} at dims {} gives {}, but out is {}", ty(i.x), ints_str(i.dims),
                        ints_str(expect), ty(i.out)));
}

void check_transpose(const TransposeInst& i) {
  expect_same_dtype(i, "x", i.x, "out", i.out);
  if (i.x.rank() != 2) fail(i, fmt::format("x must have rank 2, got {}", ty(i.x)));
  auto x = dims_of(i.x);
  std::vector<int64_t> expect{x[1], x[0]};
  if (dims_of(i.out) != expect)
    fail(i, fmt::format("transposing x {} gives {}, but out is {}", ty(i.x), ints_str(expect), ty(i.out)));
}

void check_repeat(const RepeatInst& i) {
  expect_same_dtype(i, "x", i.x, "out", i.out);
  for (auto r : i.repeats)
    if (r <= 0) fail(i, fmt::format("repeats {} must be positive (x {})", ints_str(i.repeats), ty(i.x)));
  auto x = dims_of(i.x);
  size_t rank = std::max(x.size(), i.repeats.size());
  std::vector<int64_t> expect(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    int64_t sd = d + x.size() >= rank ? x[d + x.size() - rank] : 1;
    int64_t rd = d + i.repeats.size() >= rank ? i.repeats[d + i.repeats.size() - rank] : 1;
    expect[d] = sd * rd;
  }
  if (dims_of(i.out) != expect)
    fail(i, fmt::format("repeating x {} by {} gives {}, but out is {}", ty(i.x), ints_str(i.repeats), ints_str(expect),
                        ty(i.out)));
}

void check_elementwise(const ElementwiseInst& i) {
  if (i.inputs.empty()) fail(i, fmt::format("needs at least one input tensor (out {})", ty(i.out)));
  if (i.inputs.size() != i.params.size())
    fail(i, fmt::format("has {} inputs but {} params (one param per input)", i.inputs.size(), i.params.size()));
  std::vector<std::vector<int64_t>> shapes;
  std::string operands;
  for (size_t k = 0; k < i.inputs.size(); ++k) {
    std::string role = fmt::format("input {}", k);
    shapes.push_back(dims_of(i.inputs[k]));
    operands += (k ? " and " : "") + ty(i.inputs[k]);
    const Var& p = i.params[k];
    if (!p.defined()) fail(i, fmt::format("param {} (for input {}) is undefined", k, ty(i.inputs[k])));
    if (p.dtype() != i.inputs[k].dtype())
      fail(i, fmt::format("param {} '{}' has type {} but input {} is {}", k, p.name(), p.dtype().name(), k,
                          ty(i.inputs[k])));
  }
  auto shape = broadcast_shapes(shapes);
  if (!shape) fail(i, fmt::format("cannot broadcast {}", operands));
  if (dims_of(i.out) != *shape)
    fail(i, fmt::format("broadcasting {} gives {}, but out is {}", operands, ints_str(*shape), ty(i.out)));
  if (!i.body.defined()) fail(i, fmt::format("the body is undefined (inputs {}, out {})", operands, ty(i.out)));
  if (i.body.dtype() != i.out.dtype())
    fail(i, fmt::format("the body {} has type {} but out is {}", expr_str(i.body), i.body.dtype().name(), ty(i.out)));
}

void check_reduce(const ReduceInst& i) {
  expect_dim_set(i, i.dims, i.x.rank(), "x " + ty(i.x));
  auto x = dims_of(i.x);
  std::vector<int64_t> expect;
  for (int d = 0; d < i.x.rank(); ++d) {
    bool reduced = std::find(i.dims.begin(), i.dims.end(), d) != i.dims.end();
    if (!reduced) expect.push_back(x[d]);
    else if (i.keepdim) expect.push_back(1);
  }
  if (dims_of(i.out) != expect)
    fail(i, fmt::format("reducing dims {} of x {} (keepdim={}) gives {}, but out is {}", ints_str(i.dims), ty(i.x),
                        i.keepdim, ints_str(expect), ty(i.out)));
  DataType xt = i.x.dtype();
  bool logical = i.op == ReduceOp::Any || i.op == ReduceOp::All;
  if (logical && !xt.is_bool()) fail(i, fmt::format("needs a bool tensor, got x {}", ty(i.x)));
  if (!logical && !xt.is_numeric()) fail(i, fmt::format("needs a numeric tensor, got x {}", ty(i.x)));
  DataType expect_dt = logical ? dtypes::boolean : xt;
  if (i.out.dtype() != expect_dt)
    fail(i, fmt::format("x is {} so out must be {}, got {}", ty(i.x), expect_dt.name(), ty(i.out)));
}

}  // namespace

void insts::add_compute(std::vector<InstDef>& d) {
  using verify_detail::hook;
  d.push_back({.name = "dot", .kind = InstKind::Dot, .summary = "out = a @ b + c", .verify = hook(check_dot)});
  d.push_back({.name = "cast", .kind = InstKind::Cast, .summary = "converts each element", .verify = hook(check_cast)});
  d.push_back({.name = "view", .kind = InstKind::View, .summary = "reinterprets each thread's registers",
               .verify = hook(check_view)});
  d.push_back({.name = "reshape", .kind = InstKind::Reshape, .summary = "another shape of as many elements",
               .verify = hook(check_reshape)});
  d.push_back({.name = "squeeze", .kind = InstKind::Squeeze, .summary = "drops dims of extent 1",
               .verify = hook(check_squeeze)});
  d.push_back({.name = "unsqueeze", .kind = InstKind::Unsqueeze, .summary = "adds dims of extent 1",
               .verify = hook(check_unsqueeze)});
  d.push_back({.name = "transpose", .kind = InstKind::Transpose, .summary = "swaps the two dims of a matrix",
               .verify = hook(check_transpose)});
  d.push_back({.name = "repeat", .kind = InstKind::Repeat, .summary = "tiles a tensor along its dims",
               .verify = hook(check_repeat)});
  d.push_back({.name = "add", .kind = InstKind::Elementwise,
               .summary = "every unary, binary, comparison, where and clip (one elementwise node)",
               .verify = hook(check_elementwise)});
  d.push_back({.name = "sum", .kind = InstKind::Reduce, .summary = "reductions: sum, max, min, any, all",
               .attrs = {{"keepdim", AttrType::Bool, "false"}}, .verify = hook(check_reduce)});

}

}  // namespace tilus
