// NVRTC: CUDA C++ -> cubin, in process, without a GPU.
#pragma once

#include <string>
#include <vector>

#include "tilus/ir/error.h"

namespace tilus {

struct NvrtcOutput {
  std::vector<char> cubin;
  std::string log;                   // compiler warnings (empty when clean)
  std::vector<std::string> options;  // the options used (part of the cache key)
};

// Thrown when NVRTC rejects the source: the message holds the NVRTC log and, for each
// line the log names, the generated source lines around it.
class NvrtcError : public Error {
 public:
  using Error::Error;
};

// Compiles `source` (with the embedded device headers available as "tilus/device.h") for
// `arch` ("sm_80", "sm_90a", ...) to a cubin, with -lineinfo. `name` names the program in
// messages.
NvrtcOutput nvrtc_compile(const std::string& source, const std::string& name, const std::string& arch,
                          const std::vector<std::string>& extra_options = {});
// The options nvrtc_compile passes for `arch` (before extra_options); part of the cache key.
std::vector<std::string> nvrtc_options(const std::string& arch);
// NVRTC's version as major*1000 + minor*10 (e.g. 13000); part of the cache key.
int nvrtc_version();
// True when tilus was built with NVRTC.
bool nvrtc_available();

// The device header library the emitted code includes, as (include name, text) pairs.
const std::vector<std::pair<std::string, std::string>>& device_headers();

}  // namespace tilus
