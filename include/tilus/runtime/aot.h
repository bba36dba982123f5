// Ahead-of-time bundles: Scripts compiled for a list of archs and specializations into C
// sources that need only a C compiler to build and only the CUDA driver to run (no NVRTC, no
// Python, no tilus).
//
//   tilus::AotBundle bundle("mylib");
//   bundle.add("vector_add", tilus::trace(VectorAdd{}), {"sm_90a", "sm_80"});
//   bundle.write("out/mylib");   // mylib.h, mylib.c, the runtime's two headers, CMakeLists.txt
//
// mylib.h declares one C function per kernel, `tilus_aot_status mylib_vector_add(stream, n, a,
// b, c)`, which picks the variant for the current GPU and the arguments' specialization, checks
// the arguments (null pointers; each pointer's allocation against the elements the kernel
// reaches, through cuMemGetAddressRange; the grid), loads the cubin into the current context at
// its first use and launches. docs/gpu.md, "Ahead-of-time bundles", has the whole contract.
#pragma once

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "tilus/ir/program.h"
#include "tilus/runtime/cache.h"
#include "tilus/runtime/launcher.h"

namespace tilus {

// The specialization facts of one variant ({parameter index: divisor of an integer or
// alignment in bytes of a pointer}, as tilus/runtime/jit.h's specialization_of gives them).
using AotFacts = std::map<int, int64_t>;
// Every integer parameter divisible by 16 and every pointer 16-byte aligned: the facts a launch
// with such arguments specializes on.
AotFacts aot_all_specialized(const Program& traced);

// A size bucket: integer parameter `param` (its index) within [lo, hi].
struct AotRange {
  int param = -1;
  int64_t lo = std::numeric_limits<int64_t>::min();
  int64_t hi = std::numeric_limits<int64_t>::max();
};

namespace detail {
// The C text of an integer expression over `vars` (named `names` in C) as a bundle evaluates it:
// tilus's wrapping integer semantics, `tilus_bad` set where evaluate() has no value (division by
// zero, shifts out of range). Needs tilus_aot_runtime.h's helpers. For tests.
std::string aot_c_expression(const Expr& e, const std::vector<Var>& vars, const std::vector<std::string>& names);
}  // namespace detail

class AotBundle {
 public:
  // `name`: a C identifier, the prefix of every function of the bundle.
  explicit AotBundle(std::string name);

  // Compiles a traced, unspecialized program (compile-time constants already bound) for each
  // arch ("sm_90a", "sm_80", ...) and each specialization (default: all specialized, then
  // none, which takes any arguments); the C function is <bundle>_<name>. Throws CompileError
  // for a program the bundle cannot call from C (a by-value or float16 scalar parameter, a
  // grid that is not an integer expression of the parameters).
  //
  // `when` makes the program a size bucket of the function: it serves only calls whose integer
  // parameters lie in those ranges. Several programs (configurations, or altogether different
  // Scripts with the same C signature) may be added under one name, each with its `when`; the
  // function tries them in the order they were added, and the last may have no `when` (any size).
  void add(const std::string& name, const Program& traced, const std::vector<std::string>& archs,
           std::vector<AotFacts> specializations = {}, DiskCache* cache = &default_cache(),
           std::vector<AotRange> when = {});

  // The generated files (written by write()).
  std::string header() const;
  std::string source() const;
  // The runtime's files: tilus_aot_runtime.h and the driver types it includes, tilus_cu_types.h.
  static const std::vector<std::pair<std::string, std::string>>& runtime();
  std::string cmake() const;            // CMakeLists.txt: a static library named after the bundle

  // Writes the bundle's files into `dir` (created when missing); returns their paths.
  std::vector<std::string> write(const std::string& dir) const;

  const std::string& name() const { return name_; }

 private:
  struct Variant {
    AotFacts facts;
    CompiledKernel kernel;
    std::vector<AotRange> when;  // its bucket's ranges (empty: any size)
  };
  struct Entry {
    std::string name;  // <bundle>_<name>
    std::vector<Variant> variants;  // in the order the launch function tries them
    SourceLoc loc;
  };
  std::string name_;
  std::vector<Entry> entries_;
};

}  // namespace tilus
