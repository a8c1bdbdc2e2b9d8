#include "tessera/plan/hardware.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tessera/kernels/device.h"
#include "tests/expect_error.h"
#include "tests/test_dir.h"

namespace tessera::plan {
namespace {

using testing::expect_error;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A complete entry that parses; the malformed cases each change one line of it.
const std::string kValidEntry = R"([chip]
description = "Test chip"
kind = "gpu"
peak_bf16_tflops = 100
hbm_gib = 24
hbm_bandwidth_gbps = 1000.5
scaleup_domain = 4
scaleup_bandwidth_gbps = 200
scaleout_bandwidth_gbps = 25
collective_start_us = 8
scaleup_step_latency_us = 3
scaleout_step_latency_us = 14
scaleup_torus_dims = 1
matmul_peak_fraction = 0.8
matmul_half_width = 1000
matmul_source = "the test"
source = "the test"
date = "2025-01"

[chip.prices]
usd_per_chip_hour_on_demand = 2.5
usd_per_chip_hour_spot = 1
source = "the test"
date = "2025-02"
)";

std::string replaced(std::string text, const std::string& line, const std::string& with) {
  const size_t at = text.find(line + "\n");
  EXPECT_NE(at, std::string::npos) << line;
  return text.replace(at, line.size(), with);
}

void expect_parse_error(const std::string& text, std::initializer_list<std::string> parts) {
  expect_error([&] { HardwareCatalog::parse(text, "user.toml"); }, parts);
}

TEST(HardwareCatalog, BuiltinHasEveryAcceleratorWithPositiveFigures) {
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  for (const char* name : {"tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e", "a100-40gb", "a100-80gb",
                           "h100", "h200", "b200"}) {
    SCOPED_TRACE(name);
    const Accelerator& a = catalog.find(name);
    EXPECT_EQ(a.name, name);
    EXPECT_TRUE(a.kind == "tpu" || a.kind == "gpu");
    EXPECT_EQ(a.kind == "tpu", a.name.starts_with("tpu-"));
    EXPECT_FALSE(a.description.empty());
    EXPECT_GT(a.peak_bf16_flops, 1e14);
    EXPECT_GT(a.hbm_bytes, 8 * kGiB);
    EXPECT_GT(a.hbm_bandwidth, 5e11);
    EXPECT_GE(a.scaleup_domain, 8);
    EXPECT_GT(a.scaleup_bandwidth, a.scaleout_bandwidth);
    EXPECT_GT(a.scaleout_bandwidth, 0);
    EXPECT_GT(a.latency.start, 0);
    EXPECT_GT(a.latency.scaleout_step, a.latency.scaleup_step);
    EXPECT_EQ(a.latency.scaleup_torus_dims, a.kind == "tpu" ? (a.name.ends_with('e') ? 2 : 3) : 1);
    EXPECT_FALSE(a.source.empty());
    EXPECT_EQ(a.date.size(), 7u);
    EXPECT_GT(a.matmul.peak_fraction, 0.3);
    EXPECT_LE(a.matmul.peak_fraction, 1.0);
    EXPECT_NE(a.matmul.source.find("fitted by scripts/fit_planner.sh"), std::string::npos);
    if (a.name == "h200") continue;  // no published list price
    ASSERT_TRUE(a.prices.on_demand.has_value()) << a.name;
    EXPECT_GT(*a.prices.on_demand, 0);
    EXPECT_FALSE(a.prices.source.empty());
    EXPECT_EQ(a.prices.date.size(), 7u);
  }
  EXPECT_EQ(catalog.entries().size(), 9u);
}

TEST(HardwareCatalog, BuiltinFiguresAreTheFilesInBaseUnits) {
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  const Accelerator& h100 = catalog.find("h100");
  EXPECT_DOUBLE_EQ(h100.peak_bf16_flops, 989e12);
  EXPECT_DOUBLE_EQ(h100.hbm_bytes, 80 * kGiB);
  EXPECT_DOUBLE_EQ(h100.hbm_bandwidth, 3350e9);
  EXPECT_EQ(h100.scaleup_domain, 8);
  EXPECT_DOUBLE_EQ(h100.scaleup_bandwidth, 450e9);
  const Accelerator& v5e = catalog.find("tpu-v5e");
  EXPECT_DOUBLE_EQ(v5e.peak_bf16_flops, 197e12);
  EXPECT_DOUBLE_EQ(v5e.hbm_bytes, 16 * kGiB);
  EXPECT_EQ(v5e.scaleup_domain, 256);
  EXPECT_DOUBLE_EQ(*v5e.prices.on_demand, 1.2);
  EXPECT_DOUBLE_EQ(*v5e.prices.committed_3y, 0.54);
  EXPECT_FALSE(v5e.prices.spot.has_value());
  EXPECT_DOUBLE_EQ(catalog.find("b200").peak_bf16_flops, 2250e12);
}

// A CUDA run's MFU divides by the same dense bf16 peak the planner uses for its chip.
TEST(HardwareCatalog, GpuPeaksAreTheCudaRunsMfuPeaks) {
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  for (const auto& [entry, device] :
       {std::pair{"a100-40gb", "NVIDIA A100-SXM4-40GB"}, {"a100-80gb", "NVIDIA A100-SXM4-80GB"},
        {"h100", "NVIDIA H100 80GB HBM3"}, {"h200", "NVIDIA H200"}, {"b200", "NVIDIA B200"}}) {
    EXPECT_DOUBLE_EQ(kernels::cuda_dense_bf16_peak(device), catalog.find(entry).peak_bf16_flops)
        << device;
  }
  expect_error([] { kernels::cuda_dense_bf16_peak("NVIDIA GeForce RTX 4090"); },
               {"NVIDIA GeForce RTX 4090", "train.peak_flops"});
}

TEST(HardwareCatalog, BuiltinIsTheFileInTheSourceTree) {
  const HardwareCatalog builtin = HardwareCatalog::builtin();
  const HardwareCatalog file =
      HardwareCatalog::load(std::string(TESSERA_SOURCE_DIR) + "/configs/hardware.toml");
  ASSERT_EQ(builtin.entries().size(), file.entries().size());
  for (size_t i = 0; i < file.entries().size(); ++i) {
    const Accelerator& a = builtin.entries()[i];
    const Accelerator& b = file.entries()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.peak_bf16_flops, b.peak_bf16_flops);
    EXPECT_EQ(a.hbm_bytes, b.hbm_bytes);
    EXPECT_EQ(a.scaleout_bandwidth, b.scaleout_bandwidth);
    EXPECT_EQ(a.prices.on_demand, b.prices.on_demand);
    EXPECT_EQ(a.source, b.source);
  }
}

