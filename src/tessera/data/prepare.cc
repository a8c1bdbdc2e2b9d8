#include "tessera/data/prepare.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <span>
#include <tuple>

#include "tessera/core/error.h"
#include "tessera/core/text_corpus.h"
#include "tessera/core/threading.h"
#include "tessera/data/progress_bar.h"
#include "tessera/data/shard.h"
#include "tessera/tokenizer/tokenizer_copy.h"

namespace tessera::data {
namespace fs = std::filesystem;

namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;
constexpr size_t kWaveBytes = size_t{32} << 20;
constexpr size_t kLineSearchBytes = 4096;

struct Chunk {
  std::string text;
  size_t file;  // index into the file list, for errors
  bool val;
  bool separator_before;
};

bool is_utf8_continuation(char c) { return (static_cast<unsigned char>(c) & 0xc0) == 0x80; }

// Where the chunk starting at begin ends: after its last line break when it must be cut, else at
// a character boundary, so that no token would have spanned the cut.
size_t chunk_end(const std::string& text, size_t begin) {
  if (text.size() - begin <= kChunkBytes) return text.size();
  size_t end = begin + kChunkBytes;
  const size_t newline = text.rfind('\n', end - 1);
  if (newline != std::string::npos && newline >= begin) return newline + 1;
  while (end > begin + 1 && is_utf8_continuation(text[end])) --end;
  return end;
}

// The first line start at or after `at` within a short search, else the next character start:
// the held-out text begins on a fresh line when it can.
size_t line_start_at_or_after(const std::string& text, size_t at) {
  if (at == 0) return 0;
  const size_t limit = std::min(text.size(), at + kLineSearchBytes);
  for (size_t i = at; i < limit; ++i) {
    if (text[i - 1] == '\n') return i;
  }
  while (at < text.size() && is_utf8_continuation(text[at])) ++at;
  return at;
}

// Appends tokens, with their loss mask when `masked`, to numbered shard files of at most
// shard_tokens tokens each.
class SplitWriter {
 public:
  SplitWriter(fs::path dir, std::string name, int64_t vocab_size, int64_t shard_tokens,
              bool masked = false)
      : dir_(std::move(dir)),
        name_(std::move(name)),
        vocab_size_(vocab_size),
        shard_tokens_(shard_tokens),
        masked_(masked) {}

  // trained: [tokens] for a masked split, else empty.
  void append(std::span<const int32_t> tokens, int64_t bytes,
              std::span<const uint8_t> trained = {}) {
    split_.bytes += bytes;
    split_.tokens += int64_t(tokens.size());
    while (!tokens.empty()) {
      const size_t n = std::min(tokens.size(), size_t(shard_tokens_) - buffer_.size());
      buffer_.insert(buffer_.end(), tokens.begin(), tokens.begin() + n);
      tokens = tokens.subspan(n);
      if (masked_) {
        trained_.insert(trained_.end(), trained.begin(), trained.begin() + n);
        trained = trained.subspan(n);
      }
      if (int64_t(buffer_.size()) == shard_tokens_) flush();
    }
  }

  DatasetSplit finish() {
    if (!buffer_.empty()) flush();
    return split_;
  }

 private:
  void flush() {
    split_.shards.push_back(fmt::format("{}-{:06}.bin", name_, split_.shards.size()));
    write_shard(dir_ / split_.shards.back(), buffer_, vocab_size_, trained_);
    buffer_.clear();
    trained_.clear();
  }

  fs::path dir_;
  std::string name_;
  int64_t vocab_size_, shard_tokens_;
  bool masked_;
  std::vector<int32_t> buffer_;
  std::vector<uint8_t> trained_;
  DatasetSplit split_;
};

void create_empty_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    check(fs::is_directory(dir, ec) && fs::is_empty(dir, ec),
          "{}: already exists and is not an empty folder; prepare into a new one", dir.string());
  }
  fs::create_directories(dir, ec);
  check(!ec, "{}: cannot create the dataset folder ({})", dir.string(), ec.message());
}

