#include "tessera/interop/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "tessera/core/checksum.h"
#include "tessera/core/error.h"
#include "tessera/core/utf8.h"

namespace tessera::interop {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

// The reference implementation refuses larger headers; so do we, before parsing one.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";
// Elements converted per write call: large enough for few calls, small enough to stay in cache.
constexpr size_t kWriteChunk = size_t{1} << 20;

// The byte-sized dtypes of the format. Sub-byte ones (F4, F6_*) have no element size and are
// refused as unsupported.
size_t element_size(std::string_view dtype) {
  static const std::map<std::string, size_t, std::less<>> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

// Names come from the file; a newline in one must not break the one-line error.
std::string shown(std::string_view name) { return printable(name); }

// Refuses duplicate keys in any object of the header, which a JSON parser would otherwise
// resolve silently by keeping one of the values.
class DuplicateKeyCheck {
 public:
  explicit DuplicateKeyCheck(const std::string& source) : source_(source) {}
  bool operator()(int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys_.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys_.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        check(keys_.back().insert(key).second, "{}: the header names '{}' twice", source_,
              shown(key));
        break;
      }
      default:
        break;
    }
    return true;
  }

 private:
  const std::string& source_;
  std::vector<std::set<std::string>> keys_;
};

std::map<std::string, std::string> parse_metadata(const json& value, const std::string& source) {
  check(value.is_object(), "{}: {} must be an object of strings, got {}", source, kMetadataKey,
        value.type_name());
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.items()) {
    check(v.is_string(), "{}: {} entry '{}' must be a string, got {}", source, kMetadataKey,
          shown(key), v.type_name());
    metadata[key] = v.get<std::string>();
  }
  return metadata;
}

std::map<std::string, uint32_t> parse_digests(const std::string& text,
                                              const std::vector<SafetensorsEntry>& tensors,
                                              const std::string& source) {
  const std::string where =
      fmt::format("{}: {} entry '{}'", source, kMetadataKey, kSafetensorsDigestsKey);
  json j;
  try {
    j = json::parse(text, DuplicateKeyCheck(source));
  } catch (const json::exception& e) {
    fail("{} is not valid JSON: {}", where, e.what());
  }
  check(j.is_object(), "{} must be a JSON object of tensor name -> crc32, got {}", where,
        j.type_name());
  std::set<std::string_view> names;
  for (const SafetensorsEntry& e : tensors) names.insert(e.name);
  std::map<std::string, uint32_t> digests;
  for (const auto& [name, value] : j.items()) {
    check(names.count(name) == 1, "{} has a digest for tensor '{}', which the file does not hold",
          where, shown(name));
    const std::string hex = value.is_string() ? value.get<std::string>() : std::string();
    uint32_t crc = 0;
    const auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), crc, 16);
    check(hex.size() == 8 && ec == std::errc() && end == hex.data() + hex.size(),
          "{}: the digest of tensor '{}' must be a string of 8 hex digits, got {}", where,
          shown(name), shown(value.dump()));
    digests[name] = crc;
  }
  for (const SafetensorsEntry& e : tensors) {
    check(digests.contains(e.name),
          "{} has no digest for tensor '{}': the file was changed after Tessera wrote it; remove "
          "the entry to read the file unchecked",
          where, shown(e.name));
  }
  return digests;
}

SafetensorsEntry parse_entry(const std::string& name, const json& value, uint64_t data_size,
                             const std::string& source) {
  const std::string where = fmt::format("{}: tensor '{}'", source, shown(name));
  check(value.is_object(), "{}: expected an object, got {}", where, value.type_name());
  SafetensorsEntry e;
  e.name = name;
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    check(value.contains(field), "{}: missing field '{}'", where, field);
  }
  const json& dtype = value["dtype"];
  check(dtype.is_string(), "{}: dtype must be a string, got {}", where, dtype.dump());
  e.dtype = dtype.get<std::string>();
  const size_t item = element_size(e.dtype);
  check(item > 0, "{}: unknown or unsupported dtype '{}'", where, shown(e.dtype));

  const json& shape = value["shape"];
  check(shape.is_array(), "{}: shape must be an array, got {}", where, shape.type_name());
  uint64_t bytes = item;
  for (const json& d : shape) {
    check(d.is_number_integer(), "{}: shape {} must hold integers", where, shape.dump());
    check(d.is_number_unsigned(), "{}: shape {} has a negative dimension", where, shape.dump());
    const uint64_t n = d.get<uint64_t>();
    // Bounding the running byte count bounds every partial element count too.
    check(!__builtin_mul_overflow(bytes, n, &bytes) && bytes <= uint64_t{INT64_MAX},
          "{}: shape {} is too large", where, shape.dump());
    e.shape.push_back(int64_t(n));
  }

  const json& offsets = value["data_offsets"];
  check(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
            offsets[1].is_number_unsigned(),
        "{}: data_offsets must be [begin, end] with non-negative integers, got {}", where,
        offsets.dump());
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  check(e.begin <= e.end, "{}: data_offsets [{}, {}] end before they begin", where, e.begin, e.end);
  check(e.end <= data_size,
        "{}: data_offsets [{}, {}] run past the end of the data section ({} bytes)", where, e.begin,
        e.end, data_size);
  check(e.end - e.begin == bytes,
        "{}: data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {}", where, e.begin,
        e.end, e.end - e.begin, shape.dump(), e.dtype, bytes);
  return e;
}

