// Ahead-of-time bundles (tilus/runtime/aot.h): the generated header and C source, built with the
// system's C compiler into a shared library that the test loads and calls like a deployed
// program would. Without a GPU the calls must fail cleanly (TILUS_AOT_ERROR_CUDA and a message);
// with one they run vector_add (specialized and ragged), an out-of-bounds call the checks refuse,
// and, on sm_90, the TMA + wgmma Hopper matmul against a host reference.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "../../examples/cpp/hopper_matmul.h"
#include "../../examples/cpp/vector_add.h"
#include "message_of.h"
#include "temp_dir.h"
#include "tilus/codegen/nvrtc.h"
#include "tilus/runtime/aot.h"

using namespace tilus;

namespace {

#define REQUIRE_NVRTC() \
  if (!nvrtc_available()) GTEST_SKIP() << "tilus was built without NVRTC"

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// Runs a shell command, returning its exit status and (in `out`) its output.
int run(const std::string& command, std::string* out) {
  std::string full = command + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out->append(buf, n);
  return pclose(p);
}

// The bundle every test below uses: vector_add for sm_90a and sm_80 (each all-specialized and
// generic), and the Hopper matmul (TMA maps, mbarriers, wgmma) for sm_90a.
const AotBundle& bundle() {
  static const AotBundle b = [] {
    AotBundle b("mylib");
    b.add("vector_add", trace(examples::VectorAdd{}), {"sm_80", "sm_90a"});
    b.add("hopper_matmul", trace(examples::HopperMatmul{}), {"sm_90a"});
    return b;
  }();
  return b;
}

using VectorAddFn = int (*)(void*, int32_t, const float*, const float*, float*);
using MatmulFn = int (*)(void*, int32_t, int32_t, int32_t, const void*, const void*, void*);

// The bundle built with `cc` into a shared library and loaded (once per process).
struct Loaded {
  std::string error;  // why it could not be built or loaded
  void* handle = nullptr;
  VectorAddFn vector_add = nullptr;
  MatmulFn hopper_matmul = nullptr;
  const char* (*last_error)() = nullptr;
  void (*set_checks)(int) = nullptr;
};

const Loaded& loaded() {
  static TempDir dir("aot-lib");
  static const Loaded l = [] {
    Loaded l;
    bundle().write((dir.path / "mylib").string());
    std::string out;
    std::string lib = (dir.path / "libmylib.so").string();
    if (run(fmt::format("cc -std=c11 -O1 -Wall -Wextra -Werror -shared -fPIC -o {} {} -ldl -lpthread", lib,
                        (dir.path / "mylib" / "mylib.c").string()),
            &out) != 0) {
      l.error = "cc failed: " + out;
      return l;
    }
    l.handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!l.handle) {
      l.error = dlerror();
      return l;
    }
    l.vector_add = reinterpret_cast<VectorAddFn>(dlsym(l.handle, "mylib_vector_add"));
    l.hopper_matmul = reinterpret_cast<MatmulFn>(dlsym(l.handle, "mylib_hopper_matmul"));
    l.last_error = reinterpret_cast<const char* (*)()>(dlsym(l.handle, "mylib_last_error"));
    l.set_checks = reinterpret_cast<void (*)(int)>(dlsym(l.handle, "mylib_set_checks"));
    if (!l.vector_add || !l.hopper_matmul || !l.last_error || !l.set_checks) l.error = "a bundle function is missing";
    return l;
  }();
  return l;
}

TEST(Aot, HeaderDeclaresOneTypedFunctionPerKernel) {
  REQUIRE_NVRTC();
  std::string h = bundle().header();
  EXPECT_TRUE(has(h, "tilus_aot_status mylib_vector_add(struct CUstream_st* stream, int32_t n, const float* a, "
                     "const float* b, float* c);"))
      << h;
  // float16 has no C type: void pointers, const where the kernel only reads.
  EXPECT_TRUE(has(h, "tilus_aot_status mylib_hopper_matmul(struct CUstream_st* stream, int32_t m, int32_t n, "
                     "int32_t k, const void* a, const void* b, void* c);"))
      << h;
  EXPECT_TRUE(has(h, "const char* mylib_last_error(void);")) << h;
  // The variants in the order they are tried: the best arch first, the specialized before the generic.
  size_t a = h.find("sm_90a: n % 16 == 0, a % 16 == 0, b % 16 == 0, c % 16 == 0");
  size_t b = h.find("sm_90a: any arguments");
  size_t c = h.find("sm_80: n % 16 == 0");
  size_t d = h.find("sm_80: any arguments");
  ASSERT_NE(a, std::string::npos) << h;
  EXPECT_TRUE(a < b && b < c && c < d) << h;
  EXPECT_TRUE(has(h, "(TMA)")) << h;  // the Hopper matmul's variants
}

