// NVRTC: CUDA C++ -> cubin, in process, without a GPU.
#pragma once

#include <string>
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
  bool known() const { return registers >= 0; }
  bool spills() const { return spill_store_bytes > 0 || spill_load_bytes > 0; }
  // "40 registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
  std::string str() const;
};

struct NvrtcOutput {
  std::vector<char> cubin;
  std::string ptx;
  std::string log;                   // compiler warnings (empty when clean)
  std::vector<std::string> options;  // the options used (part of the cache key)
  KernelResources resources;         // from ptxas's report (NVRTC 12 and newer)
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
                          const std::vector<std::string>& extra_options = {});
// The options nvrtc_compile passes for `arch` (before extra_options); part of the cache key.
// They include ptxas's verbose report (NVRTC 12 and newer), which gives `resources`.
std::vector<std::string> nvrtc_options(const std::string& arch);
// The resources of ptxas's verbose report ("Used 40 registers", "... bytes spill stores").
// With `kernel`, that kernel's part of a report that lists several.
KernelResources parse_ptxas_report(const std::string& log, const std::string& kernel = "");
// The registers per thread that a cubin records for `kernel` (-1: not found); what
// nvrtc_compile reports when ptxas's log has no report.
int cubin_register_count(const std::vector<char>& cubin, const std::string& kernel);
// NVRTC's version as major*1000 + minor*10 (e.g. 13000); part of the cache key.
int nvrtc_version();
// True when tilus was built with NVRTC.
bool nvrtc_available();

// The device header library the emitted code includes, as (include name, text) pairs.
const std::vector<std::pair<std::string, std::string>>& device_headers();

}  // namespace tilus
