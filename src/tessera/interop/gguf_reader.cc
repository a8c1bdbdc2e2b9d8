#include "tessera/interop/gguf_reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "tessera/core/error.h"
#include "tessera/interop/gguf_format.h"

namespace tessera::interop {
namespace {

// Bounds far above any real file that keep a corrupt count from allocating the machine away.
constexpr uint64_t kMaxTensors = uint64_t(1) << 20;
constexpr uint64_t kMaxKeys = uint64_t(1) << 20;
constexpr int64_t kMaxNumel = int64_t(1) << 48;

using ValueType = GgufValueType;

// A cursor over the file that refuses to read past its end.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> file, const std::string& source) : file_(file), source_(source) {}

  const std::string& source() const { return source_; }
  uint64_t at() const { return at_; }
  uint64_t left() const { return file_.size() - at_; }

  template <typename T>
  T scalar(const char* what) {
    check(left() >= sizeof(T), "{}: the file ends inside {} at byte {}", source_, what, at_);
    T v;
    std::memcpy(&v, file_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const uint64_t n = scalar<uint64_t>(what);
    check(n <= left(), "{}: {} at byte {} claims {} bytes, past the end of the file", source_, what,
          at_ - 8, n);
    std::string s(reinterpret_cast<const char*>(file_.data() + at_), size_t(n));
    at_ += n;
    return s;
  }

 private:
  std::span<const uint8_t> file_;
  const std::string& source_;
  uint64_t at_ = 0;
};

// Bytes of one element of a scalar type, 0 for strings and arrays.
uint64_t scalar_bytes(ValueType t) {
  switch (t) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::boolean:
      return 1;
    case ValueType::u16:
    case ValueType::i16:
      return 2;
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::f32:
      return 4;
    case ValueType::u64:
    case ValueType::i64:
    case ValueType::f64:
      return 8;
    case ValueType::string:
    case ValueType::array:
      return 0;
  }
  return 0;
}

bool is_float(ValueType t) { return t == ValueType::f32 || t == ValueType::f64; }

ValueType value_type(Cursor& in, const std::string& key) {
  const uint32_t t = in.scalar<uint32_t>("a value type");
  check(t <= uint32_t(ValueType::f64), "{}: metadata key '{}' has value type {}, not one of GGUF's",
        in.source(), key, t);
  return ValueType(t);
}

int64_t read_integer(Cursor& in, ValueType t, const std::string& key) {
  switch (t) {
    case ValueType::u8:
    case ValueType::boolean:
      return in.scalar<uint8_t>("a value");
    case ValueType::i8:
      return in.scalar<int8_t>("a value");
    case ValueType::u16:
      return in.scalar<uint16_t>("a value");
    case ValueType::i16:
      return in.scalar<int16_t>("a value");
    case ValueType::u32:
      return in.scalar<uint32_t>("a value");
    case ValueType::i32:
      return in.scalar<int32_t>("a value");
    case ValueType::i64:
      return in.scalar<int64_t>("a value");
    case ValueType::u64: {
      const uint64_t v = in.scalar<uint64_t>("a value");
      check(v <= uint64_t(INT64_MAX), "{}: metadata key '{}' holds {}, too large", in.source(), key,
            v);
      return int64_t(v);
    }
    default:
      fail("{}: metadata key '{}' is not an integer", in.source(), key);
  }
}

// An f32 value as the decimal it was written from (1e-5, not 9.99999974e-06): the shortest one
// that rounds to it.
double read_float(Cursor& in, ValueType t) {
  if (t == ValueType::f64) return in.scalar<double>("a value");
  const float f = in.scalar<float>("a value");
  return std::isfinite(f) ? std::stod(fmt::format("{}", f)) : double(f);
}

GgufValue read_array(Cursor& in, const std::string& key) {
  const ValueType t = value_type(in, key);
  check(t != ValueType::array,
        "{}: metadata key '{}' is an array of arrays, which GGUF models do not use", in.source(),
        key);
  const uint64_t n = in.scalar<uint64_t>("an array length");
  // Each element takes at least its scalar bytes, a string at least its 8-byte length.
  const uint64_t least = t == ValueType::string ? 8 : scalar_bytes(t);
  check(n <= in.left() / least,
        "{}: metadata key '{}' claims {} elements, more than the {} bytes left hold", in.source(),
        key, n, in.left());
  if (t == ValueType::string) {
    std::vector<std::string> v(static_cast<size_t>(n));
    for (std::string& s : v) s = in.string("an array string");
    return v;
  }
  if (is_float(t)) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = read_float(in, t);
    return v;
  }
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t& x : v) x = read_integer(in, t, key);
  return v;
}

