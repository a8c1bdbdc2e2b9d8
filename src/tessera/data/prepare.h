#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/data/dataset_manifest.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::data {

struct PrepareOptions {
  std::vector<std::filesystem::path> inputs;  // files or folders (walked as corpus_files does)
  std::filesystem::path out_dir;              // must be missing or empty
  double val_fraction = 0.1;                  // in (0, 1)
  int64_t shard_tokens = int64_t{1} << 26;    // most tokens in one shard file
  int threads = 0;                            // 0 = all cores
};

// Tokenises the inputs into train and val shards plus dataset.json in out_dir. Every non-empty
// file is one document; documents are separated by the tokenizer's end-of-text token, or by a
// line break when it has none. The last val_fraction of the text's bytes is held out, starting
// at a line start. Files are cut into chunks at line breaks and the chunks are encoded in
// parallel (Tokenizer::encode must be safe to call concurrently); the chunking depends only on
// the text, so the tokens do not depend on the thread count. A tokenizer directory is copied
// into out_dir/tokenizer so the dataset is self-contained. Draws a progress bar on stderr.
DatasetManifest prepare_dataset(const tokenizer::Tokenizer& tokenizer,
                                const std::string& tokenizer_source, const PrepareOptions& options);

}  // namespace tessera::data
