#include "tessera/plan/collectives.h"

#include <algorithm>
#include <cmath>

namespace tessera::plan {

namespace {

// NCCL's tree reaches at most 0.92 of the bus bandwidth its ring does (tuning.cc).
constexpr double kTreeBandwidthShare = 0.92;

// Steps of one ring pass through `inner` ranks of a scale-up domain: one per rank behind a
// switch, one per rank of each torus dimension in turn on ICI.
double scaleup_ring_steps(int64_t inner, int torus_dims) {
  if (inner <= 1) return 0;
  if (torus_dims == 1) return double(inner - 1);
  return torus_dims * (std::pow(double(inner), 1.0 / torus_dims) - 1);
}

struct Span {
  int64_t inner = 1, outer = 1;  // ranks per scale-up domain, domains
};

// A ring pass over the ranks of every domain in turn (NCCL's flat ring): each domain's steps on
// scale-up links, one network step between consecutive domains. Its bytes are those of the
// hierarchical form, the domain's share of a message crossing the network.
double ring_seconds(double passes, double message, Span s, const Accelerator& a) {
  const CollectiveLatency& l = a.latency;
  const double steps_up = double(s.outer) * scaleup_ring_steps(s.inner, l.scaleup_torus_dims);
  const double latency =
      passes * (steps_up * l.scaleup_step + double(s.outer - 1) * l.scaleout_step);
  double transfer = passes * double(s.inner - 1) / double(s.inner) * message / a.scaleup_bandwidth;
  if (s.outer > 1) {
    transfer += passes * double(s.outer - 1) / double(s.outer) * (message / double(s.inner)) /
                a.scaleout_bandwidth;
  }
  return l.start + latency + transfer;
}

// NCCL's all-reduce tree: a chain through each domain and a binary tree between domains, up to
// reduce and down to broadcast, the whole message on every link.
double tree_seconds(double message, Span s, const Accelerator& a) {
  const CollectiveLatency& l = a.latency;
  const double depth = scaleup_ring_steps(s.inner, l.scaleup_torus_dims) * l.scaleup_step +
                       std::ceil(std::log2(double(s.outer))) * l.scaleout_step;
  double transfer = s.inner > 1 ? message / a.scaleup_bandwidth : 0;
  if (s.outer > 1) transfer += message / double(s.inner) / a.scaleout_bandwidth;
  return l.start + 2 * depth + 2 * transfer / kTreeBandwidthShare;
}

}  // namespace

CollectiveTime collective_time(const Collective& c, const Accelerator& a) {
  if (c.ranks <= 1 || c.bytes <= 0 || c.messages <= 0) return {};
  const int64_t inner = std::clamp<int64_t>(c.per_domain, 1, c.ranks);
  const Span span{inner, (c.ranks + inner - 1) / inner};
  const double message = c.bytes / c.messages;
  if (c.kind != CollectiveKind::kAllReduce) {
    return {c.messages * ring_seconds(1, message, span, a), CollectiveAlgorithm::kRing};
  }
  const double ring = ring_seconds(2, message, span, a);
  const double tree = tree_seconds(message, span, a);
  return tree < ring ? CollectiveTime{c.messages * tree, CollectiveAlgorithm::kTree}
                     : CollectiveTime{c.messages * ring, CollectiveAlgorithm::kRing};
}

const char* algorithm_name(CollectiveAlgorithm algorithm) {
  return algorithm == CollectiveAlgorithm::kTree ? "tree" : "ring";
}

}  // namespace tessera::plan
