#include "tessera/ckpt/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "tessera/ckpt/data_image.h"
#include "tessera/ckpt/durable_file.h"
#include "tessera/core/checksum.h"
#include "tessera/core/error.h"
#include "tessera/core/json_file.h"
#include "tessera/core/text_corpus.h"

namespace tessera::ckpt {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCommitFile = "COMMIT";
constexpr const char* kLatestFile = "latest";
constexpr const char* kLatestTmpFile = "latest.tmp";
// A data file is written in pieces this large, each checksummed while it is still in cache.
constexpr size_t kChunkBytes = size_t{16} << 20;
// Where a save or prune keeps a step directory it is working on: hidden, and never chosen.
fs::path hidden_path(const fs::path& run_dir, const std::string& step_name, const char* suffix) {
  return run_dir / fmt::format(".{}.{}", step_name, suffix);
}

// The data file of a part and the listing of its tensors that commit_save merges.
std::string data_file_name(int part) { return fmt::format("rank-{:05d}.bin", part); }
std::string part_manifest_name(int part) { return fmt::format("rank-{:05d}.json", part); }

void remove_all_or_fail(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) fail("{}: cannot remove: {}", path.string(), ec.message());
}

bool is_committed(const fs::path& step_dir) { return is_file(step_dir / kCommitFile); }

