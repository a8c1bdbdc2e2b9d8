// Each training metric is defined once and every sink agrees: a step's metrics.jsonl record and
// the Prometheus text (parsed as Prometheus parses it) hold the same values; MFU is the model's
// FLOPs per second over the stated peak; the history the live page draws stays bounded and keeps
// every held-out loss.
#include "tessera/train/train_metrics.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "tests/prometheus_text.h"
#include "tests/test_dir.h"

namespace tessera::train {
namespace {

RunDescription two_ranks() {
  RunDescription run{.name = "run",
                     .model = "gpt2",
                     .precision = "f32",
                     .ranks = 2,
                     .peak_flops = 4e10,
                     .peak = "train.peak_flops",
                     .flops_per_token = 2e7,
                     .hardware_flops_per_token = 3e7};
  run.memory.resize(2);
  run.memory[1].bytes = {1e6, 2e6, 3e6, 4e6};
  return run;
}

StepFigures step_figures(int64_t step) {
  StepFigures f{.step = step, .loss = 2.5, .lr = 3e-4, .grad_norm = 0.75, .tokens = 4096};
  f.step_seconds = 0.4;
  f.breakdown.seconds = {0.01, 0.1, 0.2, 0.03, 0.04, 0.0, 0.02};
  f.rank_step_seconds = {0.4, 0.5};
  f.rank_resident_bytes = {1e8, 2e8};
  f.slowest_rank = 1;
  return f;
}

TEST(TrainMetrics, TheRecordAndThePrometheusTextHoldTheSameValues) {
  const std::filesystem::path jsonl = testing::fresh_test_dir("train-metrics") / "metrics.jsonl";
  TrainMetrics metrics(two_ranks(), jsonl);
  const TrainMetrics::Derived d = metrics.step(step_figures(7), {{"aux_loss", 0.5}});
  metrics.held_out(7, 2.25, 3.1);

  EXPECT_DOUBLE_EQ(d.tokens_per_second, 4096 / 0.4);
  EXPECT_DOUBLE_EQ(d.mfu, 4096 / 0.4 * 2e7 / 4e10);
  EXPECT_DOUBLE_EQ(d.hfu, 4096 / 0.4 * 3e7 / 4e10);
  EXPECT_DOUBLE_EQ(d.slowest_margin, 0.5 / 0.5 - 1);  // the median of two is the larger

  std::ifstream in(jsonl);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0]["run"]["peak_flops"], 4e10);
  const nlohmann::json& r = records[1];
  EXPECT_EQ(r["aux_loss"], 0.5);

  const testing::PrometheusText p = testing::parse_prometheus(metrics.prometheus());
  EXPECT_EQ(p.value("tessera_train_step"), r["step"].get<double>());
  EXPECT_EQ(p.value("tessera_train_loss"), r["loss"].get<double>());
  EXPECT_EQ(p.value("tessera_train_learning_rate"), r["lr"].get<double>());
  EXPECT_EQ(p.value("tessera_train_grad_norm"), r["grad_norm"].get<double>());
  EXPECT_EQ(p.value("tessera_train_tokens_per_second"), r["tokens_per_s"].get<double>());
  EXPECT_EQ(p.value("tessera_train_mfu_ratio"), r["mfu"].get<double>());
  EXPECT_EQ(p.value("tessera_train_hfu_ratio"), r["hfu"].get<double>());
  EXPECT_EQ(p.value("tessera_train_slowest_rank"), r["slowest_rank"].get<double>());
  EXPECT_EQ(p.value("tessera_train_held_out_loss"), records[2]["val_loss"].get<double>());
  for (const char* part : StepBreakdown::kParts) {
    EXPECT_EQ(p.value("tessera_train_step_breakdown_seconds", {{"part", part}}),
              r["breakdown_s"][part].get<double>())
        << part;
  }
  for (size_t k = 0; k < RankMemoryBytes::kKinds.size(); ++k) {
    EXPECT_EQ(p.value("tessera_train_memory_bytes",
                      {{"rank", "1"}, {"kind", RankMemoryBytes::kKinds[k]}}),
              records[0]["run"]["memory_bytes"]["1"][RankMemoryBytes::kKinds[k]].get<double>());
  }
  EXPECT_EQ(p.value("tessera_train_resident_bytes", {{"rank", "1"}}),
            r["resident_bytes"]["1"].get<double>());
  EXPECT_EQ(p.value("tessera_train_step_seconds_count"), 1);
  EXPECT_EQ(p.value("tessera_train_tokens_total"), 4096);
  EXPECT_EQ(p.types.at("tessera_train_step_seconds"), "histogram");
  EXPECT_EQ(p.types.at("tessera_train_skipped_steps_total"), "counter");
  for (const auto& [name, type] : p.types) EXPECT_FALSE(p.helps.at(name).empty()) << name;
}

// docs/observability.md lists every metric the registry defines.
TEST(TrainMetrics, EveryMetricIsDocumented) {
  TrainMetrics metrics(two_ranks(), std::nullopt);
  metrics.step(step_figures(1));
  std::ifstream in(std::string(TESSERA_SOURCE_DIR) + "/docs/observability.md");
  const std::string docs{std::istreambuf_iterator<char>(in), {}};
  ASSERT_FALSE(docs.empty());
  for (const auto& [name, type] : testing::parse_prometheus(metrics.prometheus()).types) {
    EXPECT_NE(docs.find("`" + name), std::string::npos) << name << " is not in the docs";
  }
}

TEST(TrainMetrics, TheHistoryStaysBoundedAndKeepsEveryHeldOutLoss) {
  TrainMetrics metrics(two_ranks(), std::nullopt);
  for (int64_t step = 1; step <= 20000; ++step) {
    metrics.step(step_figures(step));
    if (step % 1000 == 0) metrics.held_out(step, 2.0, 3.0);
  }
  const nlohmann::json history = nlohmann::json::parse(metrics.history_json());
  const nlohmann::json& records = history.at("records");
  EXPECT_LE(records.size(), 4097u);
  EXPECT_GT(records.size(), 1000u);
  EXPECT_TRUE(records.front().contains("run"));
  EXPECT_EQ(records.back()["step"], 20000);
  int held_out = 0;
  int64_t previous = -1;
  for (const nlohmann::json& r : records) {
    held_out += r.contains("val_loss");
    EXPECT_GE(r["step"].get<int64_t>(), previous);
    previous = r["step"].get<int64_t>();
  }
  EXPECT_EQ(held_out, 20);
}

}  // namespace
}  // namespace tessera::train
