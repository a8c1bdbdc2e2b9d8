#include <cstdio>
#include <string>
#include <vector>

#include "tessera/cli/flags.h"
#include "tessera/comm/world.h"
#include "tessera/core/config.h"
#include "tessera/interop/hf_convert.h"
#include "tessera/plan/planner.h"
#include "tessera/train/hf_run.h"
#include "tessera/train/run_config.h"

namespace tessera::cli {
namespace {

struct PlanFlags {
  std::string model;
  std::vector<std::string> set;
  bool calibrate = false;
  plan::PlanQuery query;
};

Settings<plan::Workload> workload_flags() {
  using W = plan::Workload;
  using R = plan::Reliability;
  return join<W>({
      {
          flag("--tokens", "N", &W::tokens, "tokens to train, e.g. 450e9", above(0)),
          flag("--precision", "", &W::precision,
               "parameters, gradients and activations (master weights and moments stay f32)"),
          negated(flag("--unfused-attention", "", &W::flash_attention,
                       "attention writes its scores to HBM, as Megatron-LM did before flash "
                       "attention (default: fused, as the engine)")),
          flag("--overlapped-sharding", "", &W::overlapped_sharding,
               "ZeRO 2/3 collectives overlap the step's compute, as PyTorch FSDP's and XLA's do "
               "(default: they do not, as in the engine)"),
          flag("--bf16-activations", "", &W::bf16_activations,
               "blocks keep what their backward reads in bf16/f16, as Megatron-LM, MaxText and "
               "PyTorch do (default: in f32, the engine's own memory)"),
          flag("--gather-per-tensor", "", &W::gather_per_tensor,
               "ZeRO 3 gathers each tensor with its own collective and again for a recomputed "
               "forward, as DeepSpeed's ZeRO-3 of 2021 (default: a block at a time, as the "
               "engine and FSDP)"),
      },
      nest(&W::reliability,
           Settings<R>{
               flag("--failures-per-chip-hour", "R", &R::failures_per_chip_hour,
                    "expected failures per chip-hour for goodput (Llama 3's)", at_least(0)),
               scaled(flag("--restart-minutes", "M", &R::restart_s,
                           "minutes from a failure to training again", at_least(0)),
                      60),
               scaled(flag("--checkpoint-gbps", "G", &R::checkpoint_bytes_per_s_per_chip,
                           "checkpoint write rate per chip, GB/s (Llama 3's storage)", above(0)),
                      1e9),
           }),
  });
}

Settings<plan::ServingWorkload> serving_flags() {
  using S = plan::ServingWorkload;
  return {
      flag("--prompt-tokens", "N", &S::prompt_tokens,
           "with --serve: tokens of each prompt; 0: half the context", at_least(0)),
      flag("--output-tokens", "N", &S::output_tokens, "with --serve: tokens generated per request",
           at_least(1)),
      flag("--quantize", "", &S::weights, "with --serve: int8, q4_0 or q4_k matmul weights, as serve's"),
      flag("--kv-cache-dtype", "", &S::kv_dtype,
           "with --serve: the KV cache in f32 or q8_0, as serve's"),
      flag("--max-running", "N", &S::max_running,
           "with --serve: sequences a replica decodes together, as serve's", at_least(1)),
      flag("--max-step-tokens", "N", &S::max_step_tokens,
           "with --serve: tokens one model step runs, as serve's", at_least(1)),
      scaled(
          flag("--itl-ms", "MS", &S::itl_bound_s,
               "with --serve: the longest time between two generated tokens; 0: none", at_least(0)),
          1e-3),
      scaled(flag("--ttft-ms", "MS", &S::ttft_bound_s,
                  "with --serve: the longest time to a prompt's first token; 0: none", at_least(0)),
             1e-3),
      flag("--target-tokens-per-s", "N", &S::target_tokens_per_s,
           "with --serve: generated tokens/s the deployment must reach; replicas are added to "
           "reach it; 0: none",
           at_least(0)),
  };
}

Settings<plan::PlanQuery> query_flags() {
  using Q = plan::PlanQuery;
  return join<Q>({
      {
          flag("--hardware", "NAME", &Q::hardware,
               "accelerator from the catalog, e.g. h100, tpu-v5p"),
          flag("--chips", "N[,N...]", &Q::chips,
               "number of chips; several counts print the best layout of each (days and cost "
               "frontier)"),
          flag("--seq-len", "N", &Q::seq_len,
               "sequence length; with --serve, the context each sequence may reach (default "
               "model.max_seq)",
               at_least(1)),
          flag("--global-batch", "N", &Q::global_batch,
               "sequences per optimizer step (default: about 4M tokens, rounded up to a multiple "
               "of --chips)",
               at_least(1)),
          flag("--layout", "L", &Q::layout,
               "evaluate one layout: dp=,tp=,pp=,ep=,zero=,mb=,recompute=,vpp=,sp=,cp="),
          flag("--compare", "A,B", &Q::compare,
               "best layout on each accelerator, side by side, at each --chips count"),
          flag("--deadline", "DAYS", &Q::deadline_days,
               "also name the cheapest accelerator and count that trains in time", above(0)),
          flag("--rank-by", "", &Q::rank_by, "order of the search's table"),
          flag("--top", "K", &Q::top, "layouts to show", at_least(1)),
          flag("--catalog", "FILE", &Q::catalogs,
               "extra accelerators or prices (TOML), merged over the built-in"),
          flag("--json", "", &Q::json, "print JSON instead of a table"),
          flag("--serve", "", &Q::serve,
               "plan serving: layouts, memory, sequences that fit at the context (--seq-len), "
               "tokens/s and cost per million tokens"),
      },
      nest(&Q::workload, workload_flags()),
      nest(&Q::serving, serving_flags()),
  });
}

Settings<PlanFlags> plan_flags() {
  using P = PlanFlags;
  return join<P>({
      {
          required(flag("--model", "FILE|HF_DIR", &P::model,
                        "model config (TOML; its [model] section is used), or a Hugging Face "
                        "model folder's config.json")),
          flag("--set", "KEY=VALUE", &P::set, "override a config key, e.g. --set model.n_layer=96"),
          flag("--calibrate", "", &P::calibrate,
               "measure this machine and predict Tessera's own step for the config"),
      },
      nest(&P::query, query_flags()),
  });
}

}  // namespace

int plan_command(int argc, char** argv) {
  PlanFlags flags;
  Command command("plan",
                  "Plan a training run (memory, step time, MFU, days and cost of parallel "
                  "layouts on an accelerator) or, with --serve, a deployment that serves it.");
  if (!command.flags(plan_flags(), flags).parse(argc, argv)) return 0;
  Config config(train::run_config_schema());
  if (interop::is_hf_model_folder(flags.model)) {
    config = train::hf_run_config(interop::read_hf_model_config(flags.model), "byte");
  } else {
    config.load_file(flags.model);
  }
  for (const std::string& assignment : flags.set) config.set_override(assignment);
  const train::RunConfig run = train::run_config_from(config);
  if (flags.calibrate) {
    const train::TrainConfig& t = run.train;
    const plan::StepShape step{t.batch_size / run.mesh.dp, t.seq_len, t.recompute, t.precision};
    const std::string report = plan::calibration_report(run.model, step, comm::world());
    if (comm::world().rank() == 0) std::fputs(report.c_str(), stdout);
    return 0;
  }
  std::fputs(plan::plan_report(run.model, flags.query).c_str(), stdout);
  return 0;
}

}  // namespace tessera::cli