// Committed step directories of a run, oldest first.
std::vector<std::pair<int64_t, fs::path>> committed_steps(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> steps;
  std::error_code ec;
  for (auto it = fs::directory_iterator(run_dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::optional<int64_t> step = parse_step_dir_name(it->path().filename().string());
    if (step && it->is_directory(ec) && is_committed(it->path())) {
      steps.emplace_back(*step, it->path());
    }
  }
  if (ec) fail("{}: cannot list the run directory: {}", run_dir.string(), ec.message());
  std::sort(steps.begin(), steps.end());
  return steps;
}

// Hidden ".step-*" entries are only ever work in progress of a save or a prune, so any found
// before a save are left over from a crash.
void remove_leftovers(const fs::path& run_dir) {
  std::vector<fs::path> stale;
  std::error_code ec;
  for (auto it = fs::directory_iterator(run_dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.starts_with(".step-") || name == kLatestTmpFile) stale.push_back(it->path());
  }
  if (ec) fail("{}: cannot list the run directory: {}", run_dir.string(), ec.message());
  for (const fs::path& p : stale) remove_all_or_fail(p);
}

void check_tensors_have_data(const fs::path& dir, const std::vector<NamedTensor>& tensors) {
  for (const NamedTensor& t : tensors) {
    check(t.tensor.data != nullptr || t.tensor.nbytes() == 0,
          "{}: cannot save tensor '{}': it has no data", dir.string(), t.name);
  }
}

// Every tensor of a part has a name of its own, whether it came from tensors or from an image.
void check_names_to_save(const fs::path& dir, const std::vector<Manifest::Entry>& listing) {
  std::unordered_set<std::string> names;
  for (const Manifest::Entry& e : listing) {
    check(!e.name.empty(), "{}: cannot save a tensor with an empty name", dir.string());
    check(names.insert(e.name).second, "{}: cannot save two tensors named '{}'", dir.string(),
          e.name);
  }
}

void require_save_in_progress(const fs::path& tmp_dir) {
  std::error_code ec;
  check(fs::is_directory(tmp_dir, ec),
        "{}: no save in progress: begin_save must create it before parts are written or committed",
        tmp_dir.string());
}

// The tensor entries that write_part recorded for one part.
std::vector<Manifest::Entry> read_part(const fs::path& tmp_dir, int part) {
  const fs::path path = tmp_dir / part_manifest_name(part);
  check(is_file(path),
        "{}: no part manifest: rank {} did not write its part before commit_save, so nothing was "
        "committed",
        path.string(), part);
  try {
    return parse_manifest(read_json_file(path, "the part manifest"), path.string()).tensors;
  } catch (const Error& e) {
    fail("{} (rank {} did not finish writing its part)", e.what(), part);
  }
}

// All parts' entries in part order; a name may belong to only one part.
Manifest merge_parts(const fs::path& tmp_dir, int parts) {
  Manifest merged;
  std::unordered_map<std::string, int> part_of;
  for (int part = 0; part < parts; ++part) {
    for (Manifest::Entry& e : read_part(tmp_dir, part)) {
      auto [it, inserted] = part_of.emplace(e.name, part);
      if (!inserted) {
        fail("{}: tensor '{}' is written by both {} and {}; each tensor must be in one part only",
             tmp_dir.string(), e.name, data_file_name(it->second), data_file_name(part));
      }
      merged.tensors.push_back(std::move(e));
    }
  }
  return merged;
}

// Writes a data file, streamed through one aligned buffer that checksums each piece while it is
// in cache, or from a DataImage as it lies. Where the file system takes O_DIRECT the disk reads
// the buffer itself: a buffered write spends about a CPU second per GB copying into the page
// cache, time that a background save takes from training.
class DataFileWriter {
 public:
  explicit DataFileWriter(const fs::path& path)
      : path_(path),
        buffer_(static_cast<std::byte*>(std::aligned_alloc(kDirectAlignment, kChunkBytes))) {
    if (!buffer_) {
      fail("{}: cannot allocate a {} MiB write buffer", path.string(), kChunkBytes >> 20);
    }
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    direct_ = fd_ >= 0;
    if (!direct_ && errno == EINVAL) {
      fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (fd_ < 0) fail_errno(path, "cannot open");
  }
  ~DataFileWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  DataFileWriter(const DataFileWriter&) = delete;
  DataFileWriter& operator=(const DataFileWriter&) = delete;

  uint64_t offset() const { return written_ + used_; }

  // Appends bytes (or zeros, for null data); returns the CRC-32 of what was appended, continued
  // from `crc`.
  uint32_t append(const std::byte* data, size_t size, uint32_t crc = 0) {
    while (size > 0) {
      const size_t n = std::min(size, kChunkBytes - used_);
      std::byte* at = buffer_.get() + used_;
      if (data) {
        std::memcpy(at, data, n);
        data += n;
      } else {
        std::memset(at, 0, n);
      }
      crc = crc32(at, n, crc);
      used_ += n;
      size -= n;
      if (used_ == kChunkBytes) flush();
    }
    return crc;
  }

  // Writes a whole file image, makes it durable and closes the file; nothing may be appended.
  void write_image(const DataImage& image) {
    std::span<const std::byte> bytes = image.padded_bytes();
    write_out(bytes.data(), direct_ ? bytes.size() : image.size());
    close_durably(image.size());
  }

  // Writes what is buffered, makes it durable and closes the file.
  void finish() {
    const uint64_t size = offset();
    if (direct_) {
      // O_DIRECT writes whole blocks: the tail goes out padded and the file is cut back to size.
      const size_t padded = round_up(used_, kDirectAlignment);
      std::memset(buffer_.get() + used_, 0, padded - used_);
      used_ = padded;
    }
    flush();
    close_durably(size);
  }

 private:
  void flush() {
    write_out(buffer_.get(), used_);
    written_ += used_;
    used_ = 0;
  }

  // A file system that refuses the O_DIRECT writes it opened for gets the rest buffered.
  void write_out(const std::byte* data, size_t size) {
    const size_t done = write_fully(fd_, path_, data, size, direct_);
    if (done == size) return;
    if (::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_DIRECT) != 0) {
      fail_errno(path_, "cannot turn off O_DIRECT");
    }
    direct_ = false;
    write_fully(fd_, path_, data + done, size - done);
  }

  // Cuts off the padding of direct writes, then fsyncs and closes.
  void close_durably(uint64_t size) {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) fail_errno(path_, "cannot truncate");
    if (::fsync(fd_) != 0) fail_errno(path_, "fsync failed");
    if (::close(std::exchange(fd_, -1)) != 0) fail_errno(path_, "close failed");
  }

  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  fs::path path_;
  std::unique_ptr<std::byte, Free> buffer_;
  int fd_ = -1;
  bool direct_ = false;
  uint64_t written_ = 0;
  size_t used_ = 0;
};

