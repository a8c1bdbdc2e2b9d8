#include "tessera/ckpt/manifest.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_set>

#include "tessera/core/checksum.h"
#include "tessera/core/error.h"
#include "tessera/core/json_file.h"
#include "tessera/core/json_reader.h"

namespace tessera::ckpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Shape is built from an initializer list only, so dispatch on the rank.
Shape shape_from_dims(const std::vector<int64_t>& d) {
  switch (d.size()) {
    case 0:
      return Shape{};
    case 1:
      return Shape{d[0]};
    case 2:
      return Shape{d[0], d[1]};
    case 3:
      return Shape{d[0], d[1], d[2]};
    case 4:
      return Shape{d[0], d[1], d[2], d[3]};
  }
  fail("shape of rank {} exceeds the maximum rank {}", d.size(), Shape::kMaxRank);
}

Manifest::Entry parse_entry(const JsonReader& r, const json& t, const std::string& at) {
  if (!t.is_object()) r.wrong_type(t, at, "an object");
  Manifest::Entry e;
  e.name = r.string(r.field(t, "name", at + ".name"), at + ".name");
  if (e.name.empty()) r.bad(at + ".name", "must not be empty");

  const json& shape = r.field(t, "shape", at + ".shape");
  if (!shape.is_array()) r.wrong_type(shape, at + ".shape", "an array");
  if (shape.size() > Shape::kMaxRank) {
    r.bad(at + ".shape",
          fmt::format("has rank {}, above the maximum {}", shape.size(), int{Shape::kMaxRank}));
  }
  std::vector<int64_t> dims;
  int64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    std::string dim_at = fmt::format("{}.shape[{}]", at, i);
    int64_t d = r.int64(shape[i], dim_at);
    if (d < 0) r.bad(dim_at, "must not be negative");
    if (__builtin_mul_overflow(numel, d, &numel)) r.bad(at + ".shape", "has too many elements");
    dims.push_back(d);
  }
  e.shape = shape_from_dims(dims);

  std::string dtype = r.string(r.field(t, "dtype", at + ".dtype"), at + ".dtype");
  const std::vector<std::string_view> dtypes = enum_choices<DType>();
  if (std::find(dtypes.begin(), dtypes.end(), dtype) == dtypes.end()) {
    r.bad(at + ".dtype", fmt::format("must be {}, got \"{}\"", quoted_choices(dtypes), dtype));
  }
  e.dtype = enum_from_name<DType>(dtype, at + ".dtype");

  e.file = r.string(r.field(t, "file", at + ".file"), at + ".file");
  if (e.file.empty() || e.file == "." || e.file == ".." || e.file.find('/') != std::string::npos ||
      e.file.find('\0') != std::string::npos) {
    r.bad(at + ".file",
          fmt::format("must be a file name inside the step directory, got '{}'", e.file));
  }
  e.offset = r.uint64(r.field(t, "offset", at + ".offset"), at + ".offset");
  e.nbytes = r.uint64(r.field(t, "nbytes", at + ".nbytes"), at + ".nbytes");
  uint64_t expected = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(e.dtype), &expected) ||
      e.nbytes != expected) {
    r.bad(at + ".nbytes", fmt::format("is {} but shape {} of {} needs {} bytes", e.nbytes,
                                      e.shape.str(), dtype, expected));
  }
  uint64_t end;
  if (__builtin_add_overflow(e.offset, e.nbytes, &end)) r.bad(at + ".offset", "is out of range");
  uint64_t crc = r.uint64(r.field(t, "crc32", at + ".crc32"), at + ".crc32");
  if (crc > 0xffffffffu) r.bad(at + ".crc32", "does not fit in 32 bits");
  e.crc32 = static_cast<uint32_t>(crc);
  return e;
}

}  // namespace

