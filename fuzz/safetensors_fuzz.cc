// safetensors files are outside input: any bytes must parse into tensors that tile the data
// section exactly, each readable as f32 when its dtype converts, or fail with a tessera::Error.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/interop/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> file(data, size);
  tessera::interop::SafetensorsHeader header;
  try {
    header = tessera::interop::parse_safetensors(file, "fuzz.safetensors");
  } catch (const tessera::Error&) {
    return 0;
  }
  const std::span<const uint8_t> section = file.subspan(header.data_start);
  uint64_t covered = 0;
  std::vector<float> values;
  for (const tessera::interop::SafetensorsEntry& e : header.tensors) {
    // The reader promised a tiling of the data section in order.
    if (e.begin != covered || e.end < e.begin || e.end > section.size()) std::abort();
    covered = e.end;
    // Only tensors up to the data section's size can be valid, so this allocation is bounded.
    values.resize(size_t(e.numel()));
    try {
      tessera::interop::convert_to_f32(e, section, values, "fuzz.safetensors");
    } catch (const tessera::Error&) {
    }
  }
  if (covered != section.size()) std::abort();
  return 0;
}
