// GGUF files are outside input: any bytes must parse into tensors inside the data section that
// decode to f32, and import as a model and a vocabulary, or fail with a tessera::Error.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/interop/gguf_import.h"
#include "tessera/interop/gguf_tokenizer.h"
#include "tessera/interop/gguf_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<tessera::interop::GgufFile> file;
  try {
    file.emplace(std::span<const uint8_t>(data, size), "fuzz.gguf");
  } catch (const tessera::Error&) {
    return 0;
  }
  const tessera::interop::GgufHeader& h = file->header();
  for (const tessera::interop::GgufTensor& t : h.tensors) {
    // The reader promised every tensor inside the file, so reading it is bounded by its size.
    if (h.data_start + t.offset + t.bytes > size) std::abort();
    try {
      file->read(t);
    } catch (const tessera::Error&) {
    }
  }
  try {
    tessera::interop::import_gguf(*file);
  } catch (const tessera::Error&) {
  }
  try {
    tessera::interop::import_gguf_vocab(*file);
  } catch (const tessera::Error&) {
  }
  return 0;
}