// The files of every input, and their bytes in all.
std::pair<std::vector<fs::path>, int64_t> list_corpus(const std::vector<fs::path>& inputs) {
  std::vector<fs::path> files;
  int64_t total = 0;
  for (const fs::path& input : inputs) {
    for (const fs::path& file : corpus_files(input)) {
      std::error_code ec;
      const auto size = fs::file_size(file, ec);
      check(!ec, "{}: cannot read the file size ({})", file.string(), ec.message());
      files.push_back(fs::absolute(file));
      total += int64_t(size);
    }
  }
  check(total > 0, "{}: the corpus is empty", inputs.front().string());
  return {files, total};
}

// The manifest's tokenizer and inputs; a tokenizer folder is copied into the dataset.
DatasetManifest manifest_head(const tokenizer::Tokenizer& tokenizer,
                              const std::string& tokenizer_source,
                              const std::vector<fs::path>& files, const fs::path& out_dir) {
  DatasetManifest m;
  m.tokenizer_kind = tokenizer.kind();
  m.tokenizer_source = tokenizer_source;
  m.vocab_size = tokenizer.vocab_size();
  m.end_of_text = tokenizer.end_of_text();
  for (const fs::path& f : files) m.inputs.push_back(f.string());
  std::error_code ec;
  if (tokenizer_source != "byte" && fs::is_directory(tokenizer_source, ec)) {
    m.tokenizer_source = fs::absolute(tokenizer_source).string();
    m.tokenizer_copy = tokenizer::kTokenizerCopyDir;
    tokenizer::copy_tokenizer(tokenizer_source, out_dir / m.tokenizer_copy);
  }
  return m;
}

// Chunks encoded a wave at a time on `threads` threads and appended, in order, to the training
// or held-out split, a separator before each document but the first.
class WaveEncoder {
 public:
  WaveEncoder(const tokenizer::Tokenizer& tokenizer, const DatasetManifest& m,
              const PrepareOptions& o, const std::vector<fs::path>& files, int64_t total)
      : tokenizer_(tokenizer),
        files_(files),
        threads_(o.threads > 0 ? o.threads : num_threads()),
        separator_(m.end_of_text ? std::vector<int32_t>{*m.end_of_text} : tokenizer.encode("\n")),
        separator_bytes_(m.end_of_text ? 0 : 1),
        train_(o.out_dir, "train", m.vocab_size, o.shard_tokens),
        val_(o.out_dir, "val", m.vocab_size, o.shard_tokens),
        bar_("prepare", total) {}

  void add(Chunk chunk) {
    wave_bytes_ += chunk.text.size();
    wave_.push_back(std::move(chunk));
    if (wave_bytes_ >= kWaveBytes || wave_.size() >= size_t(4 * threads_)) encode();
  }

  // Encodes what is left and returns the two splits.
  std::pair<DatasetSplit, DatasetSplit> finish() {
    encode();
    bar_.finish();
    return {train_.finish(), val_.finish()};
  }

