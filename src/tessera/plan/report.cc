#include "tessera/plan/report.h"

#include <fmt/format.h>

namespace tessera::plan {

std::string human_bytes(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1u << 30)); }

std::string human_count(double n) {
  if (n >= 1e12) return fmt::format("{:.2f} T", n / 1e12);
  if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f} k", n / 1e3);
  return fmt::format("{:.0f}", n);
}

std::string human_dollars(double usd) {
  if (usd >= 1e9) return fmt::format("${:.2f}B", usd / 1e9);
  if (usd >= 1e6) return fmt::format("${:.2f}M", usd / 1e6);
  if (usd >= 1e3) return fmt::format("${:.1f}k", usd / 1e3);
  return fmt::format("${:.2f}", usd);
}

std::optional<std::string> mfu_warning(const Estimate& e, const Accelerator& a) {
  if (!a.best_published_mfu || e.mfu <= *a.best_published_mfu) return std::nullopt;
  return fmt::format(
      "warning: {} chips of {} at {:.1f}% MFU is above the best published on this chip, {:.1f}% "
      "({}): treat the plan as optimistic",
      e.layout.chips(), a.name, 100 * e.mfu, 100 * *a.best_published_mfu,
      a.best_published_mfu_source);
}

std::string layout_table(const std::vector<Estimate>& estimates) {
  std::string out = fmt::format("{:>3}  {:<{}} {:>10} {:>9} {:>6} {:>10} {:>7} {:>9} {:>10}\n", "#",
                                "layout", kLayoutColumn, "mem/chip", "step", "MFU", "tokens/s",
                                "goodput", "days", "on-demand");
  for (size_t i = 0; i < estimates.size(); ++i) {
    const Estimate& e = estimates[i];
    out += fmt::format(
        "{:>3}  {:<{}} {:>10} {:>8.2f}s {:>5.1f}% {:>10} {:>6.1f}% {:>9.1f} {:>10}\n", i + 1,
        e.layout.str(), kLayoutColumn, human_bytes(e.memory.total()), e.time.total(), 100 * e.mfu,
        human_count(e.tokens_per_s), 100 * e.goodput.fraction, e.days,
        e.cost_on_demand ? human_dollars(*e.cost_on_demand) : "-");
  }
  return out;
}

nlohmann::json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json estimate_json(const Estimate& e) {
  const Layout& l = e.layout;
  return {{"layout",
           {{"dp", l.dp},
            {"tp", l.tp},
            {"pp", l.pp},
            {"ep", l.ep},
            {"zero", l.zero},
            {"micro_batch", l.micro_batch},
            {"recompute", enum_name(l.recompute)},
            {"vpp", l.vpp},
            {"sequence_parallel", l.sequence_parallel},
            {"cp", l.cp}}},
          {"fits", e.fits},
          {"memory_bytes",
           {{"params", e.memory.params},
            {"grads", e.memory.grads},
            {"optimizer", e.memory.optimizer},
            {"activations", e.memory.activations},
            {"total", e.memory.total()},
            {"usable", e.usable_memory}}},
          {"step_seconds",
           {{"compute", e.time.compute},
            {"pipeline_bubble", e.time.bubble},
            {"tensor_parallel", e.time.tensor_parallel},
            {"context_parallel", e.time.context_parallel},
            {"pipeline_p2p", e.time.pipeline_p2p},
            {"expert_all_to_all", e.time.expert_all_to_all},
            {"data_parallel_exposed", e.time.data_parallel},
            {"optimizer", e.time.optimizer},
            {"total", e.time.total()}}},
          {"communication_seconds",
           {{"tensor_parallel", e.communication.tensor_parallel},
            {"context_parallel", e.communication.context_parallel},
            {"pipeline_p2p", e.communication.pipeline_p2p},
            {"expert_all_to_all", e.communication.expert_all_to_all},
            {"data_parallel", e.communication.data_parallel},
            {"data_parallel_all_reduce", algorithm_name(e.data_parallel_algorithm)}}},
          {"matmul_efficiency", e.matmul_efficiency},
          {"flops_per_token", {{"model", e.flops.model}, {"hardware", e.flops.hardware}}},
          {"tflops_per_chip",
           {{"model", e.model_tflops_per_chip}, {"hardware", e.hardware_tflops_per_chip}}},
          {"mfu", e.mfu},
          {"hfu", e.hfu},
          {"tokens_per_s", e.tokens_per_s},
          {"days", e.days},
          {"days_failure_free", e.days_failure_free},
          {"goodput",
           {{"fraction", e.goodput.fraction},
            {"checkpoint_seconds", e.goodput.checkpoint_s},
            {"checkpoint_interval_seconds", e.goodput.interval_s},
            {"mean_time_between_failures_seconds", e.goodput.mean_time_between_failures_s}}},
          {"cost_usd",
           {{"on_demand", optional_json(e.cost_on_demand)},
            {"spot", optional_json(e.cost_spot)},
            {"committed_1y", optional_json(e.cost_1y)},
            {"committed_3y", optional_json(e.cost_3y)}}}};
}

}  // namespace tessera::plan