// Streams the tensors into a data file laid out as `listing` says, filling in the checksums.
void write_data_file(const fs::path& path, const std::vector<NamedTensor>& tensors,
                     std::vector<Manifest::Entry>& listing) {
  DataFileWriter data(path);
  for (size_t i = 0; i < tensors.size(); ++i) {
    Manifest::Entry& e = listing[i];
    data.append(nullptr, e.offset - data.offset());
    e.crc32 = data.append(static_cast<const std::byte*>(tensors[i].tensor.data), e.nbytes);
  }
  data.finish();
}

// Writes a part's data file with `write`, which fills in the checksums of `listing` where they
// are not known yet, and the listing beside it.
template <typename WriteData>
void write_part_with(const fs::path& tmp_dir, int part, std::vector<Manifest::Entry> listing,
                     WriteData&& write) {
  check(part >= 0, "{}: cannot write part {}: parts are numbered from 0", tmp_dir.string(), part);
  require_save_in_progress(tmp_dir);
  check_names_to_save(tmp_dir, listing);
  const fs::path data = tmp_dir / data_file_name(part);
  for (Manifest::Entry& e : listing) e.file = data.filename().string();
  write(data, listing);
  Manifest manifest;
  manifest.tensors = std::move(listing);
  write_durably(tmp_dir / part_manifest_name(part), manifest_to_json(manifest).dump(2) + "\n");
  sync_dir(tmp_dir);
}

// Puts the finished tmp directory at `final_dir`. Replacing an existing step uses an atomic
// exchange, so a reader never finds the name missing or half-populated.
void install(const fs::path& tmp, const fs::path& final_dir, const fs::path& run_dir) {
  std::error_code ec;
  if (!fs::exists(final_dir, ec)) {
    rename_or_fail(tmp, final_dir);
    return;
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    sync_dir(run_dir);
    remove_all_or_fail(tmp);
    return;
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
    fail("{}: cannot exchange with {}: {}", tmp.string(), final_dir.string(), std::strerror(errno));
  }
  // Without exchange support the name is briefly absent; resolve() then falls back to the newest
  // other committed step, which is still a complete checkpoint.
  fs::path old = hidden_path(run_dir, final_dir.filename().string(), "old");
  rename_or_fail(final_dir, old);
  rename_or_fail(tmp, final_dir);
  sync_dir(run_dir);
  remove_all_or_fail(old);
}

// `kept`: a step directory the steps depend on (a LoRA run's base model), never deleted nor
// counted.
void prune(const fs::path& run_dir, int keep_last, int64_t just_written, const fs::path& kept) {
  if (keep_last <= 0) return;
  auto steps = committed_steps(run_dir);
  std::erase_if(steps, [&](const auto& s) {
    std::error_code ec;
    return !kept.empty() && fs::equivalent(s.second, kept, ec);
  });
  size_t excess = steps.size() > static_cast<size_t>(keep_last) ? steps.size() - keep_last : 0;
  std::vector<fs::path> doomed;
  for (const auto& [step, dir] : steps) {
    if (doomed.size() == excess) break;
    if (step != just_written) doomed.push_back(dir);
  }
  if (doomed.empty()) return;
  // Rename first so that a crash mid-delete cannot leave a gutted directory that still has COMMIT.
  std::vector<fs::path> hidden;
  for (const fs::path& dir : doomed) {
    hidden.push_back(hidden_path(run_dir, dir.filename().string(), "del"));
    rename_or_fail(dir, hidden.back());
  }
  sync_dir(run_dir);
  for (const fs::path& dir : hidden) remove_all_or_fail(dir);
}

bool looks_like_step_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / kManifestFile, ec) || fs::exists(dir / data_file_name(0), ec)) return true;
  fs::path normal = dir.lexically_normal();
  std::string name =
      normal.has_filename() ? normal.filename().string() : normal.parent_path().filename().string();
  return parse_step_dir_name(name).has_value();
}

void require_committed(const fs::path& step_dir) {
  std::error_code ec;
  if (!fs::is_directory(step_dir, ec)) fail("{}: no such checkpoint directory", step_dir.string());
  if (!is_committed(step_dir)) {
    fail("{}: checkpoint is incomplete (no COMMIT marker)", step_dir.string());
  }
}

}  // namespace

