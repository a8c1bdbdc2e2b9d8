#include "tessera/interop/gguf_names.h"

#include <fmt/format.h>

#include "tessera/core/error.h"

namespace tessera::interop {
namespace {

// The GGUF tensors of `parts`: Tessera's names after `param_prefix`, GGUF's after `gguf_prefix`.
void add_parts(const std::vector<model::Part>& parts, const std::string& param_prefix,
               const std::string& gguf_prefix, std::vector<GgufSlice>& out) {
  for (const model::Part& p : parts) {
    const std::string param = param_prefix + p.name;
    for (const model::ExternalSlice& slice : p.external) {
      check(!slice.gguf.empty() && p.stack == 1, "{}: GGUF has no tensor for it", param);
    }
    const std::string first = gguf_prefix + p.external[0].gguf;
    if (p.kind == model::PartKind::kNorm) {
      out.push_back({.gguf = first + ".weight", .param = param + ".weight", .vector = true});
      if (p.bias)
        out.push_back({.gguf = first + ".bias", .param = param + ".bias", .vector = true});
      continue;
    }
    int64_t row = 0;
    for (const model::ExternalSlice& slice : p.external) {
      const int64_t rows = slice.rows > 0 ? slice.rows : p.out;
      out.push_back({.gguf = gguf_prefix + slice.gguf + ".weight",
                     .param = param + ".weight",
                     .row = row,
                     .rows = rows,
                     .rope_heads = slice.gguf_rope_heads});
      row += rows;
    }
    if (p.bias) {
      check(p.external.size() == 1, "{}: a part split into several GGUF tensors has no bias",
            param);
      out.push_back({.gguf = first + ".bias", .param = param + ".bias", .vector = true});
    }
  }
}

}  // namespace

std::vector<GgufSlice> gguf_slices(const model::ModelSpec& spec) {
  std::vector<GgufSlice> out;
  add_parts(spec.embedding, "", "", out);
  for (int64_t l = 0; l < spec.n_layer; ++l) {
    add_parts(spec.block.parts, fmt::format("blocks.{}.", l),
              fmt::format(fmt::runtime(spec.gguf_block_prefix), l), out);
  }
  add_parts(spec.head, "", "", out);
  return out;
}

}  // namespace tessera::interop