TEST(Aot, SourceBuildsWithCAndCppCompilers) {
  REQUIRE_NVRTC();
  const Loaded& l = loaded();
  ASSERT_TRUE(l.error.empty()) << l.error;
  // The header also compiles as C++ (extern "C") next to another bundle's header.
  TempDir dir("aot-cpp");
  AotBundle other("otherlib");
  other.add("vector_add", trace(examples::VectorAdd{}), {"sm_80"}, {{}});
  other.write((dir.path / "other").string());
  bundle().write((dir.path / "mylib").string());
  std::ofstream(dir.path / "main.cpp") << "#include \"mylib.h\"\n#include \"otherlib.h\"\n"
                                          "int main() { return mylib_vector_add(nullptr, 0, nullptr, nullptr, "
                                          "nullptr) == TILUS_AOT_SUCCESS && otherlib_last_error() != nullptr; }\n";
  std::string out;
  int rc = run(fmt::format("c++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only -I{} -I{} {}", (dir.path / "mylib").string(),
                           (dir.path / "other").string(), (dir.path / "main.cpp").string()),
               &out);
  EXPECT_EQ(rc, 0) << out;
  // Two bundles link into one program: the runtime is static in each.
  rc = run(fmt::format("cc -std=c11 -O0 -shared -fPIC -o {} {} {} -ldl -lpthread", (dir.path / "both.so").string(),
                       (dir.path / "mylib" / "mylib.c").string(), (dir.path / "other" / "otherlib.c").string()),
           &out);
  EXPECT_EQ(rc, 0) << out;
  std::string cmake = read(dir.path / "mylib" / "CMakeLists.txt");
  EXPECT_TRUE(has(cmake, "add_library(mylib STATIC mylib.c)")) << cmake;
}

TEST(Aot, CallsFailCleanlyWithoutAGpu) {
  REQUIRE_NVRTC();
  if (gpu_available()) GTEST_SKIP() << "a GPU is present (Aot.RunsOnTheGpu covers it)";
  const Loaded& l = loaded();
  ASSERT_TRUE(l.error.empty()) << l.error;
  float x = 0;
  EXPECT_EQ(l.vector_add(nullptr, 1, &x, &x, &x), 3);  // TILUS_AOT_ERROR_CUDA
  std::string why = l.last_error();
  EXPECT_TRUE(has(why, "mylib_vector_add: no GPU")) << why;
}

