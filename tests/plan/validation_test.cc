// The planner against published large training runs (tests/plan/published_runs.toml, each row
// with its source): for the published layout, the predicted per-chip throughput within 15% of
// the published figure on every row the matmul efficiency was fitted to, and on the held-out rows
// the fit never saw within 10% on average and 25% at worst. Where a source leaves the micro-batch
// size or the interleaving depth unstated, every value the layout allows is tried: a fitted row
// reports the one that comes closest, a held-out row the fastest, each with the value it took.
// The search over layouts must rank only layouts that fit and find one at least as fast as the
// published one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/plan/search.h"
#include "tests/plan/published_runs.h"

namespace tessera::plan {
namespace {

// Each row's prediction, by split: the fitted rows' error says how well the constants fit, the
// held-out rows' how well the planner predicts runs it never saw.
TEST(PlannerValidation, PredictsPublishedThroughputOnFittedAndHeldOutRuns) {
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  struct Errors {
    double sum = 0, worst = 0;
    int rows = 0;
  } fitted, held_out;
  std::printf("%-44s %-9s %6s %-50s %10s %10s %7s\n", "run", "hardware", "chips", "layout",
              "predicted", "published", "error");
  const std::vector<PublishedRun> runs = published_runs(catalog);
  for (const auto& [split, title] : {std::pair{Split::kFitted, "fitted"},
                                     {Split::kHeldOut, "held out (never fitted)"},
                                     {Split::kShown, "shown only"}}) {
    std::printf("%s:\n", title);
    for (const PublishedRun& r : runs) {
      if (r.split != split || published(r) <= 0) continue;
      const Estimate e = published_layout_estimate(r, catalog.find(r.hardware));
      ASSERT_TRUE(e.invalid.empty()) << r.name << ": " << e.invalid;
      EXPECT_EQ(r.layout.chips(), r.chips) << r.name;
      const double error = predicted(r, e) / published(r) - 1;
      std::printf("%-44s %-9s %6lld %-50s %10.1f %10.1f %+6.1f%%%s\n", r.name.c_str(),
                  r.hardware.c_str(), static_cast<long long>(r.chips), e.layout.str().c_str(),
                  predicted(r, e), published(r), 100 * error,
                  r.tokens_per_s > 0 ? " tokens/s" : "");
      if (split == Split::kShown) {
        std::printf("  shown only: %s\n", r.shown_because.c_str());
        continue;
      }
      Errors& errors = split == Split::kFitted ? fitted : held_out;
      errors.sum += std::abs(error);
      errors.worst = std::max(errors.worst, std::abs(error));
      ++errors.rows;
      if (split == Split::kFitted) {
        EXPECT_LT(std::abs(error), 0.15) << r.name;
      }
    }
  }
  for (const auto& [name, errors] :
       {std::pair{"fitted", fitted}, std::pair{"held-out", held_out}}) {
    std::printf("%s rows: %d, mean |error| %.1f%%, worst %.1f%%\n", name, errors.rows,
                100 * errors.sum / errors.rows, 100 * errors.worst);
  }
  EXPECT_GE(fitted.rows, 40);
  EXPECT_GE(held_out.rows, 15);
  EXPECT_LE(held_out.sum / held_out.rows, 0.10);
  EXPECT_LE(held_out.worst, 0.25);
}

// Fully sharded data parallelism over a thousand GPUs (Narayanan et al. 2021, Table 2): at a
// fixed global batch each doubling of the GPUs halves a GPU's compute but not the parameters it
// gathers, and DeepSpeed's ZeRO-3 gathered every tensor with a ring through all of them, each
// step of it paying NCCL's latency. Measured, it fell to 44 TFLOP/s per GPU on 1536 GPUs where
// PTD-P (tp 8, pp 12) kept 141; priced by bandwidth alone the two came within a third of each
// other. PTD-P must come out at least twice as fast at each model's largest count, its lead
// growing with the count; PTD-P rows within 25%. The ZeRO-3 rows stay optimistic (DeepSpeed's
// own overheads are not modelled): each is held within 60% and printed.
TEST(PlannerValidation, FullyShardedDataParallelismOverAThousandGpusIsSeveralTimesSlower) {
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  // Per model, per GPU count: predicted PTD-P and ZeRO-3 TFLOP/s at that count.
  std::map<std::string, std::map<int64_t, std::pair<double, double>>> by_count;
  int rows = 0;
  for (const PublishedRun& r : published_runs(catalog)) {
    const size_t zero3 = r.name.find("-zero3-"), ptdp = r.name.find("-ptdp-");
    if (!r.name.starts_with("narayanan2021-") || (zero3 == ptdp)) continue;
    ++rows;
    const Estimate e = published_layout_estimate(r, catalog.find(r.hardware), Unstated::kFastest);
    const double error = predicted(r, e) / published(r) - 1;
    std::printf(
        "%-30s %s predicted %5.1f, published %5.1f TFLOP/s, %+6.1f%%; data parallelism %.1f s "
        "of a %.1f s step\n",
        r.name.c_str(), e.layout.str().c_str(), predicted(r, e), published(r), 100 * error,
        e.communication.data_parallel, e.time.total());
    EXPECT_LE(std::abs(error), zero3 != std::string::npos ? 0.60 : 0.25) << r.name;
    // The ZeRO-3 and PTD-P runs of a model are compared at the same count; the 530B model's
    // smallest counts differ (640 and 560) and are left unpaired.
    auto& pair = by_count[r.name.substr(0, std::min(zero3, ptdp))][r.chips];
    (zero3 != std::string::npos ? pair.second : pair.first) = predicted(r, e);
  }
  EXPECT_EQ(rows, 12);
  for (const auto& [model, counts] : by_count) {
    double previous = 0;
    for (const auto& [chips, tflops] : counts) {
      if (tflops.first == 0 || tflops.second == 0) continue;
      const double lead = tflops.first / tflops.second;
      std::printf("%s on %lld GPUs: PTD-P predicted %.2fx as fast as ZeRO-3\n", model.c_str(),
                  static_cast<long long>(chips), lead);
      EXPECT_GT(lead, previous) << model << " on " << chips << " GPUs";
      previous = lead;
    }
    EXPECT_GE(previous, 2.0) << model
                             << " at its largest count (published: 3.2x for 175B, 3.3x for 530B)";
  }
}

// Published layouts that ran, which the engine's own memory (its saved state in f32) does not fit
// in: with that state in bf16, as their stacks keep it, they fit.
TEST(PlannerValidation, PublishedLayoutsThatRanFitWithBf16Activations) {
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  int rows = 0;
  for (PublishedRun r : published_runs(catalog)) {
    if (r.name != "torchtitan2024-llama2-13b-64-noac" &&
        r.name != "llmfoundry-mpt-7b-a100-80gb-8-s2048") {
      continue;
    }
    ++rows;
    const Accelerator& a = catalog.find(r.hardware);
    ASSERT_TRUE(r.workload.bf16_activations) << "every published stack keeps them in bf16";
    const Estimate bf16 = published_layout_estimate(r, a);
    r.workload.bf16_activations = false;
    const Estimate f32 = published_layout_estimate(r, a);
    std::printf("%s: %.1f GiB per chip with bf16 activations, %.1f GiB in f32, %.1f usable\n",
                r.name.c_str(), bf16.memory.total() / (1 << 30), f32.memory.total() / (1 << 30),
                bf16.usable_memory / (1 << 30));
    EXPECT_TRUE(bf16.fits) << r.name;
    EXPECT_FALSE(f32.fits) << r.name;
  }
  EXPECT_EQ(rows, 2);
}

TEST(PlannerValidation, SearchRanksOnlyFittingLayoutsAndBeatsThePublishedOne) {
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  for (const PublishedRun& r : published_runs(catalog)) {
    if (r.split == Split::kShown) continue;
    const Accelerator& a = catalog.find(r.hardware);
    const Estimate published = published_layout_estimate(r, a);
    const SearchResult found = search_layouts(r.config, a, r.chips, r.workload, RankBy::kTime);
    for (const Estimate& e : found.ranked) {
      EXPECT_TRUE(e.fits && e.memory.total() <= e.usable_memory) << r.name << " " << e.layout.str();
    }
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (!published.fits) {
      // The engine keeps more activations than the published systems did (f32 residuals and
      // attention statistics), so some published layouts do not fit its memory model.
      std::printf(
          "%-40s published layout needs %.1f GiB per chip, %.1f usable: does not fit the "
          "engine's memory model; best found %s\n",
          r.name.c_str(), published.memory.total() / gib, published.usable_memory / gib,
          found.ranked.empty() ? "none" : found.ranked.front().layout.str().c_str());
      continue;
    }
    ASSERT_FALSE(found.ranked.empty()) << r.name;
    const Estimate& best = found.ranked.front();
    EXPECT_LE(best.time.total(), published.time.total() * (1 + 1e-9)) << r.name;
    std::printf("%-40s best %-50s %.2fx the published layout's speed\n", r.name.c_str(),
                best.layout.str().c_str(), published.time.total() / best.time.total());
  }
}

}  // namespace
}  // namespace tessera::plan
