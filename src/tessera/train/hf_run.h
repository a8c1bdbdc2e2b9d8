// A Hugging Face model folder (config.json, safetensors weights, optionally its tokenizer), or a
// GGUF file, as the start of a run: the run config its config.json implies, and a run folder whose
// step 0 holds its weights, which `tessera train` fine-tunes and `tessera generate` samples from.
#pragma once

#include <filesystem>
#include <string>

#include "tessera/core/config.h"
#include "tessera/interop/gguf_import.h"
#include "tessera/model/model_config.h"

namespace tessera::train {

// The resolved run config of model `m`: its model.* keys, every other key at its default
// (train.seq_len capped at model.max_seq), data.tokenizer = `tokenizer` unless "byte". Validated
// as a run of it would be.
Config hf_run_config(const model::ModelConfig& m, const std::string& tokenizer);

// Imports the folder `hf` into the new run folder `out`: config.toml, checkpoints/step-000000
// (parameters only, the manifest's metadata naming the folder it came from) and, for a tokenizer
// other than "byte", a copy of it in out/tokenizer. With `peft`, a PEFT LoRA adapter folder for
// that model, the step also holds the adapters (its own "lora_base") and config.toml their
// train.lora_* settings. A folder that already holds a checkpoint is refused. Returns the step
// folder written.
std::filesystem::path import_hf_run(const std::filesystem::path& hf,
                                    const std::filesystem::path& out, const std::string& tokenizer,
                                    const std::filesystem::path& peft = {});

// Imports the GGUF file `gguf` (interop/gguf_import.h) into the new run folder `out` the same way.
// The run's tokenizer is `tokenizer` where given, else the file's own vocabulary (saved as Hugging
// Face's tokenizer files), else "byte". Returns the step folder written and the import.
struct GgufRun {
  std::filesystem::path step;
  interop::GgufImport imported;
};
GgufRun import_gguf_run(const std::filesystem::path& gguf, const std::filesystem::path& out,
                        const std::string& tokenizer);

// A LoRA run's checkpoint (a run folder or step) with its adapters folded into its base model
// (model::merge_lora), as the new run folder `out`, laid out as an import. Returns the step
// folder written.
std::filesystem::path merge_lora_run(const std::filesystem::path& checkpoint,
                                     const std::filesystem::path& out);

// "the folder itself" when a Hugging Face folder holds tokenizer files, else "byte".
std::string hf_folder_tokenizer(const std::filesystem::path& hf);

}  // namespace tessera::train