TEST(HardwareCatalog, ParsesEveryFieldIntoBaseUnits) {
  const Accelerator chip = HardwareCatalog::parse(kValidEntry, "user.toml").find("chip");
  EXPECT_EQ(chip.description, "Test chip");
  EXPECT_EQ(chip.kind, "gpu");
  EXPECT_DOUBLE_EQ(chip.peak_bf16_flops, 100e12);
  EXPECT_DOUBLE_EQ(chip.hbm_bytes, 24 * kGiB);
  EXPECT_DOUBLE_EQ(chip.hbm_bandwidth, 1000.5e9);
  EXPECT_EQ(chip.scaleup_domain, 4);
  EXPECT_DOUBLE_EQ(chip.scaleup_bandwidth, 200e9);
  EXPECT_DOUBLE_EQ(chip.scaleout_bandwidth, 25e9);
  EXPECT_EQ(chip.source, "the test");
  EXPECT_EQ(chip.date, "2025-01");
  EXPECT_EQ(chip.prices.on_demand, 2.5);
  EXPECT_EQ(chip.prices.spot, 1.0);
  EXPECT_FALSE(chip.prices.committed_1y.has_value());
  EXPECT_FALSE(chip.prices.committed_3y.has_value());
  EXPECT_EQ(chip.prices.date, "2025-02");
  EXPECT_FALSE(chip.best_published_mfu.has_value());
}

TEST(HardwareCatalog, BestPublishedMfuComesWithItsSource) {
  const std::string with_mfu = replaced(
      kValidEntry, "date = \"2025-01\"",
      "date = \"2025-01\"\nbest_published_mfu = 0.5\nbest_published_mfu_source = \"a paper\"");
  const Accelerator chip = HardwareCatalog::parse(with_mfu, "user.toml").find("chip");
  EXPECT_EQ(chip.best_published_mfu, 0.5);
  EXPECT_EQ(chip.best_published_mfu_source, "a paper");
  expect_parse_error(replaced(with_mfu, "best_published_mfu = 0.5", "best_published_mfu = 50"),
                     {"[chip]", "best_published_mfu", "fraction", "50"});
  expect_parse_error(replaced(with_mfu, "best_published_mfu_source = \"a paper\"", ""),
                     {"[chip]", "missing", "'best_published_mfu_source'"});
  expect_parse_error(replaced(with_mfu, "best_published_mfu = 0.5", ""),
                     {"[chip]", "best_published_mfu_source needs best_published_mfu"});
  // The built-in catalog records one for the chips of the validation runs.
  const HardwareCatalog builtin = HardwareCatalog::builtin();
  for (const char* name : {"tpu-v4", "tpu-v5e", "tpu-v5p", "a100-80gb", "h100"}) {
    const Accelerator& a = builtin.find(name);
    ASSERT_TRUE(a.best_published_mfu.has_value()) << name;
    EXPECT_GT(*a.best_published_mfu, 0.3) << name;
    EXPECT_FALSE(a.best_published_mfu_source.empty()) << name;
  }
}

