// How `tessera plan` shows its answers: tables for people, JSON for programs.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/plan/cost_model.h"

namespace tessera::plan {

// One row per estimate: layout, memory per chip, step time, MFU, tokens/s, days, on-demand cost.
// Characters of a table's layout column: a layout with cp and rf as well.
constexpr int kLayoutColumn = 80;

std::string layout_table(const std::vector<Estimate>& estimates);
// Every figure of one estimate: memory parts, step-time parts, per-chip TFLOP/s (model and
// hardware), MFU, HFU, tokens/s, days and cost at each published price.
nlohmann::json estimate_json(const Estimate& estimate);
// A warning when the estimate's MFU is above the best any published run reached on its chip.
std::optional<std::string> mfu_warning(const Estimate& estimate, const Accelerator& accelerator);
// A figure that may be absent (a price not published): the number, or null.
nlohmann::json optional_json(const std::optional<double>& value);
// "12.3 GiB", "4.56 M", "$1.23M": short human forms.
std::string human_bytes(double bytes);
std::string human_count(double n);
std::string human_dollars(double usd);

}  // namespace tessera::plan