TEST(Aot, RunsOnTheGpu) {
  REQUIRE_NVRTC();
  if (!gpu_available()) GTEST_SKIP() << "no GPU: " << gpu_unavailable_reason();
  const Loaded& l = loaded();
  ASSERT_TRUE(l.error.empty()) << l.error;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int n : {4096, 1000, 1}) {  // the specialized variant, then the generic one on ragged sizes
    DeviceBuffer a(dtypes::float32, n), b(dtypes::float32, n), c(dtypes::float32, n);
    std::vector<double> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) x[size_t(i)] = u(rng), y[size_t(i)] = u(rng);
    a.upload(x);
    b.upload(y);
    auto p = [](const DeviceBuffer& d) { return reinterpret_cast<float*>(d.ptr()); };
    ASSERT_EQ(l.vector_add(nullptr, n, p(a), p(b), p(c)), 0) << l.last_error();
    synchronize();
    std::vector<double> z = c.download();
    for (int i = 0; i < n; ++i) ASSERT_EQ(z[size_t(i)], double(float(x[size_t(i)]) + float(y[size_t(i)]))) << i;
    // One element more than the buffers hold: refused, nothing launched.
    EXPECT_EQ(l.vector_add(nullptr, n + 1, p(a), p(b), p(c)), 1);
    std::string why = l.last_error();
    EXPECT_TRUE(has(why, "argument 'a'") && has(why, "allocation has")) << why;
  }
  float* null = nullptr;
  EXPECT_EQ(l.vector_add(nullptr, 16, null, null, null), 1);
  EXPECT_TRUE(has(l.last_error(), "argument 'a' is a null pointer")) << l.last_error();

  if (current_device().compute_capability != 90) GTEST_SKIP() << "the Hopper matmul variant needs sm_90a";
  int m = 300, n = 520, k = 136;  // ragged: several tiles, partial ones at the edges
  DeviceBuffer a(dtypes::float16, int64_t(m) * k), b(dtypes::float16, int64_t(n) * k), c(dtypes::float16, int64_t(m) * n);
  std::vector<double> x(size_t(m) * k), y(size_t(n) * k);
  for (auto& v : x) v = double(dtypes::float16.decode_float(dtypes::float16.encode_float(u(rng))));
  for (auto& v : y) v = double(dtypes::float16.decode_float(dtypes::float16.encode_float(u(rng))));
  a.upload(x);
  b.upload(y);
  auto p = [](const DeviceBuffer& d) { return reinterpret_cast<void*>(d.ptr()); };
  // Twice with the same arguments (the second reuses the encoded TMA maps), then with another a
  // (a new address: its map is encoded again).
  DeviceBuffer a2(dtypes::float16, int64_t(m) * k);
  std::vector<double> x2(x.size());
  for (size_t i = 0; i < x.size(); ++i) x2[i] = -x[i];
  a2.upload(x2);
  for (int call = 0; call < 3; ++call) {
    const std::vector<double>& xa = call < 2 ? x : x2;
    ASSERT_EQ(l.hopper_matmul(nullptr, m, n, k, p(call < 2 ? a : a2), p(b), p(c)), 0) << l.last_error();
    synchronize();
    std::vector<double> z = c.download();
    double worst = 0;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double r = 0;
        for (int q = 0; q < k; ++q) r += xa[size_t(i) * k + q] * y[size_t(j) * k + q];
        worst = std::max(worst, std::abs(z[size_t(i) * n + j] - r));
      }
    EXPECT_LT(worst, 0.05) << "call " << call;
  }
  // A row stride TMA cannot take (k = 135 halves = 270 bytes): refused with the reason.
  EXPECT_EQ(l.hopper_matmul(nullptr, m, n, 135, p(a), p(b), p(c)), 1);
  EXPECT_TRUE(has(l.last_error(), "cannot be copied by TMA")) << l.last_error();
}

