// Helpers of the C++ Script's files (internal to src/lang).
#pragma once

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "tilus/lang/script.h"

namespace tilus::script_detail {

inline Tensor barrier_of(const SharedTensor& b) { return b.bound() ? b.tensor() : Tensor(); }
inline std::string sem_or(const MbarrierOptions& o, const char* dflt) { return o.sem.empty() ? dflt : o.sem; }

}  // namespace tilus::script_detail
