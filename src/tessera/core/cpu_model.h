#pragma once

#include <string>

namespace tessera {

// This machine's CPU as /proc/cpuinfo names it ("AMD EPYC 9B45"), printed beside every figure
// that depends on it; "an unnamed CPU" where the file says nothing.
std::string cpu_model_name();

// Whether this CPU multiplies bf16 tiles with AMX and the OS keeps their state (CPUID leaf 7's
// AMX-BF16 bit, XCR0's tile bits). Asked of CPUID itself: clang 14's __builtin_cpu_supports does
// not know "amx-bf16".
bool cpu_has_amx_bf16();

}  // namespace tessera
