// tilus._C.Builder: the tracer of one kernel, one method per tracer entry (src/lang/builder.h).
#include "bindings.h"

namespace tilus::py_detail {

void bind_builder(py::module_& m) {
  // --- the tracer -------------------------------------------------------------------------------
  py::class_<Builder>(m, "Builder",
                      "The tracer of one kernel (internal): tilus.Script's instruction methods record the kernel's "
                      "instructions through it; each method takes the user's (file, line).")
      .def(py::init([](const std::string& name, L loc) { return std::make_unique<Builder>(name, loc_of(loc)); }))
      .def("add_param", [](Builder& b, const std::string& n, DataType t, L loc) { return b.add_param(n, t, loc_of(loc)); })
      .def("add_constant", &Builder::add_constant)
      .def("set_blocks", [](Builder& b, const py::iterable& xs, L loc) { b.set_blocks(to_exprs(xs), loc_of(loc)); })
      .def("set_warps", [](Builder& b, int64_t w, L loc) { b.set_warps(w, loc_of(loc)); })
      .def("set_cluster", [](Builder& b, std::vector<int64_t> c, L loc) { b.set_cluster(c, loc_of(loc)); })
      .def("set_min_blocks", [](Builder& b, int64_t n, L loc) { b.set_min_blocks(n, loc_of(loc)); })
      .def("finish", &Builder::finish)
      .def("depth", &Builder::depth)
      .def("scope_path", &Builder::scope_path)
      .def(
          "begin_for",
          [](Builder& b, const std::string& name, const py::object& begin, const py::object& end,
             const py::object& step, int64_t unroll, L loc, int64_t num_stages, bool warp_specialize, bool persistent,
             const std::string& epilogue) {
            Unroll u = unroll < 0 ? Unroll::all() : unroll == 0 ? Unroll::none() : Unroll::by(unroll);
            LoopPipeline p;
            p.num_stages = num_stages;
            p.warp_specialize = warp_specialize;
            p.persistent = persistent;
            p.epilogue = epilogue;
            return b.begin_for(name, to_expr(begin), to_expr(end), to_expr(step), u, loc_of(loc), p);
          },
          py::arg("name"), py::arg("begin"), py::arg("end"), py::arg("step"), py::arg("unroll"), py::arg("loc"),
          py::arg("num_stages") = 0, py::arg("warp_specialize") = false, py::arg("persistent") = false,
          py::arg("epilogue") = "")
      .def("end_for", &Builder::end_for)
      .def("begin_if", [](Builder& b, const py::object& c, L loc) { b.begin_if(to_expr(c), loc_of(loc)); })
      .def("end_if", &Builder::end_if)
      .def("begin_else", [](Builder& b, L loc) { b.begin_else(loc_of(loc)); })
      .def("end_else", &Builder::end_else)
      .def("begin_while", [](Builder& b, const py::object& c, L loc) { b.begin_while(to_expr(c), loc_of(loc)); })
      .def("end_while", &Builder::end_while)
      .def("emit_break", [](Builder& b, L loc, const std::string& what) { b.emit_break(loc_of(loc), what.c_str()); },
           py::arg("loc"), py::arg("what") = "break")
      .def("emit_continue", [](Builder& b, L loc) { b.emit_continue(loc_of(loc)); })
      .def("emit_return", [](Builder& b, L loc) { b.emit_return(loc_of(loc)); })
      .def("begin_thread_group", [](Builder& b, const std::string& kind, int64_t begin, int64_t n, L loc) {
        ThreadGroupKind k = kind == "single_thread" ? ThreadGroupKind::SingleThread
                            : kind == "single_warp" ? ThreadGroupKind::SingleWarp
                            : kind == "warp_group"  ? ThreadGroupKind::WarpGroup
                                                    : ThreadGroupKind::ThreadGroup;
        b.begin_thread_group(k, begin, n, loc_of(loc));
      })
      .def("end_thread_group", &Builder::end_thread_group)
      .def("let", [](Builder& b, const std::string& n, const py::object& v, L loc) { return b.let(n, to_expr(v), loc_of(loc)); })
      .def("declare", [](Builder& b, const std::string& n, DataType t, const py::object& v, L loc) {
        return b.declare(n, t, to_expr(v), loc_of(loc));
      })
      .def("assign", [](Builder& b, const Var& v, const py::object& x, L loc) { b.assign(v, to_expr(x), loc_of(loc)); })
      .def("declare_outside", [](Builder& b, const std::string& n, DataType t, const py::object& v, L loc) {
        return b.declare_outside(n, t, v.is_none() ? Expr() : to_expr(v), loc_of(loc));
      })
      .def("register_tensor_outside", [](Builder& b, DataType t, std::vector<int64_t> shape, L loc, const std::string& n) {
        return b.register_tensor_outside(t, std::move(shape), loc_of(loc), n);
      })
      .def("name", &Builder::name)
      .def("global_view", [](Builder& b, const py::object& ptr, DataType t, const py::iterable& shape,
                             const py::iterable& strides, L loc, const std::string& name) {
        return b.global_view(to_expr(ptr), t, to_exprs(shape), to_exprs(strides), loc_of(loc), name);
      })
      .def("global_tensor", [](Builder& b, DataType t, const py::iterable& shape, bool requires_clean, L loc,
                               const std::string& name) {
        return b.global_tensor(t, to_exprs(shape), requires_clean, loc_of(loc), name);
      })
      .def("item_ptr", [](Builder& b, const Tensor& t, const py::iterable& indices, L loc) {
        return b.item_ptr(t, to_exprs(indices), loc_of(loc));
      })
      .def("semaphore", [](Builder& b, bool lock, const py::object& semaphore, const py::object& value, L loc) {
        b.semaphore(lock ? SemaphoreOp::Lock : SemaphoreOp::Release, to_expr(semaphore), to_expr(value), loc_of(loc));
      })
      .def("shared_tensor", [](Builder& b, DataType t, std::vector<int64_t> shape, L loc) {
        return b.shared_tensor(t, std::move(shape), loc_of(loc));
      })
      .def("free_shared", [](Builder& b, const Tensor& t, L loc) { b.free_shared(t, loc_of(loc)); })
      .def("register_tensor", [](Builder& b, DataType t, std::vector<int64_t> shape, const py::object& init, L loc) {
        if (init.is_none()) return b.register_tensor(t, std::move(shape), Expr(), loc_of(loc));
        if (py::isinstance<py::function>(init)) {
          py::function f = init;
          return b.register_tensor(t, std::move(shape), [f](const std::vector<Var>& axes) {
            py::list vs;
            for (auto& v : axes) vs.append(v);
            return to_expr(f(*vs));
          }, loc_of(loc));
        }
        return b.register_tensor(t, std::move(shape), to_expr(init), loc_of(loc));
      })
      .def("index_shared", [](Builder& b, const Tensor& t, const py::iterable& idx, L loc) {
        return b.index_shared(t, to_exprs(idx), loc_of(loc));
      })
      .def("load_global", [](Builder& b, const Tensor& src, const py::iterable& offsets, std::vector<int64_t> shape,
                             std::vector<int> dims, L loc, const py::object& other) {
        return b.load_global(src, to_exprs(offsets), std::move(shape), std::move(dims), loc_of(loc),
                             other.is_none() ? Expr() : to_expr(other));
      }, py::arg("src"), py::arg("offsets"), py::arg("shape"), py::arg("dims"), py::arg("loc"),
         py::arg("other") = py::none())
      .def("store_global", [](Builder& b, const Tensor& dst, const Tensor& src, const py::iterable& offsets,
                              std::vector<int> dims, L loc) {
        b.store_global(dst, src, to_exprs(offsets), std::move(dims), loc_of(loc));
      })
      .def("item", [](Builder& b, const Tensor& x, L loc) { return Expr(b.item(x, loc_of(loc))); })
      .def("atomic", [](Builder& b, const std::string& op, const Tensor& dst, const Tensor& values,
                        std::optional<Tensor> compare, const py::iterable& offsets, std::vector<int> dims,
                        const std::string& sem, const std::string& scope, L loc) {
        static const std::map<std::string, AtomicOp> ops = {{"add", AtomicOp::Add}, {"sub", AtomicOp::Sub},
                                                            {"min", AtomicOp::Min}, {"max", AtomicOp::Max},
                                                            {"exch", AtomicOp::Exch}, {"cas", AtomicOp::Cas}};
        return b.atomic(ops.at(op), dst, values, compare ? *compare : Tensor(), to_exprs(offsets), std::move(dims), sem,
                        scope, loc_of(loc));
      })
      .def("atomic_scatter", [](Builder& b, const std::string& op, bool store, const Tensor& dst, int dim,
                                const Tensor& indices, const Tensor& values, const std::string& sem,
                                const std::string& scope, L loc) {
        static const std::map<std::string, AtomicOp> ops = {{"add", AtomicOp::Add}, {"sub", AtomicOp::Sub},
                                                            {"min", AtomicOp::Min}, {"max", AtomicOp::Max},
                                                            {"exch", AtomicOp::Exch}};
        return b.atomic_scatter(ops.at(op), store, dst, dim, indices, values, sem, scope, loc_of(loc));
      })
      .def("load_shared", [](Builder& b, const Tensor& src, L loc) { return b.load_shared(src, loc_of(loc)); })
      .def("store_shared", [](Builder& b, const Tensor& dst, const Tensor& src, L loc) { b.store_shared(dst, src, loc_of(loc)); })
      .def("copy_async", [](Builder& b, const Tensor& src, const Tensor& dst, const py::iterable& offsets,
                            std::vector<int> dims, std::optional<std::string> evict, bool check_bounds, L loc) {
        b.copy_async(src, dst, to_exprs(offsets), std::move(dims), evict, check_bounds, loc_of(loc));
      })
      .def("copy_async_commit_group", [](Builder& b, L loc) { b.copy_async_commit_group(loc_of(loc)); })
      .def("copy_async_wait_group", [](Builder& b, int64_t n, L loc) { b.copy_async_wait_group(n, loc_of(loc)); })
      .def("copy_async_wait_all", [](Builder& b, L loc) { b.copy_async_wait_all(loc_of(loc)); })
      .def("copy", [](Builder& b, const Tensor& src, const py::iterable& src_offsets, const py::iterable& src_extents,
                      const Tensor& dst, const py::iterable& dst_offsets, const py::iterable& dst_extents,
                      std::optional<int64_t> coalesced_width, bool disable_tma, std::optional<std::string> eviction_policy,
                      std::map<std::string, std::string> annotations, std::optional<RegisterLayout> loop_layout,
                      const std::string& api, std::optional<Tensor> barrier, L loc) {
        CopyArgs args;
        args.coalesced_width = coalesced_width;
        args.disable_tma = disable_tma;
        args.eviction_policy = std::move(eviction_policy);
        args.annotations = std::move(annotations);
        if (loop_layout) args.loop_layout = *loop_layout;
        if (api == "async_copy") args.api = CopyApi::AsyncCopy;
        else if (api == "tma_copy") args.api = CopyApi::TmaCopy;
        if (barrier) args.barrier = *barrier;
        b.copy(CopyRegion{src, to_exprs(src_offsets), to_exprs(src_extents), std::nullopt},
               CopyRegion{dst, to_exprs(dst_offsets), to_exprs(dst_extents), std::nullopt}, args, loc_of(loc));
      })
      .def("mbarrier_alloc", [](Builder& b, const py::iterable& counts, L loc) {
        return b.mbarrier_alloc(to_exprs(counts), loc_of(loc));
      })
      .def("mbarrier", [](Builder& b, const std::string& op, const Tensor& barrier, const py::object& value,
                          const std::string& sem, const std::string& scope, const py::object& cta_id, L loc) {
        static const std::map<std::string, MbarrierOp> ops{{"arrive", MbarrierOp::Arrive},
                                                           {"arrive_and_expect_tx", MbarrierOp::ArriveExpectTx},
                                                           {"expect_tx", MbarrierOp::ExpectTx},
                                                           {"wait", MbarrierOp::Wait},
                                                           {"cp_async_arrive", MbarrierOp::CpAsyncArrive}};
        b.mbarrier(ops.at(op), barrier, to_expr(value), sem, scope, cta_id.is_none() ? Expr() : to_expr(cta_id),
                   loc_of(loc));
      })
      .def("defined", [](Builder& b, const std::string& name, const py::dict& tensors, const py::dict& scalars,
                         const py::dict& attrs, L loc) {
        std::vector<std::pair<std::string, Tensor>> ts;
        std::vector<std::pair<std::string, Expr>> ss;
        std::vector<std::pair<std::string, std::string>> as;
        for (auto [k, v] : tensors) ts.emplace_back(k.cast<std::string>(), v.cast<Tensor>());
        for (auto [k, v] : scalars)
          if (!v.is_none()) ss.emplace_back(k.cast<std::string>(), to_expr(v));
        for (auto [k, v] : attrs) as.emplace_back(k.cast<std::string>(), py::str(v).cast<std::string>());
        b.defined(name, ts, ss, as, loc_of(loc));
      })
      .def("mbarrier_wait_tensor", [](Builder& b, const Tensor& barrier, const Tensor& phase, const std::string& sem,
                                      const std::string& scope, L loc) {
        b.mbarrier_wait(barrier, phase, sem, scope, loc_of(loc));
      })
      .def("tma_copy_tile", [](Builder& b, const Tensor& global, const Tensor& shared, const py::iterable& offsets,
                               std::vector<int> dims, std::optional<Tensor> barrier, bool load, L loc,
                               const py::object& multicast_mask, const py::object& cache_policy, int64_t cta_group,
                               const py::object& barrier_rank) {
        b.tma_copy_tile(global, shared, to_exprs(offsets), std::move(dims), barrier ? *barrier : Tensor(), load,
                        loc_of(loc), multicast_mask.is_none() ? Expr() : to_expr(multicast_mask),
                        cache_policy.is_none() ? Expr() : to_expr(cache_policy), cta_group,
                        barrier_rank.is_none() ? Expr() : to_expr(barrier_rank));
      }, py::arg("global_"), py::arg("shared"), py::arg("offsets"), py::arg("dims"), py::arg("barrier"),
         py::arg("load"), py::arg("loc"), py::arg("multicast_mask") = py::none(), py::arg("cache_policy") = py::none(),
         py::arg("cta_group") = 1, py::arg("barrier_rank") = py::none())
      .def("c2d_im2col", [](Builder& b, const Tensor& img, const Tensor& col, const py::object& nhw_step,
                            const py::object& c_step, int64_t kernel, int64_t stride, int64_t dilation, int64_t pad,
                            std::optional<std::string> eviction_policy, L loc, std::optional<Tensor> barrier) {
        b.c2d_im2col(img, col, to_expr(nhw_step), to_expr(c_step), kernel, stride, dilation, pad, eviction_policy,
                     loc_of(loc), barrier ? *barrier : Tensor());
      })
      .def("tma_commit_group", [](Builder& b, L loc) { b.tma_commit_group(loc_of(loc)); })
      .def("tma_wait_group", [](Builder& b, int64_t n, bool read, L loc) { b.tma_wait_group(n, read, loc_of(loc)); })
      .def("fence_proxy_async", [](Builder& b, const std::string& space, L loc) { b.fence_proxy_async(space, loc_of(loc)); })
      .def("tcgen05_alloc", [](Builder& b, const DataType& dtype, std::vector<int64_t> shape, int64_t cta_group, L loc) {
        return b.tcgen05_alloc(dtype, std::move(shape), cta_group, loc_of(loc));
      })
      .def("tcgen05_slice", [](Builder& b, const Tensor& t, const py::iterable& offsets, std::vector<int> dims,
                               std::vector<int64_t> shape, L loc) {
        return b.tcgen05_slice(t, to_exprs(offsets), std::move(dims), std::move(shape), loc_of(loc));
      })
      .def("tcgen05_index", [](Builder& b, const Tensor& t, const py::list& indices, L loc) {
        std::vector<std::optional<Expr>> idx;
        for (auto i : indices) idx.push_back(i.is_none() ? std::nullopt : std::optional<Expr>(to_expr(i)));
        return b.tcgen05_index(t, std::move(idx), loc_of(loc));
      }, "t[i, ...] of a tensor-memory tensor: None keeps a dim whole (t_acc[:, stage, :] is [None, stage, None]).")
      .def("tcgen05_view", [](Builder& b, const Tensor& t, const DataType& dtype, std::vector<int64_t> shape, L loc) {
        return b.tcgen05_view(t, dtype, std::move(shape), loc_of(loc));
      })
      .def("tcgen05_load", [](Builder& b, const Tensor& t, L loc) { return b.tcgen05_load(t, loc_of(loc)); })
      .def("clc_query_response", [](Builder& b, const Tensor& response, L loc) {
        auto v = b.clc_query_response(response, loc_of(loc));
        return py::make_tuple(Expr(v[0]), Expr(v[1]), Expr(v[2]), Expr(v[3]));
      })
      .def("group_begin", &Builder::group_begin, "The first thread (in the block) of the innermost thread group.")
      .def("wgmma_fence", [](Builder& b, L loc) { b.wgmma_fence(loc_of(loc)); })
      .def(
          "wgmma_mma",
          [](Builder& b, const Tensor& a, const Tensor& bt, const Tensor& d, L loc, bool enable_input_d) {
            b.wgmma_mma(a, bt, d, loc_of(loc), enable_input_d);
          },
          py::arg("a"), py::arg("b"), py::arg("d"), py::arg("loc"), py::arg("enable_input_d") = true)
      .def("wgmma_commit_group", [](Builder& b, L loc) { b.wgmma_commit_group(loc_of(loc)); })
      .def("wgmma_wait_group", [](Builder& b, int64_t n, L loc) { b.wgmma_wait_group(n, loc_of(loc)); })
      .def("reshape_shared", [](Builder& b, const Tensor& t, std::vector<int64_t> shape, L loc) {
        return b.reshape_shared(t, std::move(shape), loc_of(loc));
      })
      .def("slice_shared", [](Builder& b, const Tensor& t, const py::iterable& offsets, std::vector<int> dims,
                              std::vector<int64_t> shape, L loc) {
        return b.slice_shared(t, to_exprs(offsets), std::move(dims), std::move(shape), loc_of(loc));
      })
      .def("permute_shared", [](Builder& b, const Tensor& t, const std::vector<int>& dims, L loc) {
        return b.permute_shared(t, dims, loc_of(loc));
      })
      .def("dot", [](Builder& b, const Tensor& x, const Tensor& y, std::optional<Tensor> c, std::optional<DataType> acc_dtype,
                     L loc) { return c ? b.dot(x, y, *c, loc_of(loc)) : b.dot(x, y, acc_dtype, loc_of(loc)); })
      .def("cast", [](Builder& b, const Tensor& x, DataType t, L loc) { return b.cast(x, t, loc_of(loc)); })
      .def("view", [](Builder& b, const Tensor& x, std::optional<DataType> t, std::optional<RegisterLayout> l, L loc) {
        return b.view(x, t, l ? *l : RegisterLayout(), loc_of(loc));
      })
      .def("reshape", [](Builder& b, const Tensor& x, std::vector<int64_t> s, L loc) { return b.reshape(x, std::move(s), loc_of(loc)); })
      .def("squeeze", [](Builder& b, const Tensor& x, std::vector<int> d, L loc) { return b.squeeze(x, std::move(d), loc_of(loc)); })
      .def("unsqueeze", [](Builder& b, const Tensor& x, std::vector<int> d, L loc) { return b.unsqueeze(x, std::move(d), loc_of(loc)); })
      .def("transpose", [](Builder& b, const Tensor& x, L loc) { return b.transpose(x, loc_of(loc)); })
      .def("repeat", [](Builder& b, const Tensor& x, std::vector<int64_t> r, L loc) { return b.repeat(x, std::move(r), loc_of(loc)); })
      .def("unary", [](Builder& b, const std::string& op, const Tensor& x, L loc) { return b.unary(op, x, loc_of(loc)); })
      .def("gelu", [](Builder& b, const Tensor& x, const std::string& approximate, L loc) {
        return b.gelu(x, approximate, loc_of(loc));
      })
      .def("binary", [](Builder& b, const std::string& op, const py::object& x, const py::object& y, L loc) {
        static const std::map<std::string, BinaryOp> ops = {
            {"+", BinaryOp::Add},  {"-", BinaryOp::Sub},     {"*", BinaryOp::Mul},     {"/", BinaryOp::Div},
            {"%", BinaryOp::Mod},  {"//", BinaryOp::FloorDiv}, {"floor_mod", BinaryOp::FloorMod},
            {"&", BinaryOp::BitAnd}, {"|", BinaryOp::BitOr}, {"^", BinaryOp::BitXor}, {"<<", BinaryOp::Shl},
            {">>", BinaryOp::Shr}, {"<", BinaryOp::Lt},      {"<=", BinaryOp::Le},     {">", BinaryOp::Gt},
            {">=", BinaryOp::Ge},  {"==", BinaryOp::Eq},     {"!=", BinaryOp::Ne},     {"and", BinaryOp::And},
            {"or", BinaryOp::Or},  {"max", BinaryOp::Max},   {"min", BinaryOp::Min}};
        auto it = ops.find(op);
        if (it == ops.end()) throw InternalError("unknown binary operator " + op);
        Tensor a = py::isinstance<Tensor>(x) ? x.cast<Tensor>() : Tensor();
        Tensor c = py::isinstance<Tensor>(y) ? y.cast<Tensor>() : Tensor();
        return b.binary(it->second, a, a.defined() ? Expr() : to_expr(x), c, c.defined() ? Expr() : to_expr(y), loc_of(loc));
      })
      .def("where", [](Builder& b, const Tensor& cond, const py::object& x, const py::object& y, L loc) {
        Tensor a = py::isinstance<Tensor>(x) ? x.cast<Tensor>() : Tensor();
        Tensor c = py::isinstance<Tensor>(y) ? y.cast<Tensor>() : Tensor();
        return b.where(cond, a, a.defined() ? Expr() : to_expr(x), c, c.defined() ? Expr() : to_expr(y), loc_of(loc));
      })
      .def("clip", [](Builder& b, const Tensor& x, const py::object& lo, const py::object& hi, L loc) {
        return b.clip(x, to_expr(lo), to_expr(hi), loc_of(loc));
      })
      .def("reduce", [](Builder& b, const std::string& op, const Tensor& x, std::optional<std::vector<int>> dims,
                        bool keepdim, L loc) {
        ReduceOp r = op == "sum" ? ReduceOp::Sum : op == "max" ? ReduceOp::Max : op == "min" ? ReduceOp::Min
                     : op == "any" ? ReduceOp::Any : ReduceOp::All;
        return b.reduce(r, x, std::move(dims), keepdim, loc_of(loc));
      })
      .def("scan", [](Builder& b, const std::string& op, const Tensor& x, int dim, bool exclusive, L loc) {
        return b.scan(op, x, dim, exclusive, loc_of(loc));
      })
      .def("assign_tensor", [](Builder& b, const Tensor& d, const Tensor& s, L loc) { b.assign_tensor(d, s, loc_of(loc)); })
      .def("sync", [](Builder& b, L loc) { b.sync(loc_of(loc)); })
      .def("sync_threads", [](Builder& b, std::optional<int64_t> barrier_id, std::optional<int64_t> arrive_count, L loc) {
        b.sync_threads(barrier_id, arrive_count, loc_of(loc));
      })
      .def("named_barrier_arrive", [](Builder& b, int64_t barrier_id, int64_t arrive_count, L loc) {
        b.named_barrier_arrive(barrier_id, arrive_count, loc_of(loc));
      })
      .def("sync_warp", [](Builder& b, const py::object& mask, L loc) {
        b.sync_warp(mask.is_none() ? Expr() : to_expr(mask), loc_of(loc));
      })
      .def("cluster_sync", [](Builder& b, L loc) { b.cluster_sync(loc_of(loc)); })
      .def("sync_grid", [](Builder& b, L loc) { b.sync_grid(loc_of(loc)); })
      .def("set_max_nreg", [](Builder& b, int64_t reg_count, bool is_inc, L loc) { b.set_max_nreg(reg_count, is_inc, loc_of(loc)); })
      .def("thread_index", [](Builder& b, const std::string& op, int64_t warp_size, int64_t warps_per_group,
                              int64_t thread_extent, L loc) {
        return b.thread_index(op, warp_size, warps_per_group, thread_extent, loc_of(loc));
      })
      .def("shuffle", [](Builder& b, const std::string& op, const Tensor& value, const py::object& lane,
                         const py::object& mask, int64_t width, L loc) {
        return b.shuffle(op, value, to_expr(lane), mask.is_none() ? Expr() : to_expr(mask), width, loc_of(loc));
      })
      .def("ldg", [](Builder& b, int64_t bits, const Tensor& src, const py::iterable& offsets, const py::iterable& extents,
                     const py::object& pred, L loc) {
        return b.ldg(bits, CopyRegion{src, to_exprs(offsets), to_exprs(extents), std::nullopt},
                     pred.is_none() ? Expr() : to_expr(pred), loc_of(loc));
      })
      .def("stg", [](Builder& b, int64_t bits, const Tensor& dst, const py::iterable& offsets, const py::iterable& extents,
                     const Tensor& value, const py::object& pred, L loc) {
        b.stg(bits, CopyRegion{dst, to_exprs(offsets), to_exprs(extents), std::nullopt}, value,
              pred.is_none() ? Expr() : to_expr(pred), loc_of(loc));
      })
      .def("printf", [](Builder& b, const std::string& f, const py::iterable& args, L loc) { b.printf(f, to_exprs(args), loc_of(loc)); })
      .def("assume", [](Builder& b, const py::object& c, L loc) { b.assume(to_expr(c), loc_of(loc)); })
      .def("annotate_layout", [](Builder& b, const Tensor& t, const RegisterLayout& l, L loc) { b.annotate_layout(t, l, loc_of(loc)); })
      .def("annotate_shared_layout", [](Builder& b, const Tensor& t, const SharedLayout& l, L loc) {
        b.annotate_shared_layout(t, l, loc_of(loc));
      });
}

}  // namespace tilus::py_detail
