#pragma once

#include <string>

namespace tessera {

// This machine's CPU as /proc/cpuinfo names it ("AMD EPYC 9B45"), printed beside every figure
// that depends on it; "an unnamed CPU" where the file says nothing.
std::string cpu_model_name();

}  // namespace tessera
