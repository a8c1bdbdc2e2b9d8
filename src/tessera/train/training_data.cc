#include "tessera/train/training_data.h"

#include <fmt/format.h>

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/core/targets.h"
#include "tessera/core/text_corpus.h"
#include "tessera/data/prepare.h"
#include "tessera/tokenizer/token_table.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tessera/tokenizer/tokenizer_copy.h"

namespace tessera::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kDatasetDir = "dataset";

std::string tokenizer_source(const std::string& name) {
  if (name.empty() || name == "byte") return "byte";
  return fs::absolute(name).string();
}

void check_vocab_fits(const RunConfig& rc, const std::string& kind, int64_t vocab_size,
                      const std::string& where) {
  check(rc.model.vocab_size >= vocab_size,
        "model.vocab_size ({}) is smaller than the vocabulary of the {} tokenizer of {} ({})",
        rc.model.vocab_size, kind, where, vocab_size);
}

// Prepares text into out_dir/dataset unless a complete earlier preparation of the same text with
// the same tokenizer is there.
fs::path prepared_text(const RunConfig& rc, const fs::path& out_dir) {
  const fs::path dir = out_dir / kDatasetDir;
  const std::string source = tokenizer_source(rc.data.tokenizer);
  std::vector<std::string> inputs;
  for (const fs::path& f : corpus_files(rc.data.path)) {
    inputs.push_back(fs::absolute(f).string());
  }
  if (data::is_dataset_dir(dir)) {
    const data::DatasetManifest m = data::read_dataset_manifest(dir);
    check(m.inputs == inputs && m.tokenizer_source == source,
          "{} was prepared from other files or another tokenizer than data.path = {} and "
          "data.tokenizer = {}; train into a new --out folder",
          dir.string(), rc.data.path, source);
    return dir;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);  // an interrupted preparation: start it again
  check(!ec, "{}: cannot remove the incomplete dataset ({})", dir.string(), ec.message());
  const std::unique_ptr<tokenizer::Tokenizer> tokenizer = tokenizer::load_tokenizer(source);
  check_vocab_fits(rc, tokenizer->kind(), tokenizer->vocab_size(), source);
  data::PrepareOptions options;
  options.inputs = {rc.data.path};
  options.out_dir = dir;
  options.val_fraction = rc.data.val_fraction;
  options.threads = int(rc.train.threads);
  data::prepare_dataset(*tokenizer, source, options);
  return dir;
}

// The dataset of data.path, prepared first when it is text.
data::Dataset prepared_dataset(const RunConfig& rc, const fs::path& out_dir) {
  check(!rc.data.path.empty(),
        "no training data: pass --data PATH (a prepared dataset, a text file or a folder)");
  fs::path dir;
  if (data::is_dataset_dir(rc.data.path)) {
    dir = rc.data.path;
    // A prepared dataset brings its tokenizer; one also given (a fine-tuned model's) must be it.
    if (!rc.data.tokenizer.empty()) {
      const data::DatasetManifest m = data::read_dataset_manifest(dir);
      tokenizer::check_same_tokenizer(
          *tokenizer::load_tokenizer(data::dataset_tokenizer(dir, m)),
          fmt::format("the dataset {}", rc.data.path),
          *tokenizer::load_tokenizer(tokenizer_source(rc.data.tokenizer)),
          fmt::format("data.tokenizer = {}", rc.data.tokenizer));
    }
  } else {
    dir = prepared_text(rc, out_dir);
  }
  data::Dataset dataset = data::open_dataset(dir);
  const data::DatasetManifest& m = dataset.manifest;
  check_vocab_fits(rc, m.tokenizer_kind, m.vocab_size, dir.string());
  const int64_t window = rc.train.seq_len + 1;
  check(dataset.train.size() >= window && dataset.val.size() >= window,
        "{}: the training and held-out splits hold {} and {} tokens, but one sequence of "
        "train.seq_len + 1 needs {}",
        dir.string(), dataset.train.size(), dataset.val.size(), window);
  if (!m.tokenizer_copy.empty()) {
    tokenizer::copy_tokenizer(dir / m.tokenizer_copy, out_dir / tokenizer::kTokenizerCopyDir);
  }
  return dataset;
}

}  // namespace

data::Dataset open_training_data(const RunConfig& rc, const fs::path& out_dir,
                                 comm::Communicator& world) {
  const bool lead = world.rank() == 0;
  if (!lead) world.barrier();
  data::Dataset d = prepared_dataset(rc, out_dir);
  if (lead) world.barrier();
  return d;
}

void draw_dropout_keys(std::span<runtime::MicroBatch> micro_batches, uint64_t seed, int64_t step,
                       int64_t dp_rank) {
  const CounterRng keys(seed, uint64_t(step));
  const int64_t n = int64_t(micro_batches.size());
  for (int64_t micro = 0; micro < n; ++micro) {
    micro_batches[size_t(micro)].dropout_key = keys.bits(uint64_t(dp_rank * n + micro)) | 1;
  }
}

nlohmann::json tokenizer_metadata(const data::Dataset& dataset, const fs::path& out_dir) {
  if (dataset.manifest.tokenizer_copy.empty()) return dataset.manifest.tokenizer_kind;
  return {{"kind", dataset.manifest.tokenizer_kind},
          {"dir", fs::absolute(out_dir / tokenizer::kTokenizerCopyDir).string()}};
}

std::optional<int32_t> document_separator(const TrainConfig& tc, const data::Dataset& dataset) {
  if (!tc.document_mask) return std::nullopt;
  check(dataset.manifest.end_of_text.has_value(),
        "train.document_mask: the dataset {} has no end-of-text token to find its documents by "
        "(its {} tokenizer separates them by line breaks); prepare it with a tokenizer that has "
        "one",
        dataset.dir.string(), dataset.manifest.tokenizer_kind);
  return dataset.manifest.end_of_text;
}

void weigh_micro_batches(std::span<runtime::MicroBatch> micro_batches, int64_t tokens, bool masked,
                         comm::Communicator& dp) {
  if (!masked) {
    for (runtime::MicroBatch& b : micro_batches) {
      b.share = 1.0 / double(int64_t(micro_batches.size()) * dp.size());
    }
    return;
  }
  double total = 0;
  for (runtime::MicroBatch& b : micro_batches) {
    b.share = double(std::count_if(b.targets, b.targets + tokens,
                                   [](int32_t t) { return t != kIgnoredTarget; }));
    total += b.share;
  }
  if (dp.size() > 1) dp.all_reduce(&total, 1);
  for (runtime::MicroBatch& b : micro_batches) b.share = total > 0 ? b.share / total : 0;
}

}  // namespace tessera::train
