#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/ckpt/state_reader.h"
#include "tessera/cli/flags.h"
#include "tessera/core/config.h"
#include "tessera/core/error.h"
#include "tessera/interop/gguf_export.h"
#include "tessera/interop/gguf_tokenizer.h"
#include "tessera/interop/gguf_writer.h"
#include "tessera/interop/hf_convert.h"
#include "tessera/interop/hf_names.h"
#include "tessera/interop/peft_adapter.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/transformer.h"
#include "tessera/tokenizer/hf_tokenizer_file.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tessera/train/hf_run.h"
#include "tessera/train/run_config.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kConvertUsage =
    "usage: tessera convert <export|import|merge> [flags]\n\n"
    "  export   write a checkpoint as a Hugging Face model folder, a GGUF file, or its LoRA\n"
    "           adapters as a PEFT adapter folder\n"
    "  import   turn a Hugging Face model folder (and a PEFT adapter for it), or a GGUF file,\n"
    "           into a run folder\n"
    "  merge    fold a LoRA run's adapters into its model, as a new run folder\n\n"
    "Run 'tessera convert <subcommand> --help' for its flags.\n";

DType hf_dtype(const std::string& name) {
  if (name == "f32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  fail("tessera convert export: --dtype must be f32 or bf16 for --format hf, got '{}'", name);
}

enum class ExportFormat { kHf, kGguf, kPeft };
constexpr EnumName<ExportFormat> kExportFormatNames[] = {
    {ExportFormat::kHf, "hf"}, {ExportFormat::kGguf, "gguf"}, {ExportFormat::kPeft, "peft"}};
constexpr const auto& enum_names(ExportFormat) { return kExportFormatNames; }

struct ExportFlags {
  std::string checkpoint, config, out;
  ExportFormat format = ExportFormat::kHf;
  std::string dtype = "f32";
  int64_t init_seed = 1337;
};

// What is exported: a checkpoint's model and tokenizer, or a config's model freshly initialised
// with the byte tokenizer (held by `initialised`, whose parameters `params` then views).
struct ExportSource {
  std::string name, tokenizer;
  model::ModelConfig config;
  ckpt::CheckpointParams loaded;
  std::unique_ptr<model::Transformer> initialised;
  std::span<const float> params;
};

ExportSource export_source(const ExportFlags& flags) {
  check(flags.checkpoint.empty() != flags.config.empty(),
        "tessera convert export: give one of --checkpoint DIR (a trained model) and --config FILE "
        "(a model initialised from --init-seed)");
  ExportSource source;
  if (!flags.config.empty()) {
    Config config(train::run_config_schema());
    config.load_file(flags.config);
    source.config = train::run_config_from(config).model;
    source.initialised = std::make_unique<model::Transformer>(source.config, 1, 1,
                                                              /*training=*/false);
    source.initialised->init_weights(uint64_t(flags.init_seed));
    source.params = source.initialised->params();
    source.name = flags.config + " initialised";
    source.tokenizer = "byte";
    return source;
  }
  const fs::path step_dir = ckpt::checkpoint_step_dir(flags.checkpoint);
  const ckpt::Manifest manifest = ckpt::read_manifest(step_dir);
  source.loaded = ckpt::read_checkpoint_params(step_dir, manifest);
  source.config = source.loaded.config;
  source.params = source.loaded.params;
  source.name = step_dir.string();
  source.tokenizer = ckpt::checkpoint_tokenizer(step_dir, manifest.metadata);
  return source;
}

int export_checkpoint(int argc, char** argv) {
  using F = ExportFlags;
  ExportFlags flags;
  Command command("convert export",
                  "Write a checkpoint's parameters for other tools. --format hf writes\n"
                  "model.safetensors and config.json for Hugging Face Transformers\n"
                  "(GPT2LMHeadModel, LlamaForCausalLM or MixtralForCausalLM), with its\n"
                  "tokenizer as tokenizer.json, tokenizer_config.json and\n"
                  "generation_config.json. --format gguf writes one file for llama.cpp\n"
                  "and ollama (GPT-2 and dense Llama), with the tokenizer in its metadata.\n"
                  "--format peft writes a LoRA run's adapters as a PEFT adapter folder\n"
                  "(adapter_config.json and adapter_model.safetensors).");
  const Settings<F> rows = {
      flag("--checkpoint", "DIR", &F::checkpoint, "a run folder or one checkpoint step folder"),
      flag("--config", "FILE", &F::config,
           "instead of --checkpoint: a run config whose model is exported freshly initialised, "
           "with the byte tokenizer (to benchmark sizes no run has trained)"),
      flag("--init-seed", "N", &F::init_seed, "with --config: the seed of the initial weights",
           at_least(0)),
      required(flag("--out", "PATH", &F::out,
                    "the Hugging Face model folder, or the .gguf file, to write")),
      flag("--format", "", &F::format,
           "a Hugging Face folder, one GGUF file, or a PEFT adapter folder"),
      flag("--dtype", "D", &F::dtype,
           "stored weights: f32 or bf16 for hf, f32, f16, q8_0, q4_0 or q4_k_m for gguf"),
  };
  if (!command.flags(rows, flags).parse(argc, argv)) return 0;
  const bool gguf = flags.format == ExportFormat::kGguf;
  const interop::GgufWeights gguf_weights =
      gguf ? enum_from_name<interop::GgufWeights>(flags.dtype, "--dtype")
           : interop::GgufWeights::f32;
  const DType safetensors_dtype = gguf ? DType::f32 : hf_dtype(flags.dtype);
  const std::string& out = flags.out;

  const ExportSource source = export_source(flags);
  const model::ModelConfig& mc = source.config;
  const std::span<const float> params = source.params;
  if (flags.format == ExportFormat::kPeft) {
    check(mc.lora.enabled(),
          "tessera convert export: {} holds no LoRA adapters for --format peft; it trains every "
          "weight (train.lora_rank = 0)",
          source.name);
    interop::export_peft(mc, params, out, source.name);
    std::printf("exported the LoRA adapters of %s (rank %lld, %s) to %s\n", source.name.c_str(),
                static_cast<long long>(mc.lora.rank), mc.lora.targets.c_str(), out.c_str());
    return 0;
  }
  check(!mc.lora.enabled(),
        "tessera convert export: {} holds LoRA adapters; write them with --format peft, or fold "
        "them into the model with 'tessera convert merge' and export its output",
        source.name);
  const std::string& tokenizer = source.tokenizer;
  const tokenizer::BpeVocab vocab = tokenizer::read_bpe_vocab(tokenizer);
  std::string architecture;
  if (!gguf) {
    architecture = interop::export_hf(mc, params, out, safetensors_dtype);
    tokenizer::write_hf_tokenizer_files(vocab, mc.max_seq, out);
  } else {
    check(!fs::is_directory(out),
          "tessera convert export: --out {} is a folder; --format gguf "
          "writes one file, e.g. --out model.gguf",
          out);
    interop::GgufWriter writer;
    architecture = interop::add_gguf_model(mc, params, gguf_weights, writer);
    interop::add_gguf_tokenizer(vocab, mc.vocab_size, writer);
    writer.write(out);
  }
  std::printf("exported %s (%s, %.2fM parameters, %s, tokenizer %s) to %s\n", source.name.c_str(),
              architecture.c_str(), double(model::count_parameters(mc).total) / 1e6,
              flags.dtype.c_str(), tokenizer.c_str(), out.c_str());
  return 0;
}

struct ImportFlags {
  std::string hf, gguf, out, peft, tokenizer;
};

int import_gguf(const ImportFlags& flags) {
  check(flags.hf.empty() && flags.peft.empty(),
        "tessera convert import: --gguf reads one file; give --hf (and --peft) or --gguf");
  const train::GgufRun run = train::import_gguf_run(flags.gguf, flags.out, flags.tokenizer);
  std::printf("imported %s (%s, %.2fM parameters; %s) into %s\n", flags.gguf.c_str(),
              run.imported.architecture.c_str(),
              double(model::count_parameters(run.imported.config).total) / 1e6,
              run.imported.types.c_str(), run.step.string().c_str());
  return 0;
}

int import_model(int argc, char** argv) {
  using F = ImportFlags;
  ImportFlags flags;
  Command command("convert import",
                  "Read a Hugging Face GPT-2, Llama or Mixtral model folder, or a GGUF file\n"
                  "of a GPT-2, Llama or Qwen 3 model, into a new run folder (config.toml and\n"
                  "checkpoints/step-000000) that 'tessera generate --checkpoint DIR' can\n"
                  "sample from.");
  const Settings<F> rows = {
      flag("--hf", "DIR", &F::hf, "a Hugging Face model folder: config.json, model.safetensors"),
      flag("--gguf", "FILE", &F::gguf,
           "a GGUF file (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K tensors), weights "
           "widened to f32, with its tokenizer"),
      required(flag("--out", "DIR", &F::out, "the run folder to create")),
      flag("--tokenizer", "byte|DIR", &F::tokenizer,
           "the tokenizer for generate (default: a GGUF file's own, else byte)"),
      flag("--peft", "DIR", &F::peft,
           "a PEFT LoRA adapter folder for that model: adapters trained on from where they are"),
  };
  if (!command.flags(rows, flags).parse(argc, argv)) return 0;
  check(flags.hf.empty() != flags.gguf.empty(),
        "tessera convert import: give the model to read as --hf DIR or --gguf FILE");
  if (!flags.gguf.empty()) return import_gguf(flags);
  if (flags.tokenizer.empty()) flags.tokenizer = "byte";
  const fs::path step = train::import_hf_run(flags.hf, flags.out, flags.tokenizer, flags.peft);
  const model::ModelConfig mc = interop::read_hf_model_config(flags.hf);
  const std::string adapters = flags.peft.empty() ? "" : " with the LoRA adapters of " + flags.peft;
  std::printf("imported %s (%s, %.2fM parameters)%s into %s\n", flags.hf.c_str(),
              interop::hf_layout(mc).architecture.c_str(),
              double(model::count_parameters(mc).total) / 1e6, adapters.c_str(),
              step.string().c_str());
  return 0;
}

struct MergeFlags {
  std::string checkpoint, out;
};

int merge_adapters(int argc, char** argv) {
  using F = MergeFlags;
  MergeFlags flags;
  Command command("convert merge",
                  "Fold a LoRA run's adapters into its base model (each adapted weight\n"
                  "becomes W + lora_alpha / rank * B A) and write the result as a new run\n"
                  "folder, which train, generate, serve and convert export take as any other.");
  const Settings<F> rows = {
      required(flag("--checkpoint", "DIR", &F::checkpoint,
                    "a LoRA run folder or one of its checkpoint step folders")),
      required(flag("--out", "DIR", &F::out, "the run folder to create")),
  };
  if (!command.flags(rows, flags).parse(argc, argv)) return 0;
  const fs::path step = train::merge_lora_run(flags.checkpoint, flags.out);
  std::printf("merged the LoRA adapters of %s into %s\n", flags.checkpoint.c_str(),
              step.string().c_str());
  return 0;
}

}  // namespace

int convert_command(int argc, char** argv) {
  const std::string sub = argc > 0 ? argv[0] : "";
  if (sub == "export") return export_checkpoint(argc - 1, argv + 1);
  if (sub == "import") return import_model(argc - 1, argv + 1);
  if (sub == "merge") return merge_adapters(argc - 1, argv + 1);
  if (sub == "--help" || sub == "-h") {
    std::fputs(kConvertUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "error: tessera convert: %s\n%s",
               sub.empty() ? "missing subcommand" : ("unknown subcommand '" + sub + "'").c_str(),
               kConvertUsage);
  return 2;
}

}  // namespace tessera::cli