GgufValue read_value(Cursor& in, const std::string& key) {
  const ValueType t = value_type(in, key);
  if (t == ValueType::string) return in.string("a string value");
  if (t == ValueType::array) return read_array(in, key);
  if (is_float(t)) return read_float(in, t);
  return read_integer(in, t, key);
}

GgufTensor read_tensor_info(Cursor& in) {
  GgufTensor t;
  t.name = in.string("a tensor name");
  const uint32_t dims = in.scalar<uint32_t>("a tensor's dimension count");
  check(dims >= 1 && dims <= 4, "{}: tensor '{}' has {} dimensions (1 to 4 allowed)", in.source(),
        t.name, dims);
  t.shape.resize(dims);
  int64_t numel = 1;
  for (uint32_t d = 0; d < dims; ++d) {
    const uint64_t n = in.scalar<uint64_t>("a tensor dimension");
    check(n >= 1 && n <= uint64_t(kMaxNumel) && uint64_t(numel) <= uint64_t(kMaxNumel) / n,
          "{}: tensor '{}' has dimension {} of {} values, out of range", in.source(), t.name, d, n);
    numel *= int64_t(n);
    t.shape[dims - 1 - d] = int64_t(n);
  }
  const uint32_t type = in.scalar<uint32_t>("a tensor type");
  const std::optional<GgmlType> known = ggml_type(type);
  check(known.has_value(),
        "{}: tensor '{}' has ggml type {}, which Tessera does not read (it reads {})", in.source(),
        t.name, type, fmt::join(enum_choices<GgmlType>(), ", "));
  t.type = *known;
  const GgmlBlock block = ggml_block(t.type);
  check(t.shape.back() % block.values == 0,
        "{}: tensor '{}' has rows of {} values, not a whole number of {} blocks of {}", in.source(),
        t.name, t.shape.back(), enum_name(t.type), block.values);
  t.bytes = ggml_bytes(t.type, numel);
  t.offset = in.scalar<uint64_t>("a tensor offset");
  return t;
}

// The data section's alignment: general.alignment where set, a power of two.
uint64_t alignment_of(const GgufHeader& h, const std::string& source) {
  const auto it = h.metadata.find("general.alignment");
  if (it == h.metadata.end()) return kGgufDefaultAlignment;
  const int64_t* a = std::get_if<int64_t>(&it->second);
  check(a != nullptr && *a >= 1 && *a <= (1 << 20) && (*a & (*a - 1)) == 0,
        "{}: general.alignment must be a power of two up to 2^20", source);
  return uint64_t(*a);
}

void check_data(GgufHeader& h, uint64_t file_size, const std::string& source) {
  const uint64_t alignment = alignment_of(h, source);
  h.data_start = std::min(file_size, (h.data_start + alignment - 1) / alignment * alignment);
  const uint64_t section = file_size - h.data_start;
  std::vector<const GgufTensor*> by_offset;
  for (const GgufTensor& t : h.tensors) {
    check(t.offset % alignment == 0,
          "{}: tensor '{}' starts at offset {}, not a multiple of the alignment {}", source, t.name,
          t.offset, alignment);
    check(t.offset <= section && t.bytes <= section - t.offset,
          "{}: tensor '{}' ({} bytes at offset {}) ends past the file's {} bytes of data", source,
          t.name, t.bytes, t.offset, section);
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor& a = *by_offset[i - 1];
    check(a.offset + a.bytes <= by_offset[i]->offset, "{}: tensors '{}' and '{}' overlap", source,
          a.name, by_offset[i]->name);
  }
}

}  // namespace

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

