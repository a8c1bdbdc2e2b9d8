#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessera/data/dataset.h"
#include "tessera/train/run_config.h"

namespace tessera::train {

// The run's tokens. data.path is opened as is when it is a prepared dataset; text is prepared
// into out_dir/dataset with data.tokenizer first (a resumed run reuses that preparation after
// checking it was made from the same files and tokenizer). The tokenizer's files are copied to
// out_dir/tokenizer with their digests (tokenizer::copy_tokenizer, which checks the dataset's copy
// against its own), so the run folder alone can decode what it trains. Errors when
// model.vocab_size cannot hold the tokenizer's ids.
data::Dataset open_training_data(const RunConfig& rc, const std::filesystem::path& out_dir);

// How checkpoints name the tokenizer: "byte", or {"kind": ..., "dir": out_dir/tokenizer}.
nlohmann::json tokenizer_metadata(const data::Dataset& dataset,
                                  const std::filesystem::path& out_dir);

}  // namespace tessera::train
