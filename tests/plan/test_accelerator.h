// An accelerator with round figures for tests of the planner's arithmetic.
#pragma once

#include "tessera/plan/hardware.h"

namespace tessera::plan {

inline Accelerator test_gpu() {
  Accelerator a;
  a.name = "test";
  a.kind = "gpu";
  a.peak_bf16_flops = 1e15;
  a.hbm_bytes = 1e12;
  a.hbm_bandwidth = 3e12;
  a.scaleup_domain = 8;
  a.scaleup_bandwidth = 4e11;
  a.scaleout_bandwidth = 5e10;
  a.latency = {.start = 1e-5, .scaleup_step = 3e-6, .scaleout_step = 1.5e-5};
  a.matmul = {.peak_fraction = 0.8, .half_width = 2000, .source = "round figures"};
  return a;
}

}  // namespace tessera::plan
