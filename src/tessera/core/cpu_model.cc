#include "tessera/core/cpu_model.h"

#include <fstream>

namespace tessera {

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "an unnamed CPU";
}

}  // namespace tessera
