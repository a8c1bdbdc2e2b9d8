#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/cli/flags.h"
#include "tessera/comm/world.h"
#include "tessera/core/error.h"
#include "tessera/interop/hf_convert.h"
#include "tessera/launch/supervisor.h"
#include "tessera/train/dry_run.h"
#include "tessera/train/hf_run.h"
#include "tessera/train/run_config.h"
#include "tessera/train/trainer.h"

namespace tessera::cli {
namespace {

// A run that starts from a Hugging Face folder begins as its import into the run folder (rank 0
// writes it, the others wait); a run folder that already has a checkpoint resumes instead.
// Returns the run's config.toml.
std::filesystem::path start_from_hf_folder(const std::filesystem::path& hf, const std::string& out,
                                           const std::optional<std::string>& tokenizer) {
  comm::Communicator& world = comm::world();
  if (world.rank() == 0 && !ckpt::find_latest(std::filesystem::path(out) / "checkpoints")) {
    const std::filesystem::path step =
        train::import_hf_run(hf, out, tokenizer.value_or(train::hf_folder_tokenizer(hf)));
    std::printf("imported %s into %s to fine-tune\n", hf.c_str(), step.c_str());
  }
  world.barrier();
  return std::filesystem::path(out) / "config.toml";
}

}  // namespace

int train_command(int argc, char** argv) {
  Flags flags(
      "train",
      {{"config", "FILE|HF_DIR",
        "TOML config (default: the built-in tiny model, configs/tiny.toml), or a Hugging Face "
        "model folder to fine-tune"},
       {"data", "PATH", "a prepared dataset, or text: a file or a folder (sets data.path)"},
       {"tokenizer", "DIR", "\"byte\" or a tokenizer folder for text (sets data.tokenizer)"},
       {"out", "DIR", "output directory for config, metrics and checkpoints (default runs/train)"},
       {"set", "KEY=VALUE", "override any config key, e.g. --set train.steps=60", true},
       {"max-restarts", "N",
        "restart the run after a failure, up to N times, from its last checkpoint"},
       {"restart-backoff", "SECONDS", "wait before the first restart, doubled after each (1)"},
       {"dry-run", "",
        "build every rank's layout, schedule and memory for the config's mesh and print them; "
        "trains nothing, allocates no model and needs no launcher"},
       {"world", "N", "with --dry-run: the job's ranks (default: the mesh's dp x tp x pp)"},
       {"metrics-port", "N",
        "serve /metrics (Prometheus), /health and a live page of the run on 127.0.0.1:N "
        "(sets obs.metrics_port; 0 picks a free port)"}},
      argc, argv);
  if (flags.has("help")) {
    std::fputs(
        flags
            .help("Train a GPT-2 or Llama model (model.arch), dense or mixture-of-experts\n"
                  "(model.moe_experts), on a text corpus or a prepared dataset; resumes\n"
                  "from the newest checkpoint when the output directory already holds one.\n"
                  "--config HF_DIR fine-tunes a Hugging Face model folder: its config.json,\n"
                  "weights and tokenizer become the run folder's config and step 0.")
            .c_str(),
        stdout);
    return 0;
  }
  const std::string out = flags.get_or("out", "runs/train");
  if (flags.has("max-restarts")) {
    check(comm::world().size() == 1,
          "--max-restarts restarts this process, so it cannot run under a launcher's ranks; "
          "put the launcher under the supervisor instead: tessera supervise -- mpirun ...");
    // The same command without the supervisor's flags, so each attempt trains and resumes.
    std::vector<std::string> command = {std::filesystem::read_symlink("/proc/self/exe"), "train"};
    for (int i = 0; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--max-restarts" || arg == "--restart-backoff") {
        ++i;
      } else if (arg.starts_with("--max-restarts=") || arg.starts_with("--restart-backoff=")) {
        continue;
      } else {
        command.push_back(arg);
      }
    }
    return launch::supervise(command, {.max_restarts = int(flags.get_int("max-restarts", 0)),
                                       .backoff_s = flags.get_double("restart-backoff", 1),
                                       .log = std::filesystem::path(out) / "restarts.jsonl"});
  }
  Config config(train::run_config_schema());
  if (auto path = flags.get("config")) {
    if (interop::is_hf_model_folder(*path) && flags.has("dry-run")) {
      config = train::hf_run_config(interop::read_hf_model_config(*path), "byte");
    } else if (interop::is_hf_model_folder(*path)) {
      config.load_file(start_from_hf_folder(*path, out, flags.get("tokenizer")));
    } else {
      config.load_file(*path);
    }
  }
  if (auto data = flags.get("data")) config.set_override("data.path=" + *data);
  if (auto tokenizer = flags.get("tokenizer")) config.set_override("data.tokenizer=" + *tokenizer);
  if (auto port = flags.get("metrics-port")) config.set_override("obs.metrics_port=" + *port);
  for (const std::string& assignment : flags.all("set")) config.set_override(assignment);
  if (flags.has("dry-run")) {
    check(comm::world().size() == 1,
          "--dry-run plans every rank in one process: run it without mpirun or srun");
    const train::RunConfig run = train::run_config_from(config);
    const auto start = std::chrono::steady_clock::now();
    const train::DryRun plan = train::dry_run(run, flags.get_int("world", run.mesh.ranks()));
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    std::fputs(train::dry_run_report(run, plan).c_str(), stdout);
    std::printf("planned in %.2f s\n", took.count());
    return 0;
  }
  check(!flags.has("world"), "--world is for --dry-run; a training job's world is its launcher's");
  train::train(config, out);
  return 0;
}

}  // namespace tessera::cli