 private:
  void encode() {
    const auto n = int64_t(wave_.size());
    std::vector<std::vector<int32_t>> encoded(n);
    std::vector<std::exception_ptr> errors(n);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (int64_t i = 0; i < n; ++i) {
      try {
        encoded[i] = tokenizer_.encode(wave_[i].text);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      if (!errors[i]) continue;
      try {
        std::rethrow_exception(errors[i]);
      } catch (const Error& e) {
        fail("{}: {}", files_[wave_[i].file].string(), e.what());
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      SplitWriter& out = wave_[i].val ? val_ : train_;
      if (wave_[i].separator_before) out.append(separator_, separator_bytes_);
      out.append(encoded[i], int64_t(wave_[i].text.size()));
      done_ += int64_t(wave_[i].text.size());
      bar_.update(done_);
    }
    wave_.clear();
    wave_bytes_ = 0;
  }

  const tokenizer::Tokenizer& tokenizer_;
  const std::vector<fs::path>& files_;
  const int threads_;
  const std::vector<int32_t> separator_;
  const int64_t separator_bytes_;
  SplitWriter train_, val_;
  ProgressBar bar_;
  std::vector<Chunk> wave_;
  size_t wave_bytes_ = 0;
  int64_t done_ = 0;
};

// Cuts the files into chunks at line breaks, the held-out split starting on the first line at or
// after byte val_begin of the concatenated text.
void cut_into_chunks(const std::vector<fs::path>& files, int64_t val_begin, WaveEncoder& encoder) {
  int64_t offset = 0;      // of the current file in the concatenated text
  int64_t val_start = -1;  // where the held-out text begins, once found
  bool in_val = false, first_document = true;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string text = read_text_file(files[f]);
    bool document_start = true;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = chunk_end(text, pos);
      if (!in_val && val_start < 0 && offset + int64_t(end) > val_begin) {
        const auto at = size_t(std::max<int64_t>(int64_t(pos), val_begin - offset));
        val_start = offset + int64_t(line_start_at_or_after(text, at));
      }
      if (!in_val && val_start >= 0) {
        if (val_start <= offset + int64_t(pos)) {
          in_val = true;
        } else if (val_start < offset + int64_t(end)) {
          end = size_t(val_start - offset);
        }
      }
      encoder.add({text.substr(pos, end - pos), f, in_val, document_start && !first_document});
      document_start = first_document = false;
      pos = end;
    }
    offset += int64_t(text.size());
  }
}

// Chat examples: the non-blank lines of every file, encoded a wave at a time on `threads`
// threads, each example after the first of its split preceded by an untrained end-of-text token.
class ChatEncoder {
 public:
  ChatEncoder(const tokenizer::Tokenizer& tokenizer, const jinja::ChatTemplate& chat_template,
              ChatLoss loss, const DatasetManifest& m, const PrepareOptions& o, int64_t total)
      : tokenizer_(tokenizer),
        chat_template_(chat_template),
        loss_(loss),
        threads_(o.threads > 0 ? o.threads : num_threads()),
        separator_{*m.end_of_text},
        train_(o.out_dir, "train", m.vocab_size, o.shard_tokens, true),
        val_(o.out_dir, "val", m.vocab_size, o.shard_tokens, true),
        bar_("prepare", total) {}

  // Encodes every line; the last val_lines go to the held-out split.
  std::pair<DatasetSplit, DatasetSplit> encode(const std::vector<fs::path>& files,
                                               const std::vector<std::string>& texts,
                                               double val_fraction) {
    for (size_t f = 0; f < files.size(); ++f) {
      int64_t number = 0;
      for (size_t pos = 0; pos < texts[f].size();) {
        const size_t end = std::min(texts[f].find('\n', pos), texts[f].size());
        const std::string_view line(texts[f].data() + pos, end - pos);
        ++number;
        if (line.find_first_not_of(" \t\r") != std::string_view::npos) {
          lines_.push_back({f, number, line});
        }
        pos = end + 1;
      }
    }
    const auto n = int64_t(lines_.size());
    check(n >= 2, "{}: {} chat examples; a training and a held-out split need at least 2",
          files.front().string(), n);
    const int64_t val_lines = std::clamp<int64_t>(std::llround(double(n) * val_fraction), 1, n - 1);
    for (int64_t first = 0; first < n; first += kChatWave) {
      encode_wave(files, first, std::min(n, first + kChatWave), n - val_lines);
    }
    bar_.finish();
    return {train_.finish(), val_.finish()};
  }

 private:
  static constexpr int64_t kChatWave = 1024;
  struct Line {
    size_t file;
    int64_t number;
    std::string_view text;
  };