template <typename T, typename Convert>
void convert_each(const uint8_t* src, std::span<float> out, Convert convert) {
  for (size_t i = 0; i < out.size(); ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    out[i] = convert(v);
  }
}

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};

void write_or_fail(std::FILE* f, const void* data, size_t bytes, const fs::path& path) {
  if (std::fwrite(data, 1, bytes, f) != bytes) {
    fail("{}: write failed: {}", path.string(), std::strerror(errno));
  }
}

}  // namespace

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsHeader parse_safetensors(std::span<const uint8_t> file, const std::string& source) {
  check(file.size() >= 8, "{}: {} bytes is too short for a safetensors file (8-byte header length)",
        source, file.size());
  uint64_t header_bytes;
  std::memcpy(&header_bytes, file.data(), 8);
  check(header_bytes <= file.size() - 8,
        "{}: the header length {} runs past the end of the file ({} bytes)", source, header_bytes,
        file.size());
  check(header_bytes <= kMaxHeaderBytes, "{}: the header length {} exceeds the limit of {} bytes",
        source, header_bytes, kMaxHeaderBytes);
  const auto* text = reinterpret_cast<const char*>(file.data() + 8);
  check(header_bytes > 0 && text[0] == '{', "{}: the header is not a JSON object", source);

  json root;
  try {
    root = json::parse(text, text + header_bytes, DuplicateKeyCheck(source));
  } catch (const json::exception& e) {
    fail("{}: the header is not valid JSON: {}", source, e.what());
  }
  check(root.is_object(), "{}: the header is not a JSON object", source);

  SafetensorsHeader header;
  header.data_start = 8 + header_bytes;
  const uint64_t data_size = file.size() - header.data_start;
  for (const auto& [name, value] : root.items()) {
    if (name == kMetadataKey) {
      header.metadata = parse_metadata(value, source);
    } else {
      header.tensors.push_back(parse_entry(name, value, data_size, source));
    }
  }

  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : header.tensors) {
    if (e.begin < covered) {
      fail("{}: tensor '{}' at bytes [{}, {}) overlaps tensor '{}' at [{}, {})", source,
           shown(e.name), e.begin, e.end, shown(previous->name), previous->begin, previous->end);
    }
    check(e.begin == covered,
          "{}: bytes [{}, {}) of the data section belong to no tensor (the next is '{}')", source,
          covered, e.begin, shown(e.name));
    covered = e.end;
    previous = &e;
  }
  check(covered == data_size,
        "{}: bytes [{}, {}) at the end of the data section belong to no tensor", source, covered,
        data_size);
  if (auto it = header.metadata.find(kSafetensorsDigestsKey); it != header.metadata.end()) {
    header.digests = parse_digests(it->second, header.tensors, source);
  }
  return header;
}

void convert_to_f32(const SafetensorsEntry& e, std::span<const uint8_t> data_section,
                    std::span<float> out, const std::string& source) {
  check(out.size() == size_t(e.numel()),
        "{}: tensor '{}' holds {} values, but {} are expected here", source, shown(e.name),
        e.numel(), out.size());
  check(e.end <= data_section.size(), "{}: tensor '{}' lies outside the data section", source,
        shown(e.name));
  const uint8_t* src = data_section.data() + e.begin;
  if (e.dtype == "F32") {
    if (!out.empty()) std::memcpy(out.data(), src, out.size() * sizeof(float));
  } else if (e.dtype == "BF16") {
    convert_each<uint16_t>(src, out, bf16_to_f32);
  } else if (e.dtype == "F16") {
    convert_each<uint16_t>(src, out, f16_to_f32);
  } else if (e.dtype == "F64") {
    convert_each<double>(src, out, [](double v) { return float(v); });
  } else {
    fail("{}: tensor '{}' has dtype {}; only F32, F64, BF16 and F16 convert to f32", source,
         shown(e.name), shown(e.dtype));
  }
}