// The grids, extents and TMA views of a bundle are the kernel's integer expressions printed as C:
// random expressions over four parameters, evaluated by a C program built with `cc`, must give
// what tilus's evaluate() gives (the JIT launcher's values), undefined ones included.
TEST(Aot, CExpressionsEvaluateLikeTheLauncher) {
  std::vector<Var> vars = {Var("x", dtypes::int32, VarRole::Param), Var("y", dtypes::int32, VarRole::Param),
                           Var("u", dtypes::uint32, VarRole::Param), Var("w", dtypes::int64, VarRole::Param)};
  std::vector<std::string> names = {"x", "y", "u", "w"};
  std::mt19937 rng(11);
  auto pick = [&](int n) { return int(rng() % unsigned(n)); };
  std::function<Expr(int)> gen = [&](int depth) -> Expr {
    if (depth == 0 || pick(4) == 0) {
      if (pick(3) == 0) return int_const(pick(9) - 3);
      return vars[size_t(pick(4))];
    }
    switch (pick(6)) {
      case 0: return select(gen(depth - 1) < gen(depth - 1), gen(depth - 1), gen(depth - 1));
      case 1: {
        static const DataType to[] = {dtypes::int8, dtypes::int16, dtypes::uint32, dtypes::int64, dtypes::uint8};
        return cast(gen(depth - 1), to[pick(5)]);
      }
      case 2: return pick(2) ? -gen(depth - 1) : ~gen(depth - 1);
      default: {
        static const BinaryOp ops[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Mod,
                                       BinaryOp::FloorDiv, BinaryOp::FloorMod, BinaryOp::Min, BinaryOp::Max,
                                       BinaryOp::BitAnd, BinaryOp::BitOr, BinaryOp::BitXor, BinaryOp::Shl,
                                       BinaryOp::Shr};
        BinaryOp op = ops[pick(14)];
        Expr b = gen(depth - 1);
        if (op == BinaryOp::Shl || op == BinaryOp::Shr) b = b % int_const(40);  // sometimes out of range
        return binary(op, gen(depth - 1), b);
      }
    }
  };
  std::vector<Expr> exprs;
  for (int i = 0; i < 300; ++i) {
    Expr e = gen(4);
    if (pick(5) == 0) e = logical_and(e > int_const(0), gen(2) != int_const(1));  // bool results
    exprs.push_back(e);
  }
  const int64_t values[][4] = {{0, 0, 0, 0},       {7, -3, 5, 11},           {-7, 3, 4000000000LL, -1},
                               {-2147483647 - 1, -1, 1, 1LL << 40}, {100, 16, 17, -(1LL << 62)},
                               {2147483647, 2, 4294967295LL, 9},    {-5, -5, 3, 3}};
  TempDir dir("aot-expr");
  std::filesystem::create_directories(dir.path);
  for (auto& [file, text] : AotBundle::runtime()) std::ofstream(dir.path / file) << text;
  std::string c = "#include <stdbool.h>\n#include <stdint.h>\n#include <stdio.h>\n"
                  "typedef enum tilus_aot_status { TILUS_AOT_SUCCESS = 0, TILUS_AOT_ERROR_ARGUMENT = 1, "
                  "TILUS_AOT_ERROR_NO_VARIANT = 2, TILUS_AOT_ERROR_CUDA = 3 } tilus_aot_status;\n"
                  "#include \"tilus_aot_runtime.h\"\nint main(void) {\n";
  for (auto& v : values) {
    c += fmt::format("  {{ int32_t x = {}; int32_t y = {}; uint32_t u = {}u; int64_t w = {}LL; int tilus_bad;\n", v[0],
                     v[1], v[2], v[3]);
    for (const Expr& e : exprs)
      c += fmt::format("    tilus_bad = 0; {{ long long r = (long long)({}); printf(\"%d %lld\\n\", tilus_bad, "
                       "tilus_bad ? 0LL : r); }}\n",
                       detail::aot_c_expression(e, vars, names));
    c += "    (void)x; (void)y; (void)u; (void)w;\n  }\n";
  }
  c += "  return 0;\n}\n";
  std::ofstream(dir.path / "expr.c") << c;
  std::string out;
  std::string exe = (dir.path / "expr").string();
  ASSERT_EQ(run(fmt::format("cc -std=c11 -O1 -Wall -Werror -Wno-unused-function -o {} {}", exe,
                            (dir.path / "expr.c").string()),
                &out),
            0)
      << out;
  out.clear();
  ASSERT_EQ(run(exe, &out), 0) << out;
  std::istringstream lines(out);
  int checked = 0, undefined = 0;
  for (auto& v : values) {
    for (const Expr& e : exprs) {
      int bad = 0;
      long long got = 0;
      ASSERT_TRUE(lines >> bad >> got);
      auto want = evaluate(e, [&](const Var& var) -> std::optional<EvalValue> {
        for (size_t i = 0; i < vars.size(); ++i)
          if (vars[i].same_as(var)) return EvalValue{var.dtype(), v[i], 0.0};
        return std::nullopt;
      });
      ASSERT_EQ(bad != 0, !want.has_value()) << to_string(e) << " at x=" << v[0] << " y=" << v[1] << " u=" << v[2]
                                             << " w=" << v[3];
      if (want) {
        ASSERT_EQ(got, want->i) << to_string(e) << " at x=" << v[0] << " y=" << v[1] << " u=" << v[2] << " w=" << v[3];
        ++checked;
      } else {
        ++undefined;
      }
    }
  }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(undefined, 10);  // divisions by zero and shifts out of range were among them
}

TEST(Aot, BadBundlesAreCompileErrors) {
  EXPECT_TRUE(has(message_of<CompileError>([] { AotBundle("my-lib"); }), "must be a C identifier"));
  EXPECT_TRUE(has(message_of<CompileError>([] { AotBundle("tilus_x"); }), "not starting with tilus_"));
  REQUIRE_NVRTC();
  AotBundle b("lib");
  b.add("vadd", trace(examples::VectorAdd{}), {"sm_80"}, {{}});
  EXPECT_TRUE(has(message_of<CompileError>([&] { b.add("vadd", trace(examples::VectorAdd{}), {"sm_80"}); }),
                  "already has a function lib_vadd"));
  EXPECT_TRUE(has(message_of<CompileError>([&] { b.add("v2", trace(examples::VectorAdd{}), {"hopper"}); }),
                  "'hopper' is not a GPU arch"));
  EXPECT_TRUE(has(message_of<CompileError>([&] { b.add("v3", trace(examples::VectorAdd{}), {"sm_80"}, {{{9, 16}}}); }),
                  "names no parameter"));
}

}  // namespace