  void encode_wave(const std::vector<fs::path>& files, int64_t first, int64_t end,
                   int64_t val_first) {
    std::vector<ChatExample> examples(size_t(end - first));
    std::vector<std::exception_ptr> errors(examples.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
    for (int64_t i = first; i < end; ++i) {
      try {
        examples[i - first] =
            encode_chat_example(lines_[i].text, chat_template_, tokenizer_, loss_);
      } catch (...) {
        errors[i - first] = std::current_exception();
      }
    }
    for (int64_t i = first; i < end; ++i) {
      if (errors[i - first]) {
        try {
          std::rethrow_exception(errors[i - first]);
        } catch (const Error& e) {
          fail("{}:{}: {}", files[lines_[i].file].string(), lines_[i].number, e.what());
        }
      }
      const ChatExample& example = examples[i - first];
      SplitWriter& out = i >= val_first ? val_ : train_;
      if (i != 0 && i != val_first) out.append(separator_, 0, kUntrained);
      out.append(example.tokens, example.bytes, example.trained);
      done_ += int64_t(lines_[i].text.size()) + 1;
      bar_.update(done_);
    }
  }

  static constexpr uint8_t kUntrained[1] = {0};
  const tokenizer::Tokenizer& tokenizer_;
  const jinja::ChatTemplate& chat_template_;
  const ChatLoss loss_;
  const int threads_;
  const std::vector<int32_t> separator_;
  SplitWriter train_, val_;
  ProgressBar bar_;
  std::vector<Line> lines_;
  int64_t done_ = 0;
};

void check_options(const PrepareOptions& o) {
  check(o.val_fraction > 0 && o.val_fraction < 1, "--val-fraction must be in (0, 1), got {}",
        o.val_fraction);
  check(o.shard_tokens >= 1, "--shard-tokens must be at least 1, got {}", o.shard_tokens);
  check(!o.inputs.empty(), "prepare: no input files given");
}

// Checks both splits hold tokens, writes the manifest and says what was prepared.
void finish_dataset(const PrepareOptions& o, const DatasetManifest& m) {
  check(m.train.tokens > 0, "{}: the training split is empty; lower --val-fraction ({})",
        o.inputs.front().string(), o.val_fraction);
  check(m.val.tokens > 0, "{}: the held-out split is empty; raise --val-fraction ({})",
        o.inputs.front().string(), o.val_fraction);
  write_dataset_manifest(o.out_dir, m);
  spdlog::info(
      "prepared {}: {} training tokens ({:.3f} bytes/token) in {} shards, {} held-out tokens, "
      "{} tokenizer with {} tokens",
      o.out_dir.string(), m.train.tokens, double(m.train.bytes) / double(m.train.tokens),
      m.train.shards.size(), m.val.tokens, m.tokenizer_kind, m.vocab_size);
}

}  // namespace

DatasetManifest prepare_dataset(const tokenizer::Tokenizer& tokenizer,
                                const std::string& tokenizer_source, const PrepareOptions& o) {
  check_options(o);
  const auto [files, total] = list_corpus(o.inputs);
  create_empty_dir(o.out_dir);
  DatasetManifest m = manifest_head(tokenizer, tokenizer_source, files, o.out_dir);
  WaveEncoder encoder(tokenizer, m, o, files, total);
  cut_into_chunks(files, total - std::llround(double(total) * o.val_fraction), encoder);
  std::tie(m.train, m.val) = encoder.finish();
  finish_dataset(o, m);
  return m;
}

DatasetManifest prepare_chat_dataset(const tokenizer::Tokenizer& tokenizer,
                                     const std::string& tokenizer_source,
                                     const jinja::ChatTemplate& chat_template, ChatLoss loss,
                                     const PrepareOptions& o) {
  check_options(o);
  check(tokenizer.end_of_text().has_value(),
        "chat data: the {} tokenizer has no end-of-text token to end each example with",
        tokenizer.kind());
  const auto [files, total] = list_corpus(o.inputs);
  std::vector<std::string> texts;
  for (const fs::path& file : files) texts.push_back(read_text_file(file));
  create_empty_dir(o.out_dir);
  DatasetManifest m = manifest_head(tokenizer, tokenizer_source, files, o.out_dir);
  ChatEncoder encoder(tokenizer, chat_template, loss, m, o, total);
  std::tie(m.train, m.val) = encoder.encode(files, texts, o.val_fraction);
  finish_dataset(o, m);
  return m;
}

}  // namespace tessera::data
