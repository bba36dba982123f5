// NVRTC: CUDA C++ -> cubin, in process, without a GPU.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tilus/ir/error.h"

namespace tilus {

// What ptxas reports about a compiled kernel (-1: not reported). Registers are per thread,
// the rest bytes per thread; spills land in local memory, which is slow.
struct KernelResources {
  int registers = -1;
  int64_t stack_frame_bytes = -1;
  int64_t spill_store_bytes = -1;
  int64_t spill_load_bytes = -1;
  // ptxas's reason when it made every wgmma of the kernel wait for the one before (its C75xx
  // "Potential Performance Loss" remarks: a function call such as device printf, a blockIdx read
  // inside the loop of wgmma, ...), else empty.
  std::string wgmma_serialized;
  bool known() const { return registers >= 0; }
  bool spills() const { return spill_store_bytes > 0 || spill_load_bytes > 0; }
  // "40 registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
  std::string str() const;
};

// Where NVRTC's time went (NVRTC's --time report, milliseconds; -1: not measured).
struct NvrtcTiming {
  double front_end_ms = -1;  // "CUDA C++ Frontend": preprocessing, parsing, NVVM IR generation
  double optimizer_ms = -1;  // "NVVM Optimizer"
  double ptxas_ms = -1;      // "PTX Translation": ptxas, PTX to SASS
  std::vector<std::pair<std::string, double>> phases;  // every row of the report, in its order
};

// What a compile did with a precompiled device header (NvrtcCompileOptions::pch_dir).
enum class PchUse {
  None,     // compiled without one (none asked for, not usable for this source, or being made)
  Created,  // this compile wrote it (as a side effect: the compile is otherwise as without)
  Used,     // this compile read it instead of parsing the device header library
};
const char* to_string(PchUse use);

// How nvrtc_compile goes about a compile. None of these changes the generated code (the SASS of
// every example is the same with and without each; tests/cpp/test_nvrtc.cpp checks it).
struct NvrtcCompileOptions {
  // A directory for precompiled device headers ("": none). The first compile of a process for
  // a given arch, option set and header variant writes one there as a side effect; later
  // compiles in the process read it instead of parsing the headers again. NVRTC ties a PCH to
  // the address of its PCH heap in the process that made it, so a file serves only its own
  // process (and forks of it): it is named after the host and the pid, and removed at exit.
  // A file that changes under the process is not used (one warning) and is made again.
  std::string pch_dir;
  // Hand NVRTC only the parts of the device header library the source needs: no cuda_bf16.h
  // when the source names no bfloat16, no cuda_fp16.h either when it names no half
  // (device_header_defines).
  bool minimal_header = true;
  // Fill NvrtcOutput::timing from NVRTC's --time report (a temporary file).
  bool time_phases = false;
  // The device header library to compile with (nullptr: the embedded one, device_headers()).
  const std::vector<std::pair<std::string, std::string>>* headers = nullptr;
};

struct NvrtcOutput {
  std::vector<char> cubin;
  std::string ptx;
  std::string log;                   // compiler warnings (empty when clean)
  std::vector<std::string> options;  // the options that decide the code (no PCH or --time options)
  KernelResources resources;         // from ptxas's report (NVRTC 12 and newer)
  PchUse pch = PchUse::None;         // what the compile did with a precompiled header
  std::string pch_file;              // the PCH file it created or used ("" with PchUse::None)
  double wall_ms = 0;                // nvrtcCompileProgram's wall-clock time
  NvrtcTiming timing;                // with NvrtcCompileOptions::time_phases
};

// Thrown when NVRTC rejects the source: the message holds the NVRTC log and, for each
// line the log names, the generated source lines around it.
class NvrtcError : public Error {
 public:
  using Error::Error;
};

// Compiles `source` (with the embedded device headers available as "tilus/device.h") for
// `arch` ("sm_80", "sm_90a", ...) to a cubin (and its PTX), with -lineinfo. `name` names the
// program in messages.
NvrtcOutput nvrtc_compile(const std::string& source, const std::string& name, const std::string& arch,
                          const std::vector<std::string>& extra_options = {},
                          const NvrtcCompileOptions& compile_options = {});
// The -D options that select the device header variant `source` needs: -DTILUS_DEVICE_NO_BF16
// when it never names a bfloat16 ("bfloat16", "bf16"), and -DTILUS_DEVICE_NO_FP16 as well when
// it never names a half either ("half", or an fp16 intrinsic "__h..."). A superset is always
// safe: a source that mentions a type only in a comment just parses one more header.
std::vector<std::string> device_header_defines(const std::string& source);
// The PCH files this process made and still keeps, for tests and diagnostics.
std::vector<std::string> nvrtc_pch_files();
// The options nvrtc_compile passes for `arch` (before extra_options and the header variant's
// -D options, which follow from the source); part of the cache key.
// They include ptxas's verbose report (NVRTC 12 and newer), which gives `resources`.
std::vector<std::string> nvrtc_options(const std::string& arch);
// The resources of ptxas's verbose report ("Used 40 registers", "... bytes spill stores").
// With `kernel`, that kernel's part of a report that lists several.
KernelResources parse_ptxas_report(const std::string& log, const std::string& kernel = "");
// The registers per thread and the stack frame bytes per thread (spills included) that a cubin
// records for `kernel` (-1: not found); what nvrtc_compile reports when ptxas's log has no report
// (NVRTC on the GPU machine leaves it out of some compiles' logs, at random). The spill bytes are
// only in the report; complete_resources_from_cubin infers them where the frame is empty.
int cubin_register_count(const std::vector<char>& cubin, const std::string& kernel);
int64_t cubin_frame_bytes(const std::vector<char>& cubin, const std::string& kernel);
// What the cubin says of `kernel` where `r` (ptxas's report) says nothing: its registers and stack
// frame; and no spills when the frame is empty (spills live in the frame), else spills stay -1.
void complete_resources_from_cubin(KernelResources& r, const std::vector<char>& cubin, const std::string& kernel);
// NVRTC's version as major*1000 + minor*10 (e.g. 13000); part of the cache key.
int nvrtc_version();
// True when tilus was built with NVRTC.
bool nvrtc_available();

// The device header library the emitted code includes, as (include name, text) pairs.
const std::vector<std::pair<std::string, std::string>>& device_headers();

}  // namespace tilus