std::optional<fs::path> lora_base(const fs::path& step_dir, const nlohmann::json& metadata) {
  if (!metadata.is_object() || !metadata.contains("lora_base") || metadata["lora_base"].is_null()) {
    return std::nullopt;
  }
  const nlohmann::json& base = metadata["lora_base"];
  check(base.is_string() && !base.get<std::string>().empty(),
        "{}: lora_base must name the base model's step folder, got {}", step_dir.string(),
        base.dump());
  const fs::path named = base.get<std::string>();
  return named.is_absolute() ? named : step_dir.parent_path() / named;
}

nlohmann::json lora_base_reference(const fs::path& base, const fs::path& checkpoints_dir) {
  std::error_code ec;
  if (fs::equivalent(base.parent_path(), checkpoints_dir, ec)) return base.filename().string();
  return fs::absolute(base).string();
}

std::filesystem::path save(const std::filesystem::path& run_dir, int64_t step,
                           const std::vector<NamedTensor>& tensors, const nlohmann::json& metadata,
                           int keep_last) {
  write_part(begin_save(run_dir, step), 0, tensors);
  return commit_save(run_dir, step, 1, metadata, keep_last);
}

std::filesystem::path save(const std::filesystem::path& run_dir, int64_t step,
                           const DataImage& image, const nlohmann::json& metadata, int keep_last) {
  write_part(begin_save(run_dir, step), 0, image);
  return commit_save(run_dir, step, 1, metadata, keep_last);
}

std::filesystem::path pending_step_dir(const std::filesystem::path& run_dir, int64_t step) {
  return hidden_path(run_dir, step_dir_name(step), "tmp");
}

std::filesystem::path begin_save(const std::filesystem::path& run_dir, int64_t step) {
  check(step >= 0, "{}: cannot save a checkpoint for negative step {}", run_dir.string(), step);
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) fail("{}: cannot create the run directory: {}", run_dir.string(), ec.message());
  remove_leftovers(run_dir);

  const fs::path tmp = pending_step_dir(run_dir, step);
  fs::create_directory(tmp, ec);
  if (ec) fail("{}: cannot create directory: {}", tmp.string(), ec.message());
  return tmp;
}

void write_part(const std::filesystem::path& tmp_dir, int part,
                const std::vector<NamedTensor>& tensors) {
  write_part_with(tmp_dir, part, data_file_layout(tensors).tensors,
                  [&](const fs::path& path, std::vector<Manifest::Entry>& listing) {
                    check_tensors_have_data(tmp_dir, tensors);
                    write_data_file(path, tensors, listing);
                  });
}

void write_part(const std::filesystem::path& tmp_dir, int part, const DataImage& image) {
  write_part_with(tmp_dir, part, image.entries(),
                  [&](const fs::path& path, const std::vector<Manifest::Entry>&) {
                    DataFileWriter(path).write_image(image);
                  });
}

std::filesystem::path commit_save(const std::filesystem::path& run_dir, int64_t step, int parts,
                                  const nlohmann::json& metadata, int keep_last) {
  check(step >= 0, "{}: cannot save a checkpoint for negative step {}", run_dir.string(), step);
  check(parts >= 1, "{}: cannot commit step {} from {} parts: at least one part is needed",
        run_dir.string(), step, parts);
  const std::string name = step_dir_name(step);
  const fs::path tmp = pending_step_dir(run_dir, step);
  const fs::path final_dir = run_dir / name;
  require_save_in_progress(tmp);

  Manifest manifest = merge_parts(tmp, parts);
  manifest.step = step;
  manifest.world_size = parts;
  manifest.metadata = metadata;
  write_durably(tmp / kManifestFile, manifest_to_json(manifest).dump(2) + "\n");
  for (int part = 0; part < parts; ++part) remove_all_or_fail(tmp / part_manifest_name(part));
  write_durably(tmp / kCommitFile, name + "\n");
  sync_dir(tmp);

  install(tmp, final_dir, run_dir);
  sync_dir(run_dir);

  write_durably(run_dir / kLatestTmpFile, name + "\n");
  rename_or_fail(run_dir / kLatestTmpFile, run_dir / kLatestFile);
  sync_dir(run_dir);

  prune(run_dir, keep_last, step, lora_base(final_dir, metadata).value_or(fs::path()));
  return final_dir;
}

