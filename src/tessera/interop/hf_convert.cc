#include "tessera/interop/hf_convert.h"

#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "tessera/core/error.h"
#include "tessera/core/json_file.h"
#include "tessera/core/text_corpus.h"
#include "tessera/core/utf8.h"
#include "tessera/interop/hf_names.h"
#include "tessera/interop/safetensors.h"
#include "tessera/model/model_layout.h"

namespace tessera::interop {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string shape_str(const std::vector<int64_t>& shape) { return json(shape).dump(); }

// dst[width, rows] = the transpose of src[rows, width].
void transpose(const float* src, float* dst, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) dst[c * rows + r] = src[r * width + c];
  }
}

// The tensors of a model folder, by name, across however many safetensors files hold them.
class WeightFiles {
 public:
  explicit WeightFiles(const fs::path& dir) : source_((dir / kHfWeightsFile).string()) {
    std::error_code ec;
    if (fs::exists(dir / kHfWeightsFile, ec)) {
      add(dir / kHfWeightsFile);
      return;
    }
    const fs::path index = dir / kHfIndexFile;
    source_ = index.string();
    check(fs::exists(index, ec), "{}: holds neither {} nor {}", dir.string(), kHfWeightsFile,
          kHfIndexFile);
    const json j = read_json_file(index);
    check(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
          "{}: expected an object with a 'weight_map' object", index.string());
    std::map<std::string, std::string> placed;
    for (const auto& [name, file] : j["weight_map"].items()) {
      check(file.is_string(), "{}: weight_map['{}'] must be a file name", index.string(),
            printable(name));
      const std::string f = file.get<std::string>();
      check(!f.empty() && f.find('/') == std::string::npos && f != "." && f != "..",
            "{}: weight_map['{}'] = '{}' must be a plain file name in the folder", index.string(),
            printable(name), printable(f));
      placed[name] = f;
    }
    std::set<std::string> shards;
    for (const auto& [name, f] : placed) shards.insert(f);
    for (const std::string& f : shards) add(dir / f);
    for (const auto& [name, f] : placed) {
      auto it = tensors_.find(name);
      check(it != tensors_.end() && fs::path(it->second.file->source()).filename() == f,
            "{}: weight_map places tensor '{}' in {}, which does not hold it", index.string(),
            printable(name), printable(f));
    }
  }

  struct Located {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
  };

  const Located* find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, Located>& all() const { return tensors_; }
  // The single weights file, or the index of the shards.
  const std::string& source() const { return source_; }

  std::vector<float> read(const std::string& name) const {
    const Located& t = tensors_.at(name);
    std::vector<float> values(size_t(t.entry->numel()));
    t.file->read_f32(*t.entry, values);
    return values;
  }

 private:
  void add(const fs::path& path) {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    const SafetensorsFile& file = *files_.back();
    for (const SafetensorsEntry& e : file.header().tensors) {
      auto [it, inserted] = tensors_.emplace(e.name, Located{&file, &e});
      check(inserted, "{}: tensor '{}' is also in {}", file.source(), printable(e.name),
            it->second.file->source());
    }
  }

  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located> tensors_;
};

}  // namespace

std::string export_hf(const model::ModelConfig& config, std::span<const float> params,
                      const fs::path& dir, DType dtype) {
  model::check_runnable(config);
  const model::ModelLayout layout = model::model_layout(config);
  const HfLayout hf = hf_layout(config);
  check(int64_t(params.size()) == layout.params.total(),
        "export: {} parameter values given, the model's layout holds {}", params.size(),
        layout.params.total());
  std::vector<SafetensorsTensor> tensors;
  for (const HfTensor& t : hf.tensors) {
    const HfSlice s = hf_slice(layout, t);
    const float* src = params.data() + s.offset;
    tensors.push_back({t.hf_name, t.hf_shape, [src, s, &t](std::span<float> out) {
                         if (t.transposed) {
                           transpose(src, out.data(), t.rows, s.width);
                         } else {
                           std::memcpy(out.data(), src, out.size() * sizeof(float));
                         }
                       }});
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, "{}: cannot create the folder: {}", dir.string(), ec.message());
  write_safetensors(dir / kHfWeightsFile, tensors, dtype, {{"format", "pt"}});
  const fs::path config_path = dir / kHfConfigFile;
  std::ofstream out(config_path, std::ios::binary | std::ios::trunc);
  out << hf_config_json(config, dtype).dump(2) << "\n";
  out.close();
  check(out.good(), "{}: cannot write", config_path.string());
  return hf.architecture;
}

bool is_hf_model_folder(const fs::path& dir) {
  return is_file(dir / kHfConfigFile) &&
         (is_file(dir / kHfWeightsFile) || is_file(dir / kHfIndexFile));
}

model::ModelConfig read_hf_model_config(const fs::path& dir) {
  const fs::path config_path = dir / kHfConfigFile;
  return model_config_from_hf(read_json_file(config_path), config_path.string());
}

HfImport import_hf(const fs::path& dir) {
  HfImport result;
  result.config = read_hf_model_config(dir);
  const model::ModelLayout layout = model::model_layout(result.config);
  const HfLayout hf = hf_layout(result.config);
  result.architecture = hf.architecture;
  const WeightFiles files(dir);

  // GPT2Model checkpoints (the Hub's gpt2) store the same tensors without "transformer.".
  const std::string gpt2_prefix = "transformer.";
  const bool bare = result.config.arch == model::Architecture::kGpt2 &&
                    !files.find("transformer.wte.weight") && files.find("wte.weight");
  auto file_name = [&](const std::string& name) {
    return bare && name.starts_with(gpt2_prefix) ? name.substr(gpt2_prefix.size()) : name;
  };

  // Names and shapes first, so a wrong file fails before any tensor is read.
  std::set<std::string> expected;
  for (const HfTensor& t : hf.tensors) {
    const std::string name = file_name(t.hf_name);
    const WeightFiles::Located* found = files.find(name);
    check(found != nullptr, "{}: missing tensor '{}' (Tessera parameter '{}')", files.source(),
          name, t.param);
    check(found->entry->shape == t.hf_shape,
          "{}: tensor '{}' has shape {}, but config.json implies {}", found->file->source(), name,
          shape_str(found->entry->shape), shape_str(t.hf_shape));
    expected.insert(name);
  }
  for (const auto& [name, where] : files.all()) {
    if (expected.count(name) || is_hf_buffer(result.config.arch, name)) continue;
    check(!hf.tied_head.empty() && name == hf.tied_head,
          "{}: unexpected tensor '{}': a {} with this config.json has no such parameter",
          where.file->source(), printable(name), hf.architecture);
    check(files.read(name) == files.read(file_name(hf.tied_to)),
          "{}: tensor '{}' differs from '{}', but config.json ties them (tie_word_embeddings)",
          where.file->source(), name, file_name(hf.tied_to));
  }

  result.params.assign(size_t(layout.params.total()), 0.0f);
  for (const HfTensor& t : hf.tensors) {
    const std::vector<float> values = files.read(file_name(t.hf_name));
    const HfSlice s = hf_slice(layout, t);
    float* dst = result.params.data() + s.offset;
    if (t.transposed) {
      transpose(values.data(), dst, s.width, t.rows);
    } else {
      std::memcpy(dst, values.data(), values.size() * sizeof(float));
    }
  }
  return result;
}

}  // namespace tessera::interop