json manifest_to_json(const Manifest& manifest) {
  json tensors = json::array();
  for (const Manifest::Entry& e : manifest.tensors) {
    json shape = json::array();
    for (int i = 0; i < e.shape.rank(); ++i) shape.push_back(e.shape[i]);
    tensors.push_back({{"name", e.name},
                       {"shape", shape},
                       {"dtype", std::string(enum_name(e.dtype))},
                       {"file", e.file},
                       {"offset", e.offset},
                       {"nbytes", e.nbytes},
                       {"crc32", e.crc32}});
  }
  json j = {{"format", kFormatName},         {"version", kFormatVersion},
            {"step", manifest.step},         {"world_size", manifest.world_size},
            {"metadata", manifest.metadata}, {"tensors", tensors}};
  j[kManifestChecksumKey] = manifest_checksum(j);
  return j;
}

uint32_t manifest_checksum(const json& j) {
  json rest = j;
  rest.erase(kManifestChecksumKey);
  const std::string text = rest.dump();
  return crc32(text.data(), text.size());
}

Manifest parse_manifest(const json& j, const std::string& source) {
  JsonReader r(source);
  if (!j.is_object()) r.wrong_type(j, "(top level)", "an object");
  std::string format = r.string(r.field(j, "format", "format"), "format");
  if (format != kFormatName) {
    r.bad("format", fmt::format("is '{}', expected '{}'", format, kFormatName));
  }
  int64_t version = r.int64(r.field(j, "version", "version"), "version");
  if (version == 1) {
    r.bad("version",
          fmt::format("is 1, written by an earlier Tessera whose manifests carry no checksum; "
                      "this build reads version {}: export the checkpoint with that build "
                      "(tessera convert export) and import the folder with this one "
                      "(tessera convert import)",
                      kFormatVersion));
  }
  if (version != kFormatVersion) {
    r.bad("version", fmt::format("is {}; this build reads version {}", version, kFormatVersion));
  }
  const uint64_t stored =
      r.uint64(r.field(j, kManifestChecksumKey, kManifestChecksumKey), kManifestChecksumKey);
  const uint32_t actual = manifest_checksum(j);
  if (stored != actual) {
    fail("{}: checksum mismatch: the manifest is corrupted ({} is {}, its contents give {})",
         source, kManifestChecksumKey, stored, actual);
  }
  int64_t world_size = r.int64(r.field(j, "world_size", "world_size"), "world_size");
  if (world_size < 1) r.bad("world_size", fmt::format("is {}; it must be at least 1", world_size));

  Manifest m;
  m.world_size = world_size;
  m.step = r.int64(r.field(j, "step", "step"), "step");
  if (m.step < 0) r.bad("step", "must not be negative");
  m.metadata = r.field(j, "metadata", "metadata");
  const json& tensors = r.field(j, "tensors", "tensors");
  if (!tensors.is_array()) r.wrong_type(tensors, "tensors", "an array");
  std::unordered_set<std::string> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string at = fmt::format("tensors[{}]", i);
    m.tensors.push_back(parse_entry(r, tensors[i], at));
    if (!names.insert(m.tensors.back().name).second) {
      r.bad(at + ".name", fmt::format("repeats the name '{}'", m.tensors.back().name));
    }
  }
  return m;
}

Manifest read_manifest(const fs::path& step_dir) {
  fs::path path = step_dir / kManifestFile;
  Manifest m = parse_manifest(read_json_file(path, "the checkpoint manifest"), path.string());
  const fs::path dir = step_dir.lexically_normal();
  const std::string name =
      (dir.has_filename() ? dir.filename() : dir.parent_path().filename()).string();
  if (const std::optional<int64_t> named = parse_step_dir_name(name)) {
    check(*named == m.step,
          "{}: field 'step' is {}, but the folder is {}: the manifest belongs to another step "
          "(a step folder must keep its name)",
          path.string(), m.step, name);
  }
  return m;
}

std::string step_dir_name(int64_t step) { return fmt::format("step-{:06d}", step); }

std::optional<int64_t> parse_step_dir_name(const std::string& name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) {
    return std::nullopt;
  }
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size();
  if (!std::all_of(first, last, [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int64_t step = 0;
  auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last) return std::nullopt;
  return step;
}

}  // namespace tessera::ckpt
