#include "tessera/data/dataset_manifest.h"

#include <fstream>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/core/json_file.h"
#include "tessera/core/json_reader.h"
#include "tessera/core/text_corpus.h"

namespace tessera::data {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

json split_to_json(const DatasetSplit& split) {
  return {{"shards", split.shards}, {"tokens", split.tokens}, {"bytes", split.bytes}};
}

DatasetSplit parse_split(const JsonReader& r, const json& j, const std::string& at) {
  if (!j.is_object()) r.wrong_type(j, at, "an object");
  DatasetSplit split;
  const json& shards = r.field(j, "shards", at + ".shards");
  if (!shards.is_array()) r.wrong_type(shards, at + ".shards", "an array");
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string path = fmt::format("{}.shards[{}]", at, i);
    split.shards.push_back(r.string(shards[i], path));
    if (!is_plain_file_name(split.shards.back())) {
      r.bad(path, fmt::format("must be a file name inside the dataset folder, got '{}'",
                              split.shards.back()));
    }
  }
  split.tokens = r.int64(r.field(j, "tokens", at + ".tokens"), at + ".tokens");
  if (split.tokens < 0) r.bad(at + ".tokens", "must not be negative");
  split.bytes = r.int64(r.field(j, "bytes", at + ".bytes"), at + ".bytes");
  if (split.bytes < 0) r.bad(at + ".bytes", "must not be negative");
  return split;
}

}  // namespace

json dataset_manifest_to_json(const DatasetManifest& m) {
  json tokenizer = {{"kind", m.tokenizer_kind}, {"source", m.tokenizer_source}};
  if (!m.tokenizer_copy.empty()) tokenizer["copy"] = m.tokenizer_copy;
  return {{"format", kDatasetFormatName},
          {"version", kDatasetFormatVersion},
          {"tokenizer", tokenizer},
          {"vocab_size", m.vocab_size},
          {"end_of_text", m.end_of_text ? json(*m.end_of_text) : json(nullptr)},
          {"inputs", m.inputs},
          {"train", split_to_json(m.train)},
          {"val", split_to_json(m.val)}};
}

DatasetManifest parse_dataset_manifest(const json& j, const std::string& source) {
  JsonReader r(source);
  if (!j.is_object()) r.wrong_type(j, "(top level)", "an object");
  const std::string format = r.string(r.field(j, "format", "format"), "format");
  if (format != kDatasetFormatName) {
    r.bad("format", fmt::format("is '{}', expected '{}'", format, kDatasetFormatName));
  }
  const int64_t version = r.int64(r.field(j, "version", "version"), "version");
  if (version != kDatasetFormatVersion) {
    r.bad("version",
          fmt::format("is {}; this build reads version {}", version, kDatasetFormatVersion));
  }
  DatasetManifest m;
  const json& tokenizer = r.field(j, "tokenizer", "tokenizer");
  if (!tokenizer.is_object()) r.wrong_type(tokenizer, "tokenizer", "an object");
  m.tokenizer_kind = r.string(r.field(tokenizer, "kind", "tokenizer.kind"), "tokenizer.kind");
  m.tokenizer_source =
      r.string(r.field(tokenizer, "source", "tokenizer.source"), "tokenizer.source");
  if (tokenizer.contains("copy")) {
    m.tokenizer_copy = r.string(tokenizer["copy"], "tokenizer.copy");
    if (!is_plain_file_name(m.tokenizer_copy)) {
      r.bad("tokenizer.copy", "must be a folder name inside the dataset folder");
    }
  }
  m.vocab_size = r.int64(r.field(j, "vocab_size", "vocab_size"), "vocab_size");
  if (m.vocab_size < 1 || m.vocab_size > INT32_MAX) r.bad("vocab_size", "is outside [1, 2^31)");
  const json& eot = r.field(j, "end_of_text", "end_of_text");
  if (!eot.is_null()) {
    const int64_t id = r.int64(eot, "end_of_text");
    if (id < 0 || id >= m.vocab_size) r.bad("end_of_text", "is outside the vocabulary");
    m.end_of_text = int32_t(id);
  }
  const json& inputs = r.field(j, "inputs", "inputs");
  if (!inputs.is_array()) r.wrong_type(inputs, "inputs", "an array");
  for (size_t i = 0; i < inputs.size(); ++i) {
    m.inputs.push_back(r.string(inputs[i], fmt::format("inputs[{}]", i)));
  }
  m.train = parse_split(r, r.field(j, "train", "train"), "train");
  m.val = parse_split(r, r.field(j, "val", "val"), "val");
  return m;
}

DatasetManifest read_dataset_manifest(const fs::path& dataset_dir) {
  const fs::path path = dataset_dir / kDatasetManifestFile;
  check(is_file(path), "{}: no dataset manifest (is this a prepared dataset?)", path.string());
  return parse_dataset_manifest(read_json_file(path, "the dataset manifest"), path.string());
}

void write_dataset_manifest(const fs::path& dataset_dir, const DatasetManifest& manifest) {
  const fs::path path = dataset_dir / kDatasetManifestFile;
  const fs::path tmp = dataset_dir / (std::string(kDatasetManifestFile) + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary);
    out << dataset_manifest_to_json(manifest).dump(2) << "\n";
    check(out.good(), "{}: cannot write the dataset manifest", tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);  // atomic, so a reader never sees half a manifest
  check(!ec, "{}: cannot write the dataset manifest ({})", path.string(), ec.message());
}

bool is_dataset_dir(const fs::path& path) { return is_file(path / kDatasetManifestFile); }

std::string dataset_tokenizer(const fs::path& dataset_dir, const DatasetManifest& manifest) {
  if (manifest.tokenizer_copy.empty()) return manifest.tokenizer_kind;
  return (dataset_dir / manifest.tokenizer_copy).string();
}

}  // namespace tessera::data
