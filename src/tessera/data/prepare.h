#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/data/chat_examples.h"
#include "tessera/data/dataset_manifest.h"
#include "tessera/jinja/chat_template.h"
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

// The same for chat data: every non-blank line of the inputs is an example (chat_examples.h)
// rendered through chat_template, stored with its loss mask and ended by the tokenizer's
// end-of-text token (which is not trained on). The last val_fraction of the examples is held
// out. A bad line stops the preparation with an Error naming its file and line number.
DatasetManifest prepare_chat_dataset(const tokenizer::Tokenizer& tokenizer,
                                     const std::string& tokenizer_source,
                                     const jinja::ChatTemplate& chat_template, ChatLoss loss,
                                     const PrepareOptions& options);

}  // namespace tessera::data
