// Fits each accelerator's matmul efficiency (matmul_peak_fraction, matmul_half_width in
// configs/hardware.toml) to the published runs of tests/plan/published_runs.toml marked
// split = "fitted", minimising the mean |error| of the predicted per-chip throughput; the
// held-out runs never enter the fit. Run through scripts/fit_planner.sh.
//   fit_planner GROUP... [--write configs/hardware.toml]
// A GROUP is a comma-separated list of chips that share one fit (the same silicon, such as
// "a100-80gb,a100-40gb"); chips of the group without runs of their own take the fit of those with.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/split_commas.h"
#include "tests/plan/published_runs.h"

namespace tessera::plan {
namespace {

struct Fit {
  MatmulEfficiency matmul;
  double mean_error = 0, worst_error = 0;
  int rows = 0;
};

// The mean and worst |error| of the rows with `matmul` on their chips.
Fit evaluate(const std::vector<const PublishedRun*>& rows, const HardwareCatalog& catalog,
             const MatmulEfficiency& matmul) {
  Fit fit{.matmul = matmul};
  for (const PublishedRun* r : rows) {
    Accelerator a = catalog.find(r->hardware);
    a.matmul = matmul;
    const double error =
        std::abs(predicted(*r, published_layout_estimate(*r, a)) / published(*r) - 1);
    fit.mean_error += error / double(rows.size());
    fit.worst_error = std::max(fit.worst_error, error);
  }
  fit.rows = int(rows.size());
  return fit;
}

// A pattern search from a coarse grid: the best point so far, then steps that halve whenever no
// neighbour improves on it.
Fit fit_group(const std::vector<const PublishedRun*>& rows, const HardwareCatalog& catalog) {
  Fit best;
  best.mean_error = INFINITY;
  for (double fraction = 0.40; fraction <= 1.0001; fraction += 0.05) {
    for (double width : {0.0, 100.0, 250.0, 500.0, 1000.0, 2000.0, 4000.0}) {
      const Fit fit = evaluate(rows, catalog, {fraction, width, ""});
      if (fit.mean_error < best.mean_error) best = fit;
    }
  }
  double fraction_step = 0.025, width_step = std::max(50.0, best.matmul.half_width / 2);
  while (fraction_step > 0.0005) {
    bool moved = false;
    for (const auto& [df, dw] : {std::pair{1, 0}, {-1, 0}, {0, 1}, {0, -1}}) {
      const double fraction = std::clamp(best.matmul.peak_fraction + df * fraction_step, 0.05, 1.0);
      const double width = std::max(0.0, best.matmul.half_width + dw * width_step);
      const Fit fit = evaluate(rows, catalog, {fraction, width, ""});
      if (fit.mean_error < best.mean_error - 1e-12) {
        best = fit;
        moved = true;
      }
    }
    if (!moved) {
      fraction_step /= 2;
      width_step /= 2;
    }
  }
  best.matmul.peak_fraction = std::round(best.matmul.peak_fraction * 1000) / 1000;
  best.matmul.half_width = std::round(best.matmul.half_width);
  return evaluate(rows, catalog, best.matmul);
}

// Replaces the matmul_* lines of table [chip] in the TOML text.
void write_fit(std::string& toml, const std::string& chip, const MatmulEfficiency& m) {
  const std::string header = "\n[" + chip + "]\n";
  const size_t begin = toml.find(header);
  check(begin != std::string::npos, "the hardware file has no table [{}]", chip);
  const size_t end = std::min(toml.find("\n[", begin + header.size()), toml.size());
  const auto replace = [&](const std::string& key, const std::string& value) {
    const size_t at = toml.find("\n" + key + " = ", begin);
    check(at != std::string::npos && at < end, "[{}] has no {} line to replace", chip, key);
    const size_t line_end = toml.find('\n', at + 1);
    toml.replace(at + 1, line_end - at - 1, key + " = " + value);
  };
  replace("matmul_peak_fraction", fmt::format("{:.3f}", m.peak_fraction));
  replace("matmul_half_width", fmt::format("{:.0f}", m.half_width));
  replace("matmul_source", "\"" + m.source + "\"");
}

int run(int argc, char** argv) {
  std::vector<std::vector<std::string>> groups;
  std::string write_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--write") == 0 && i + 1 < argc) {
      write_path = argv[++i];
    } else {
      groups.push_back(split_commas(argv[i]));
    }
  }
  check(!groups.empty(), "usage: fit_planner GROUP... [--write configs/hardware.toml]");
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  const std::vector<PublishedRun> runs = published_runs(catalog);
  std::string toml;
  if (!write_path.empty()) {
    std::ifstream in(write_path);
    check(bool(in), "cannot read {}", write_path);
    toml.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (const std::vector<std::string>& group : groups) {
    std::vector<const PublishedRun*> rows;
    std::set<std::string> with_runs;
    for (const PublishedRun& r : runs) {
      if (r.split == Split::kFitted && published(r) > 0 &&
          std::find(group.begin(), group.end(), r.hardware) != group.end()) {
        rows.push_back(&r);
        with_runs.insert(r.hardware);
      }
    }
    check(!rows.empty(), "no fitted published run is on any of {}", fmt::join(group, ", "));
    Fit fit = fit_group(rows, catalog);
    const std::string on = fmt::format("{}", fmt::join(with_runs, ", "));
    std::printf(
        "%s: matmul_peak_fraction = %.3f, matmul_half_width = %.0f over %d runs on %s: "
        "mean |error| %.1f%%, worst %.1f%%\n",
        fmt::format("{}", fmt::join(group, ",")).c_str(), fit.matmul.peak_fraction,
        fit.matmul.half_width, fit.rows, on.c_str(), 100 * fit.mean_error, 100 * fit.worst_error);
    if (write_path.empty()) continue;
    for (const std::string& chip : group) {
      fit.matmul.source = fmt::format(
          "fitted by scripts/fit_planner.sh to the {} published runs on {} marked split = "
          "'fitted' in tests/plan/published_runs.toml (mean |error| {:.1f}%){}",
          fit.rows, on, 100 * fit.mean_error,
          with_runs.contains(chip) ? "" : "; " + chip + " has none of its own and shares the fit");
      write_fit(toml, chip, fit.matmul);
    }
  }
  if (!write_path.empty()) {
    std::ofstream(write_path) << toml;
    std::printf("wrote %s\n", write_path.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tessera::plan

int main(int argc, char** argv) {
  try {
    return tessera::plan::run(argc, argv);
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