SafetensorsFile::SafetensorsFile(const fs::path& path)
    : source_(path.string()), file_(path), header_(parse_safetensors(file_.bytes(), source_)) {}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  for (const SafetensorsEntry& e : header_.tensors) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

void SafetensorsFile::read_f32(const SafetensorsEntry& entry, std::span<float> out) const {
  const std::span<const uint8_t> data = file_.bytes().subspan(header_.data_start);
  if (auto it = header_.digests.find(entry.name); it != header_.digests.end()) {
    check(entry.end <= data.size(), "{}: tensor '{}' lies outside the data section", source_,
          shown(entry.name));
    const uint32_t crc = crc32(data.data() + entry.begin, entry.end - entry.begin);
    check(crc == it->second,
          "{}: checksum mismatch for tensor '{}': its bytes give crc32 {:08x}, {} records {:08x}; "
          "the file is corrupted",
          source_, shown(entry.name), crc, kSafetensorsDigestsKey, it->second);
  }
  convert_to_f32(entry, data, out, source_);
}

void write_safetensors(const fs::path& path, const std::vector<SafetensorsTensor>& tensors,
                       DType dtype, const std::map<std::string, std::string>& metadata) {
  check(dtype == DType::f32 || dtype == DType::bf16,
        "{}: safetensors export writes f32 or bf16, not {}", path.string(), enum_name(dtype));
  check(!metadata.contains(kSafetensorsDigestsKey),
        "{}: the metadata key '{}' is the writer's own (the tensors' digests)", path.string(),
        kSafetensorsDigestsKey);
  const size_t item = dtype_size(dtype);
  json header = json::object();
  json digests = json::object();
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    check(!t.name.empty() && t.name != kMetadataKey, "{}: cannot write a tensor named '{}'",
          path.string(), t.name);
    check(!header.contains(t.name), "{}: cannot write two tensors named '{}'", path.string(),
          t.name);
    int64_t numel = 1;
    for (int64_t d : t.shape) {
      check(d >= 0, "{}: tensor '{}' has a negative dimension", path.string(), t.name);
      numel *= d;
    }
    const uint64_t bytes = uint64_t(numel) * item;
    header[t.name] = {{"dtype", dtype == DType::f32 ? "F32" : "BF16"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    digests[t.name] = "00000000";
    offset += bytes;
  }
  // The digests are known only once the data is written, so the header goes out first with
  // placeholders of the same width and is rewritten in place at the end.
  auto header_text = [&] {
    json meta(metadata);
    meta[kSafetensorsDigestsKey] = digests.dump();
    header[kMetadataKey] = meta;
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    return text;
  };
  const std::string placeholder = header_text();

  const fs::path tmp = path.string() + ".tmp";
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
  check(f != nullptr, "{}: cannot create: {}", tmp.string(), std::strerror(errno));
  const uint64_t header_bytes = placeholder.size();
  write_or_fail(f.get(), &header_bytes, 8, tmp);
  write_or_fail(f.get(), placeholder.data(), placeholder.size(), tmp);
  std::vector<float> values;
  std::vector<uint16_t> halves;
  for (const SafetensorsTensor& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    values.assign(size_t(numel), 0.0f);
    t.fill(values);
    uint32_t crc = 0;
    if (dtype == DType::f32) {
      crc = crc32(values.data(), values.size() * sizeof(float));
      write_or_fail(f.get(), values.data(), values.size() * sizeof(float), tmp);
    } else {
      for (size_t begin = 0; begin < values.size(); begin += kWriteChunk) {
        const size_t n = std::min(kWriteChunk, values.size() - begin);
        halves.resize(n);
        for (size_t i = 0; i < n; ++i) halves[i] = f32_to_bf16(values[begin + i]);
        crc = crc32(halves.data(), n * sizeof(uint16_t), crc);
        write_or_fail(f.get(), halves.data(), n * sizeof(uint16_t), tmp);
      }
    }
    digests[t.name] = fmt::format("{:08x}", crc);
  }
  const std::string text = header_text();
  check(std::fseek(f.get(), 8, SEEK_SET) == 0, "{}: seek failed: {}", tmp.string(),
        std::strerror(errno));
  write_or_fail(f.get(), text.data(), text.size(), tmp);
  check(std::fflush(f.get()) == 0, "{}: write failed: {}", tmp.string(), std::strerror(errno));
  check(std::fclose(f.release()) == 0, "{}: close failed: {}", tmp.string(), std::strerror(errno));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  check(!ec, "{}: cannot rename to {}: {}", tmp.string(), path.string(), ec.message());
}

}  // namespace tessera::interop
