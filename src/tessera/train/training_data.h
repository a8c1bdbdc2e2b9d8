#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>

#include "tessera/comm/communicator.h"
#include "tessera/data/dataset.h"
#include "tessera/runtime/pipeline_runtime.h"
#include "tessera/train/run_config.h"

namespace tessera::train {

// The run's tokens. data.path is opened as is when it is a prepared dataset; text is prepared
// into out_dir/dataset with data.tokenizer first (a resumed run reuses that preparation after
// checking it was made from the same files and tokenizer). The tokenizer's files are copied to
// out_dir/tokenizer with their digests (tokenizer::copy_tokenizer, which checks the dataset's copy
// against its own), so the run folder alone can decode what it trains. Errors when
// model.vocab_size cannot hold the tokenizer's ids. Text is prepared by the world's rank 0; the
// others open what it wrote.
data::Dataset open_training_data(const RunConfig& rc, const std::filesystem::path& out_dir,
                                 comm::Communicator& world);

// The token that ends each packed document, when train.document_mask asks for them: the
// dataset's end-of-text token, without which it is an error.
std::optional<int32_t> document_separator(const TrainConfig& tc, const data::Dataset& dataset);

// Each micro-batch's share of a training step's loss: its trained targets (`tokens` targets each)
// over those of the whole step on every data-parallel rank, so that the step's gradients are
// those of the mean loss over all of them, on any layout and however a loss mask spreads them.
// Without a loss mask (`masked` false) each share is 1 / (micro-batches x data-parallel ranks).
void weigh_micro_batches(std::span<runtime::MicroBatch> micro_batches, int64_t tokens, bool masked,
                         comm::Communicator& dp);

// The dropout keys of a step's micro-batches on data-parallel rank dp_rank (train.lora_dropout):
// one for each micro-batch of each rank, never 0 (no dropout), drawn from the seed and the step,
// so tensor-parallel ranks and pipeline stages draw the same and a resumed run draws what an
// uninterrupted one would.
void draw_dropout_keys(std::span<runtime::MicroBatch> micro_batches, uint64_t seed, int64_t step,
                       int64_t dp_rank);

// How checkpoints name the tokenizer: "byte", or {"kind": ..., "dir": out_dir/tokenizer}.
nlohmann::json tokenizer_metadata(const data::Dataset& dataset,
                                  const std::filesystem::path& out_dir);

}  // namespace tessera::train