GgufHeader parse_gguf(std::span<const uint8_t> file, const std::string& source) {
  Cursor in(file, source);
  check(file.size() >= 4 && std::memcmp(file.data(), "GGUF", 4) == 0,
        "{}: not a GGUF file (it does not begin with \"GGUF\")", source);
  in.scalar<uint32_t>("the magic");
  GgufHeader h;
  h.version = in.scalar<uint32_t>("the version");
  check(h.version == 2 || h.version == 3, "{}: GGUF version {}; Tessera reads versions 2 and 3",
        source, h.version);
  const uint64_t tensors = in.scalar<uint64_t>("the tensor count");
  const uint64_t keys = in.scalar<uint64_t>("the metadata count");
  // A key takes at least 12 bytes (its length and type), a tensor at least 28.
  check(keys <= kMaxKeys && keys <= in.left() / 12,
        "{}: claims {} metadata keys, more than the file can hold", source, keys);
  check(tensors <= kMaxTensors && tensors <= in.left() / 28,
        "{}: claims {} tensors, more than the file can hold", source, tensors);
  for (uint64_t i = 0; i < keys; ++i) {
    std::string key = in.string("a metadata key");
    GgufValue value = read_value(in, key);
    check(h.metadata.emplace(key, std::move(value)).second, "{}: metadata key '{}' appears twice",
          source, key);
  }
  std::set<std::string> names;
  for (uint64_t i = 0; i < tensors; ++i) {
    h.tensors.push_back(read_tensor_info(in));
    check(names.insert(h.tensors.back().name).second, "{}: tensor '{}' appears twice", source,
          h.tensors.back().name);
  }
  h.data_start = in.at();
  check_data(h, file.size(), source);
  return h;
}

GgufFile::GgufFile(const std::filesystem::path& path)
    : source_(path.string()),
      mapped_(std::in_place, path),
      bytes_(mapped_->bytes()),
      header_(parse_gguf(bytes_, source_)) {}

GgufFile::GgufFile(std::span<const uint8_t> bytes, std::string source)
    : source_(std::move(source)), bytes_(bytes), header_(parse_gguf(bytes_, source_)) {}

const GgufTensor* GgufFile::find(const std::string& name) const {
  for (const GgufTensor& t : header_.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::span<const uint8_t> GgufFile::encoded(const GgufTensor& tensor) const {
  return bytes_.subspan(header_.data_start + tensor.offset, tensor.bytes);
}

std::vector<float> GgufFile::read(const GgufTensor& tensor) const {
  std::vector<float> values(size_t(tensor.numel()));
  ggml_to_f32(tensor.type, encoded(tensor), values);
  return values;
}

template <typename T>
const T& GgufFile::value(const std::string& key, const char* kind) const {
  const auto it = header_.metadata.find(key);
  check(it != header_.metadata.end(), "{}: has no metadata key '{}'", source_, key);
  const T* v = std::get_if<T>(&it->second);
  check(v != nullptr, "{}: metadata key '{}' is not {}", source_, key, kind);
  return *v;
}

int64_t GgufFile::integer(const std::string& key) const {
  return value<int64_t>(key, "an integer");
}

double GgufFile::number(const std::string& key) const {
  const auto it = header_.metadata.find(key);
  if (it != header_.metadata.end()) {
    if (const int64_t* i = std::get_if<int64_t>(&it->second)) return double(*i);
  }
  return value<double>(key, "a number");
}

const std::string& GgufFile::text(const std::string& key) const {
  return value<std::string>(key, "a string");
}

const std::vector<std::string>& GgufFile::texts(const std::string& key) const {
  return value<std::vector<std::string>>(key, "an array of strings");
}

const std::vector<int64_t>& GgufFile::integers(const std::string& key) const {
  return value<std::vector<int64_t>>(key, "an array of integers");
}

}  // namespace tessera::interop
