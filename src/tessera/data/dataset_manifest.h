#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tessera::data {

inline constexpr const char* kDatasetManifestFile = "dataset.json";
inline constexpr const char* kDatasetFormatName = "tessera-dataset";
inline constexpr int kDatasetFormatVersion = 1;

struct DatasetSplit {
  std::vector<std::string> shards;  // file names inside the dataset directory, in stream order
  int64_t tokens = 0;
  int64_t bytes = 0;  // bytes of text those tokens encode: the denominator of bits per byte
};

// dataset.json: what `tessera prepare` produced and from what. It is written last, so a folder
// holding it is a complete dataset.
struct DatasetManifest {
  std::string tokenizer_kind;    // Tokenizer::kind(): "byte", "tessera-bpe", ...
  std::string tokenizer_source;  // what prepare was given: "byte" or the tokenizer directory
  // Folder inside the dataset holding a copy of the tokenizer's files; empty for "byte".
  std::string tokenizer_copy;
  int64_t vocab_size = 0;
  std::optional<int32_t> end_of_text;
  std::vector<std::string> inputs;  // the files read, in order
  DatasetSplit train, val;
};

nlohmann::json dataset_manifest_to_json(const DatasetManifest& manifest);

// Validates every field (outside input); errors name `source` and the field.
DatasetManifest parse_dataset_manifest(const nlohmann::json& json, const std::string& source);

DatasetManifest read_dataset_manifest(const std::filesystem::path& dataset_dir);
void write_dataset_manifest(const std::filesystem::path& dataset_dir,
                            const DatasetManifest& manifest);

// True when path is a folder holding dataset.json.
bool is_dataset_dir(const std::filesystem::path& path);

// What load_tokenizer() takes for this dataset: "byte" or the dataset's tokenizer copy.
std::string dataset_tokenizer(const std::filesystem::path& dataset_dir,
                              const DatasetManifest& manifest);

}  // namespace tessera::data
