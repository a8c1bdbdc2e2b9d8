// The accelerator catalog of the planner: per-chip peak compute, memory, interconnect and list
// prices, read from TOML. configs/hardware.toml is compiled in, so a plan never depends on the
// working directory; users merge their own files over it to add chips or use their own prices.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::plan {

struct Prices {  // USD per chip-hour; absent when not published
  std::optional<double> on_demand, spot, committed_1y, committed_3y;
  std::string source, date;
};

// Fraction of peak the chip's matmuls reach: `peak_fraction` as the narrowest per-chip matrix
// dimension (d_model, or the MLP's hidden width over the tensor-parallel ranks) grows, half of it
// at `half_width`; `source` says which published runs fitted them (scripts/fit_planner.sh) or,
// for a chip without any, whose values it borrows.
struct MatmulEfficiency {
  double peak_fraction = 0, half_width = 0;
  std::string source;

  double at_width(double width) const { return peak_fraction * width / (width + half_width); }
};

// What a collective costs beyond its bytes, in the terms of NCCL's cost model
// (src/graph/tuning.cc): a fixed start per collective and a latency per step of its algorithm on
// each link class. A ring over the scale-up domain takes one step per chip on NVLink, one per chip
// of each torus dimension in turn on ICI (`scaleup_torus_dims`: 2 on TPU v5e/v6e, 3 on v4/v5p).
struct CollectiveLatency {
  double start = 0, scaleup_step = 0, scaleout_step = 0;  // seconds
  int scaleup_torus_dims = 1;
};

struct Accelerator {
  std::string name, description, kind;  // kind: "tpu" or "gpu"
  double peak_bf16_flops = 0;           // FLOP/s, dense
  double hbm_bytes = 0;
  double hbm_bandwidth = 0;       // bytes/s
  int64_t scaleup_domain = 1;     // chips joined by NVLink/ICI
  double scaleup_bandwidth = 0;   // bytes/s per chip per direction
  double scaleout_bandwidth = 0;  // bytes/s per chip per direction, between scale-up domains
  CollectiveLatency latency;
  MatmulEfficiency matmul;
  Prices prices;
  std::string source, date;
  // The highest model-FLOPs utilisation a published training run reached on this chip, and
  // where: a plan above it is warned about. Absent where none is recorded.
  std::optional<double> best_published_mfu;
  std::string best_published_mfu_source;
};

class HardwareCatalog {
 public:
  // The catalog shipped in configs/hardware.toml, compiled into the binary.
  static HardwareCatalog builtin();
  // `source` names the text in error messages (a file name).
  static HardwareCatalog parse(std::string_view toml_text, const std::string& source);
  static HardwareCatalog load(const std::filesystem::path& file);

  // Entries of `other` are added; an entry with an existing name replaces it. A table holding
  // only a [name.prices] sub-table replaces just that entry's prices, so a user's price file can
  // override list prices; naming an accelerator that is not in the catalog is an error.
  void merge(const HardwareCatalog& other);

  const Accelerator& find(std::string_view name) const;  // unknown name: error listing the known
  const std::vector<Accelerator>& entries() const { return entries_; }

 private:
  struct PriceOverride {
    std::string name;
    Prices prices;
  };

  std::string source_;
  std::vector<Accelerator> entries_;
  std::vector<PriceOverride> price_overrides_;
};

}  // namespace tessera::plan