TEST(HardwareCatalog, UnknownNameListsTheKnownAccelerators) {
  expect_error([] { HardwareCatalog::builtin().find("nope"); },
               {"unknown accelerator 'nope'", "tpu-v5e", "h100", "b200"});
}

TEST(HardwareCatalog, MalformedEntriesNameSourceEntryAndField) {
  expect_parse_error(replaced(kValidEntry, "hbm_gib = 24", ""),
                     {"user.toml:1: [chip]", "missing", "'hbm_gib'"});
  expect_parse_error(replaced(kValidEntry, "peak_bf16_tflops = 100", "peak_bf16_tflops = \"100\""),
                     {"user.toml:4: [chip]", "peak_bf16_tflops", "must be a number", "string"});
  expect_parse_error(replaced(kValidEntry, "kind = \"gpu\"", "kind = 3"),
                     {"[chip]", "kind", "must be a string"});
  expect_parse_error(replaced(kValidEntry, "hbm_bandwidth_gbps = 1000.5", "hbm_bandwidth_gbps = 0"),
                     {"user.toml:6: [chip]", "hbm_bandwidth_gbps", "must be positive"});
  expect_parse_error(replaced(kValidEntry, "peak_bf16_tflops = 100", "peak_bf16_tflops = -5"),
                     {"[chip]", "peak_bf16_tflops", "must be positive", "-5"});
  expect_parse_error(replaced(kValidEntry, "hbm_gib = 24", "hbm_gib = inf"),
                     {"[chip]", "hbm_gib", "finite"});
  expect_parse_error(replaced(kValidEntry, "kind = \"gpu\"", "kind = \"fpga\""),
                     {"user.toml:3: [chip]", "kind", "\"tpu\" or \"gpu\"", "fpga"});
  expect_parse_error(replaced(kValidEntry, "hbm_gib = 24", "hbm_gib = 24\nhbm_gb = 24"),
                     {"user.toml:6: [chip]", "unknown field 'hbm_gb'", "hbm_gib"});
  expect_parse_error(replaced(kValidEntry, "scaleup_domain = 4", "scaleup_domain = 0"),
                     {"[chip]", "scaleup_domain", "at least 1"});
  expect_parse_error(replaced(kValidEntry, "scaleup_domain = 4", "scaleup_domain = 4.0"),
                     {"[chip]", "scaleup_domain", "integer"});
  expect_parse_error(replaced(kValidEntry, "date = \"2025-01\"", "date = \"Jan 2025\""),
                     {"user.toml:18: [chip]", "date", "YYYY-MM", "Jan 2025"});
  expect_parse_error(replaced(kValidEntry, "source = \"the test\"", "source = \"\""),
                     {"[chip]", "source", "empty"});
  expect_parse_error(
      replaced(kValidEntry, "matmul_peak_fraction = 0.8", "matmul_peak_fraction = 80"),
      {"user.toml:14: [chip]", "matmul_peak_fraction", "fraction", "80"});
  expect_parse_error(replaced(kValidEntry, "scaleup_torus_dims = 1", "scaleup_torus_dims = 4"),
                     {"user.toml:13: [chip]", "scaleup_torus_dims", "2 or 3", "not 4"});
  expect_parse_error(replaced(kValidEntry, "scaleout_step_latency_us = 14", ""),
                     {"[chip]", "missing", "'scaleout_step_latency_us'"});
  expect_parse_error(replaced(kValidEntry, "matmul_source = \"the test\"", ""),
                     {"[chip]", "missing", "'matmul_source'"});
  expect_parse_error("chip = 3\n", {"user.toml:1", "'chip' must be a table [chip]"});
}