std::filesystem::path resolve(const std::filesystem::path& run_or_step_dir) {
  const fs::path& dir = run_or_step_dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    fail("{}: no such checkpoint or run directory", dir.string());
  }
  if (is_committed(dir)) return dir;
  if (looks_like_step_dir(dir)) {
    fail("{}: checkpoint is incomplete (no COMMIT marker)", dir.string());
  }
  std::optional<fs::path> latest = find_latest(dir);
  // A Hugging Face model folder has its config.json at the top (interop/hf_convert.h).
  if (!latest && is_file(dir / "config.json")) {
    fail(
        "{}: a Hugging Face model folder, not a Tessera run: import it once with 'tessera "
        "convert import --hf {} --out RUN' and give RUN instead",
        dir.string(), dir.string());
  }
  if (!latest) fail("{}: no committed checkpoint found", dir.string());
  return *latest;
}

std::optional<std::filesystem::path> find_latest(const std::filesystem::path& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return std::nullopt;
  std::ifstream latest(run_dir / kLatestFile);
  std::string name;
  if (latest >> name && parse_step_dir_name(name) && is_committed(run_dir / name)) {
    return run_dir / name;
  }
  auto steps = committed_steps(run_dir);
  if (steps.empty()) return std::nullopt;
  return steps.back().second;
}

void load(const std::filesystem::path& step_dir, const std::vector<NamedTensor>& tensors) {
  require_committed(step_dir);
  const Manifest manifest = read_manifest(step_dir);
  const std::string manifest_path = (step_dir / kManifestFile).string();

  std::unordered_map<std::string, const Manifest::Entry*> by_name;
  for (const Manifest::Entry& e : manifest.tensors) by_name[e.name] = &e;

  // Check everything that needs no data before touching any destination.
  std::vector<std::pair<const NamedTensor*, const Manifest::Entry*>> plan;
  for (const NamedTensor& t : tensors) {
    auto it = by_name.find(t.name);
    if (it == by_name.end()) fail("{}: no tensor '{}' in the checkpoint", manifest_path, t.name);
    const Manifest::Entry& e = *it->second;
    if (e.dtype != t.tensor.dtype) {
      fail("{}: tensor '{}' is {} in the checkpoint but {} was requested", manifest_path, t.name,
           enum_name(e.dtype), enum_name(t.tensor.dtype));
    }
    if (!(e.shape == t.tensor.shape)) {
      fail("{}: tensor '{}' has shape {} in the checkpoint but {} was requested", manifest_path,
           t.name, e.shape.str(), t.tensor.shape.str());
    }
    check(t.tensor.data != nullptr || e.nbytes == 0,
          "{}: cannot load tensor '{}' into a view with no data", manifest_path, t.name);
    plan.emplace_back(&t, &e);
  }

  std::map<std::string, std::unique_ptr<File>> files;
  for (const auto& [t, e] : plan) {
    auto& file = files[e->file];
    if (!file) file = std::make_unique<File>(step_dir / e->file, O_RDONLY);
    uint64_t size = file->size();
    if (e->offset + e->nbytes > size) {
      fail("{}: data file is truncated: tensor '{}' needs bytes up to {} but the file has {}",
           file->path().string(), t->name, e->offset + e->nbytes, size);
    }
  }

  for (const auto& [t, e] : plan) {
    File& file = *files[e->file];
    auto* bytes = static_cast<std::byte*>(t->tensor.data);
    uint32_t crc = 0;
    for (uint64_t done = 0; done < e->nbytes; done += kChunkBytes) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, e->nbytes - done));
      if (!file.pread_all(bytes + done, n, e->offset + done)) {
        fail("{}: data file is truncated while reading tensor '{}'", file.path().string(), t->name);
      }
      crc = crc32(bytes + done, n, crc);
    }
    if (crc != e->crc32) {
      fail("{}: checksum mismatch for tensor '{}' — the checkpoint is corrupted",
           file.path().string(), t->name);
    }
  }
}

}  // namespace tessera::ckpt
