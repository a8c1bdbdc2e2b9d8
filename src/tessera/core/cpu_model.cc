#include "tessera/core/cpu_model.h"

#include <cpuid.h>

#include <fstream>

namespace tessera {

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "an unnamed CPU";
}

bool cpu_has_amx_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 22))) return false;
  // XGETBV needs OSXSAVE (CPUID leaf 1, ECX bit 27); XCR0 bits 17 and 18 are TILECFG and TILEDATA.
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  constexpr unsigned kTileState = 3u << 17;
  return (xcr0_low & kTileState) == kTileState;
}

}  // namespace tessera
