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

struct TrainFlags {
  std::optional<std::string> config, data, tokenizer;
  std::string out = "runs/train";
  std::vector<std::string> set;
  std::optional<int> max_restarts;
  launch::SupervisorOptions restarts;
  bool dry_run = false;
  std::optional<int64_t> world;
  std::optional<int64_t> metrics_port;
};

Settings<TrainFlags> train_flags() {
  using T = TrainFlags;
  return join<T>({
      {
          flag("--config", "FILE|HF_DIR", &T::config,
               "TOML config (default: the built-in tiny model, configs/tiny.toml), or a Hugging "
               "Face model folder to fine-tune"),
          flag("--data", "PATH", &T::data,
               "a prepared dataset, or text: a file or a folder (sets data.path)"),
          flag("--tokenizer", "DIR", &T::tokenizer,
               "\"byte\" or a tokenizer folder for text (sets data.tokenizer)"),
          flag("--out", "DIR", &T::out, "output directory for config, metrics and checkpoints"),
          flag("--set", "KEY=VALUE", &T::set, "override any config key, e.g. --set train.steps=60"),
          flag("--max-restarts", "N", &T::max_restarts,
               "restart the run after a failure, up to N times, from its last checkpoint",
               at_least(0)),
      },
      nest(&T::restarts, Settings<launch::SupervisorOptions>{flag(
                             "--restart-backoff", "SECONDS", &launch::SupervisorOptions::backoff_s,
                             "wait before the first restart, doubled after each", at_least(0))}),
      {
          flag("--dry-run", "", &T::dry_run,
               "build every rank's layout, schedule and memory for the config's mesh and print "
               "them; trains nothing, allocates no model and needs no launcher"),
          flag("--world", "N", &T::world,
               "with --dry-run: the job's ranks (default: the mesh's dp x tp x pp)", at_least(1)),
          flag("--metrics-port", "N", &T::metrics_port,
               "serve /metrics (Prometheus), /health and a live page of the run on 127.0.0.1:N "
               "(sets obs.metrics_port; 0 picks a free port)"),
      },
  });
}

// Under the supervisor, the same command without its flags, so that each attempt trains and
// resumes.
int train_under_supervisor(int argc, char** argv, const TrainFlags& flags) {
  check(comm::world().size() == 1,
        "--max-restarts restarts this process, so it cannot run under a launcher's ranks; "
        "put the launcher under the supervisor instead: tessera supervise -- mpirun ...");
  std::vector<std::string> command = {std::filesystem::read_symlink("/proc/self/exe"), "train"};
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--max-restarts" || arg == "--restart-backoff") {
      ++i;
    } else if (!arg.starts_with("--max-restarts=") && !arg.starts_with("--restart-backoff=")) {
      command.push_back(arg);
    }
  }
  launch::SupervisorOptions options = flags.restarts;
  options.max_restarts = *flags.max_restarts;
  options.log = std::filesystem::path(flags.out) / "restarts.jsonl";
  return launch::supervise(command, options);
}

// The run's config: the file or Hugging Face folder, then the flags that set keys, then --set.
Config run_config(const TrainFlags& flags) {
  Config config(train::run_config_schema());
  if (const std::optional<std::string>& path = flags.config) {
    if (interop::is_hf_model_folder(*path) && flags.dry_run) {
      config = train::hf_run_config(interop::read_hf_model_config(*path), "byte");
    } else if (interop::is_hf_model_folder(*path)) {
      config.load_file(start_from_hf_folder(*path, flags.out, flags.tokenizer));
    } else {
      config.load_file(*path);
    }
  }
  if (flags.data) config.set_override("data.path=" + *flags.data);
  if (flags.tokenizer) config.set_override("data.tokenizer=" + *flags.tokenizer);
  if (flags.metrics_port) config.set("obs.metrics_port", *flags.metrics_port);
  for (const std::string& assignment : flags.set) config.set_override(assignment);
  return config;
}

int dry_run(const Config& config, const TrainFlags& flags) {
  check(comm::world().size() == 1,
        "--dry-run plans every rank in one process: run it without mpirun or srun");
  const train::RunConfig run = train::run_config_from(config);
  const auto start = std::chrono::steady_clock::now();
  const train::DryRun plan = train::dry_run(run, flags.world.value_or(run.mesh.ranks()));
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  std::fputs(train::dry_run_report(run, plan).c_str(), stdout);
  std::printf("planned in %.2f s\n", took.count());
  return 0;
}

}  // namespace

int train_command(int argc, char** argv) {
  TrainFlags flags;
  Command command("train",
                  "Train a GPT-2 or Llama model (model.arch), dense or mixture-of-experts\n"
                  "(model.moe_experts), on a text corpus or a prepared dataset; resumes\n"
                  "from the newest checkpoint when the output directory already holds one.\n"
                  "--config HF_DIR fine-tunes a Hugging Face model folder: its config.json,\n"
                  "weights and tokenizer become the run folder's config and step 0.");
  if (!command.flags(train_flags(), flags).parse(argc, argv)) return 0;
  if (flags.max_restarts) return train_under_supervisor(argc, argv, flags);
  const Config config = run_config(flags);
  if (flags.dry_run) return dry_run(config, flags);
  check(!flags.world, "--world is for --dry-run; a training job's world is its launcher's");
  train::train(config, flags.out);
  return 0;
}

}  // namespace tessera::cli