TEST(HardwareCatalog, MalformedPricesNameThePricesTable) {
  expect_parse_error(
      replaced(kValidEntry, "usd_per_chip_hour_spot = 1", "usd_per_chip_hour_spot = -1"),
      {"user.toml:22: [chip.prices]", "usd_per_chip_hour_spot", "must be zero or more"});
  expect_parse_error(
      replaced(kValidEntry, "usd_per_chip_hour_spot = 1", "usd_per_chip_hour_1yr = 1"),
      {"[chip.prices]", "unknown field 'usd_per_chip_hour_1yr'", "usd_per_chip_hour_1y"});
  expect_parse_error(replaced(replaced(kValidEntry, "usd_per_chip_hour_spot = 1", ""),
                              "usd_per_chip_hour_on_demand = 2.5", ""),
                     {"[chip.prices]", "gives no price"});
  expect_parse_error(replaced(kValidEntry, "date = \"2025-02\"", ""),
                     {"[chip.prices]", "missing", "'date'"});
  expect_parse_error(replaced(kValidEntry, "[chip.prices]", "prices = 3\n[other.prices]"),
                     {"[chip]", "prices must be a table [chip.prices]"});
}

TEST(HardwareCatalog, TomlSyntaxErrorNamesSourceLineAndColumn) {
  expect_parse_error(replaced(kValidEntry, "hbm_gib = 24", "hbm_gib = = 24"),
                     {"user.toml:5:", "TOML syntax error"});
}

TEST(HardwareCatalog, UnreadableFileIsNamed) {
  const auto dir = testing::fresh_test_dir("hardware");
  expect_error([&] { HardwareCatalog::load(dir / "absent.toml"); }, {"absent.toml", "cannot open"});
  expect_error([&] { HardwareCatalog::load(dir); }, {dir.string(), "directory"});
}

TEST(HardwareCatalog, LoadsAUserFile) {
  const auto path = testing::fresh_test_dir("hardware") / "mine.toml";
  std::ofstream(path) << kValidEntry;
  EXPECT_EQ(HardwareCatalog::load(path).find("chip").scaleup_domain, 4);
  std::ofstream(path) << "[chip]\nkind = \"gpu\"\n";
  expect_error([&] { HardwareCatalog::load(path); }, {path.string() + ":1: [chip]", "missing"});
}

TEST(HardwareCatalog, MergeAddsAndReplacesEntries) {
  HardwareCatalog catalog = HardwareCatalog::builtin();
  catalog.merge(HardwareCatalog::parse(kValidEntry, "user.toml"));
  EXPECT_EQ(catalog.entries().size(), 10u);
  EXPECT_EQ(catalog.find("chip").scaleup_domain, 4);

  const std::string faster_h100 =
      replaced(replaced(kValidEntry, "[chip]", "[h100]"), "[chip.prices]", "[h100.prices]");
  catalog.merge(HardwareCatalog::parse(faster_h100, "user.toml"));
  EXPECT_EQ(catalog.entries().size(), 10u);
  EXPECT_DOUBLE_EQ(catalog.find("h100").peak_bf16_flops, 100e12);
}

TEST(HardwareCatalog, PricesOnlyTableOverridesPricesAndKeepsTheRest) {
  HardwareCatalog catalog = HardwareCatalog::builtin();
  const Accelerator before = catalog.find("h100");
  catalog.merge(HardwareCatalog::parse(R"([h100.prices]
usd_per_chip_hour_on_demand = 2.1
usd_per_chip_hour_1y = 1.5
source = "our contract"
date = "2025-09"
)",
                                       "prices.toml"));
  const Accelerator& after = catalog.find("h100");
  EXPECT_EQ(after.prices.on_demand, 2.1);
  EXPECT_EQ(after.prices.committed_1y, 1.5);
  EXPECT_FALSE(after.prices.committed_3y.has_value());
  EXPECT_EQ(after.prices.source, "our contract");
  EXPECT_EQ(after.peak_bf16_flops, before.peak_bf16_flops);
  EXPECT_EQ(after.hbm_bytes, before.hbm_bytes);
  EXPECT_EQ(after.source, before.source);
  EXPECT_EQ(catalog.entries().size(), 9u);
  EXPECT_EQ(catalog.find("h200").prices.on_demand,
            HardwareCatalog::builtin().find("h200").prices.on_demand);
}

TEST(HardwareCatalog, PricesForAnUnknownAcceleratorAreAnError) {
  HardwareCatalog catalog = HardwareCatalog::builtin();
  const HardwareCatalog prices = HardwareCatalog::parse(R"([h1OO.prices]
usd_per_chip_hour_on_demand = 2
source = "our contract"
date = "2025-09"
)",
                                                        "prices.toml");
  expect_error([&] { catalog.merge(prices); },
               {"prices.toml", "[h1OO.prices]", "unknown accelerator 'h1OO'", "h100"});
}

}  // namespace
}  // namespace tessera::plan
