#include "tessera/interop/gguf_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/q4_0.h"
#include "tessera/core/q4_k.h"
#include "tessera/interop/gguf_format.h"

namespace tessera::interop {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kGgufVersion = 3;
constexpr uint64_t kAlignment = kGgufDefaultAlignment;

using GgufType = GgufValueType;

uint64_t aligned(uint64_t offset) { return (offset + kAlignment - 1) / kAlignment * kAlignment; }

class Output {
 public:
  explicit Output(const fs::path& path) : path_(path), file_(std::fopen(path.c_str(), "wb")) {
    check(file_ != nullptr, "{}: cannot create: {}", path.string(), std::strerror(errno));
  }
  ~Output() {
    if (file_ != nullptr) std::fclose(file_);
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  void bytes(const void* data, size_t n) {
    check(std::fwrite(data, 1, n, file_) == n, "{}: write failed: {}", path_.string(),
          std::strerror(errno));
    written_ += n;
  }
  template <typename T>
  void scalar(T value) {
    bytes(&value, sizeof(T));
  }
  void string(const std::string& s) {
    scalar(uint64_t(s.size()));
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t offset) {
    static constexpr char kZeros[kAlignment] = {};
    bytes(kZeros, offset - written_);
  }
  uint64_t written() const { return written_; }
  void close() {
    check(std::fclose(std::exchange(file_, nullptr)) == 0, "{}: close failed: {}", path_.string(),
          std::strerror(errno));
  }

 private:
  fs::path path_;
  std::FILE* file_;
  uint64_t written_ = 0;
};

void write_value(Output& out, const GgufWriter::Value& value) {
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, uint32_t>) {
          out.scalar(GgufType::u32);
          out.scalar(v);
        } else if constexpr (std::is_same_v<T, int32_t>) {
          out.scalar(GgufType::i32);
          out.scalar(v);
        } else if constexpr (std::is_same_v<T, float>) {
          out.scalar(GgufType::f32);
          out.scalar(v);
        } else if constexpr (std::is_same_v<T, bool>) {
          out.scalar(GgufType::boolean);
          out.scalar(uint8_t(v));
        } else if constexpr (std::is_same_v<T, std::string>) {
          out.scalar(GgufType::string);
          out.string(v);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          out.scalar(GgufType::array);
          out.scalar(GgufType::string);
          out.scalar(uint64_t(v.size()));
          for (const std::string& s : v) out.string(s);
        } else {
          out.scalar(GgufType::array);
          out.scalar(GgufType::i32);
          out.scalar(uint64_t(v.size()));
          out.bytes(v.data(), v.size() * sizeof(int32_t));
        }
      },
      value);
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

void GgufWriter::set(const std::string& key, Value value) {
  for (const auto& [existing, v] : metadata_) {
    check(existing != key, "GGUF metadata key '{}' is set twice", key);
  }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> shape, GgmlType type,
                            Fill fill) {
  for (const Tensor& t : tensors_) check(t.name != name, "GGUF tensor '{}' is added twice", name);
  check(!shape.empty() && shape.size() <= 4, "GGUF tensor '{}': {} dimensions (1 to 4 allowed)",
        name, shape.size());
  check(type == GgmlType::f32 || type == GgmlType::f16 || type == GgmlType::q8_0 ||
            type == GgmlType::q4_0 || type == GgmlType::q4_k,
        "GGUF tensor '{}': the writer encodes f32, f16, q8_0, q4_0 and q4_k, not {}", name,
        enum_name(type));
  check(shape.back() % ggml_block(type).values == 0,
        "GGUF tensor '{}': rows of {} values cannot be split into {} blocks of {}", name,
        shape.back(), enum_name(type), ggml_block(type).values);
  tensors_.push_back({name, std::move(shape), type, std::move(fill)});
}

void GgufWriter::write(const fs::path& path) const {
  const fs::path tmp = path.string() + ".tmp";
  Output out(tmp);
  out.bytes("GGUF", 4);
  out.scalar(kGgufVersion);
  out.scalar(uint64_t(tensors_.size()));
  out.scalar(uint64_t(metadata_.size()));
  for (const auto& [key, value] : metadata_) {
    out.string(key);
    write_value(out, value);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    out.string(t.name);
    out.scalar(uint32_t(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) out.scalar(uint64_t(*d));
    out.scalar(t.type);
    out.scalar(offset);
    offset = aligned(offset + ggml_bytes(t.type, numel(t.shape)));
  }
  const uint64_t data_start = aligned(out.written());
  out.pad_to(data_start);

  std::vector<float> values;
  std::vector<uint8_t> encoded;
  for (const Tensor& t : tensors_) {
    values.assign(size_t(numel(t.shape)), 0.0f);
    t.fill(values);
    encoded.resize(ggml_bytes(t.type, numel(t.shape)));
    switch (t.type) {
      case GgmlType::f32:
        std::memcpy(encoded.data(), values.data(), encoded.size());
        break;
      case GgmlType::f16:
        for (size_t i = 0; i < values.size(); ++i) {
          const uint16_t half = f32_to_f16(values[i]);
          std::memcpy(encoded.data() + 2 * i, &half, 2);
        }
        break;
      case GgmlType::q8_0:
        quantize_q8_0(values, encoded);
        break;
      case GgmlType::q4_0:
        quantize_q4_0(values, encoded);
        break;
      case GgmlType::q4_k:
        quantize_q4_k(values, encoded);
        break;
      default:
        fail("GGUF tensor '{}': the writer cannot encode {}", t.name, enum_name(t.type));
    }
    out.bytes(encoded.data(), encoded.size());
    out.pad_to(data_start + aligned(out.written() - data_start));
  }
  out.close();
  std::error_code ec;
  fs::rename(tmp, path, ec);
  check(!ec, "{}: cannot rename to {}: {}", tmp.string(), path.string(), ec.message());
}

}  // namespace tessera::interop
