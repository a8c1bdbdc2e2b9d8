#include <fmt/format.h>

#include <cstdio>
#include <dnnl.hpp>
#include <string>
#include <vector>

#include "tessera/cli/flags.h"
#include "tessera/core/cpu_model.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/int8_linear.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/q4_linear.h"

namespace tessera::cli {
namespace {

struct CpuFeature {
  const char* name;
  bool compiled_in;  // the compiler may emit its instructions anywhere in this binary
  bool on_this_cpu;
};

// __builtin_cpu_supports takes only a string literal, hence a macro per feature.
#define TESSERA_FEATURE(name, macro) \
  CpuFeature { name, macro, bool(__builtin_cpu_supports(name)) }

std::vector<CpuFeature> cpu_features() {
  return {
#ifdef __AVX2__
      TESSERA_FEATURE("avx2", true),
#else
      TESSERA_FEATURE("avx2", false),
#endif
#ifdef __FMA__
      TESSERA_FEATURE("fma", true),
#else
      TESSERA_FEATURE("fma", false),
#endif
#ifdef __AVX512F__
      TESSERA_FEATURE("avx512f", true),
#else
      TESSERA_FEATURE("avx512f", false),
#endif
#ifdef __AVX512BW__
      TESSERA_FEATURE("avx512bw", true),
#else
      TESSERA_FEATURE("avx512bw", false),
#endif
#ifdef __AVX512VNNI__
      TESSERA_FEATURE("avx512vnni", true),
#else
      TESSERA_FEATURE("avx512vnni", false),
#endif
#ifdef __AVX512BF16__
      TESSERA_FEATURE("avx512bf16", true),
#else
      TESSERA_FEATURE("avx512bf16", false),
#endif
#ifdef __AMX_BF16__
      CpuFeature{"amx-bf16", true, cpu_has_amx_bf16()},
#else
      CpuFeature{"amx-bf16", false, cpu_has_amx_bf16()},
#endif
  };
}

// Whether the CUDA backend is in this build, and the devices it sees here.
std::string cuda_line() {
  if (!kernels::cuda_backend_built()) return "not compiled in (this build runs on the CPU only)";
  std::string line = "compiled in (sm_80, sm_90; cuBLASLt, NCCL)";
  const int devices = kernels::cuda_device_count();
  if (devices == 0) return line + "; " + kernels::cuda_unavailable_reason();
  for (int d = 0; d < devices; ++d) {
    const kernels::CudaDeviceInfo info = kernels::cuda_device_info(d);
    line += fmt::format("; device {}: {} (sm_{}{}, {:.0f} GiB)", d, info.name, info.compute_major,
                        info.compute_minor, double(info.memory_bytes) / double(1 << 30));
  }
  return line;
}

}  // namespace

int version_command() {
  std::string compiled, present, missing;
  for (const CpuFeature& f : cpu_features()) {
    if (f.compiled_in) compiled += fmt::format(" {}", f.name);
    if (f.on_this_cpu) present += fmt::format(" {}", f.name);
    if (f.compiled_in && !f.on_this_cpu) missing += fmt::format(" {}", f.name);
  }
  const dnnl_version_t* dnnl = dnnl_version();
  std::printf("tessera %s (%s build, g++ %d.%d.%d)\n", TESSERA_VERSION, TESSERA_BUILD_TYPE,
              __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
  std::printf("compiled for:%s\n", compiled.empty() ? " baseline x86-64" : compiled.c_str());
  std::printf("this CPU:     %s:%s\n", cpu_model_name().c_str(), present.c_str());
  if (!missing.empty()) {
    std::printf("warning: this CPU lacks%s, which this build uses: rebuild on this machine\n",
                missing.c_str());
  }
  std::printf("matmuls:      f32 oneDNN %d.%d.%d sgemm; bf16 %s; int8 prefill %s; q4_0 and q4_k %s\n",
              dnnl->major, dnnl->minor, dnnl->patch,
              kernels::low_precision_gemm_path(kernels::LowPrecision::kBf16).c_str(),
              kernels::int8_prefill_path(), kernels::q4_linear_path());
  std::printf("CUDA:         %s\n", cuda_line().c_str());
  return 0;
}

}  // namespace tessera::cli
