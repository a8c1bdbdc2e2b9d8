#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/ckpt/state_reader.h"
#include "tessera/cli/flags.h"
#include "tessera/core/error.h"
#include "tessera/interop/gguf_export.h"
#include "tessera/interop/gguf_tokenizer.h"
#include "tessera/interop/gguf_writer.h"
#include "tessera/interop/hf_convert.h"
#include "tessera/interop/hf_names.h"
#include "tessera/model/model_layout.h"
#include "tessera/tokenizer/hf_tokenizer_file.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tessera/train/hf_run.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: tessera convert <export|import> [flags]\n\n"
    "  export   write a checkpoint as a Hugging Face model folder or a GGUF file\n"
    "  import   turn a Hugging Face model folder into a run folder for tessera generate\n\n"
    "Run 'tessera convert <subcommand> --help' for its flags.\n";

DType hf_dtype(const std::string& name) {
  if (name == "f32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  fail("tessera convert export: --dtype must be f32 or bf16 for --format hf, got '{}'", name);
}

int export_checkpoint(int argc, char** argv) {
  Flags flags(
      "convert export",
      {{"checkpoint", "DIR", "a run folder or one checkpoint step folder (required)"},
       {"out", "PATH", "the Hugging Face model folder, or the .gguf file, to write (required)"},
       {"format", "hf|gguf", "a Hugging Face folder or one GGUF file (default hf)"},
       {"dtype", "D",
        "stored weights: f32 or bf16 for hf, f32, f16 or q8_0 for gguf (default f32)"}},
      argc, argv);
  if (flags.has("help")) {
    std::fputs(flags
                   .help("Write a checkpoint's parameters for other tools. --format hf writes\n"
                         "model.safetensors and config.json for Hugging Face Transformers\n"
                         "(GPT2LMHeadModel, LlamaForCausalLM or MixtralForCausalLM), with its\n"
                         "tokenizer as tokenizer.json, tokenizer_config.json and\n"
                         "generation_config.json. --format gguf writes one file for llama.cpp\n"
                         "and ollama (GPT-2 and dense Llama), with the tokenizer in its metadata.")
                   .c_str(),
               stdout);
    return 0;
  }
  const auto checkpoint = flags.get("checkpoint");
  const auto out = flags.get("out");
  check(checkpoint.has_value(), "tessera convert export: --checkpoint DIR is required");
  check(out.has_value(), "tessera convert export: --out PATH is required");
  const std::string format = flags.get_or("format", "hf");
  check(format == "hf" || format == "gguf",
        "tessera convert export: --format must be hf or gguf, got '{}'", format);
  const std::string dtype = flags.get_or("dtype", "f32");
  const interop::GgufWeights gguf_weights =
      format == "gguf" ? interop::gguf_weights_from_name(dtype) : interop::GgufWeights::f32;
  const DType safetensors_dtype = format == "hf" ? hf_dtype(dtype) : DType::f32;

  const fs::path step_dir = ckpt::checkpoint_step_dir(*checkpoint);
  const ckpt::Manifest manifest = ckpt::read_manifest(step_dir);
  const auto [mc, params] = ckpt::read_checkpoint_params(step_dir, manifest);
  const std::string tokenizer = ckpt::checkpoint_tokenizer(step_dir, manifest.metadata);
  const tokenizer::BpeVocab vocab = tokenizer::read_bpe_vocab(tokenizer);
  std::string architecture;
  if (format == "hf") {
    architecture = interop::export_hf(mc, params, *out, safetensors_dtype);
    tokenizer::write_hf_tokenizer_files(vocab, mc.max_seq, *out);
  } else {
    check(!fs::is_directory(*out),
          "tessera convert export: --out {} is a folder; --format gguf "
          "writes one file, e.g. --out model.gguf",
          *out);
    interop::GgufWriter gguf;
    architecture = interop::add_gguf_model(mc, params, gguf_weights, gguf);
    interop::add_gguf_tokenizer(vocab, mc.vocab_size, gguf);
    gguf.write(*out);
  }
  std::printf("exported %s (%s, %.2fM parameters, %s, tokenizer %s) to %s\n",
              step_dir.string().c_str(), architecture.c_str(),
              double(model::count_parameters(mc).total) / 1e6, dtype.c_str(), tokenizer.c_str(),
              out->c_str());
  return 0;
}

int import_model(int argc, char** argv) {
  Flags flags(
      "convert import",
      {{"hf", "DIR", "a Hugging Face model folder: config.json, model.safetensors (required)"},
       {"out", "DIR", "the run folder to create (required)"},
       {"tokenizer", "byte|DIR", "the tokenizer for generate (default byte)"}},
      argc, argv);
  if (flags.has("help")) {
    std::fputs(flags
                   .help("Read a Hugging Face GPT-2, Llama or Mixtral model folder into a new\n"
                         "run folder (config.toml and checkpoints/step-000000) that\n"
                         "'tessera generate --checkpoint DIR' can sample from.")
                   .c_str(),
               stdout);
    return 0;
  }
  const auto hf = flags.get("hf");
  const auto out = flags.get("out");
  check(hf.has_value(), "tessera convert import: --hf DIR is required");
  check(out.has_value(), "tessera convert import: --out DIR is required");
  const fs::path step = train::import_hf_run(*hf, *out, flags.get_or("tokenizer", "byte"));
  const model::ModelConfig mc = interop::read_hf_model_config(*hf);
  std::printf("imported %s (%s, %.2fM parameters) into %s\n", hf->c_str(),
              interop::hf_layout(mc).architecture.c_str(),
              double(model::count_parameters(mc).total) / 1e6, step.string().c_str());
  return 0;
}

}  // namespace

int convert_command(int argc, char** argv) {
  const std::string sub = argc > 0 ? argv[0] : "";
  if (sub == "export") return export_checkpoint(argc - 1, argv + 1);
  if (sub == "import") return import_model(argc - 1, argv + 1);
  if (sub == "--help" || sub == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "error: tessera convert: %s\n%s",
               sub.empty() ? "missing subcommand" : ("unknown subcommand '" + sub + "'").c_str(),
               kUsage);
  return 2;
}

}  // namespace tessera::cli
