#include "tessera/plan/search.h"

#include <algorithm>

namespace tessera::plan {

namespace {

// Context parallelism splits a sequence into 2 x cp chunks; below this many tokens per rank its
// key and value exchange costs more than the memory it saves is worth, so the search stops.
constexpr int64_t kMinContextChunk = 8192;

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

double total_cost(const Estimate& e) {
  if (e.cost_on_demand) return *e.cost_on_demand;
  return e.days * double(e.layout.chips());  // no price: chip-days stand in
}

SearchResult search(PlannedModel& planned, const Accelerator& a, int64_t chips, const Workload& w,
                    RankBy rank_by) {
  const model::ModelConfig& c = planned.config();
  SearchResult result;
  std::vector<int64_t> cps;
  for (int64_t cp = 1; cp == 1 || w.seq_len / cp >= kMinContextChunk; cp *= 2) {
    if (w.seq_len % (2 * cp) == 0 || cp == 1) cps.push_back(cp);
  }
  for (int64_t tp : divisors(c.n_head)) {
    if (tp > a.scaleup_domain || chips % tp != 0) continue;
    for (int64_t cp : cps) {
      if (chips % (tp * cp) != 0) continue;
      // Every depth that divides the chips, also where it does not divide the layers: the engine
      // splits them unevenly (Llama 3 405B: 126 blocks on 16 stages).
      for (int64_t pp : divisors(chips / tp / cp)) {
        if (pp > c.n_layer) break;
        const int64_t dp = chips / tp / cp / pp;
        for (int64_t ep = 1; ep <= (c.is_moe() ? dp : 1); ep *= 2) {
          for (int zero = 0; zero <= 3; ++zero) {
            for (int64_t mb : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32}) {
              for (model::Recompute r : {model::Recompute::kNone, model::Recompute::kSelective,
                                         model::Recompute::kFull}) {
                for (double rf : {1.0, 0.5}) {
                  if (rf < 1 && r == model::Recompute::kNone) continue;
                  for (int64_t vpp = 1; vpp <= (pp == 1 ? 1 : 8); ++vpp) {
                    if (vpp > 1 && c.n_layer % (pp * vpp) != 0) continue;
                    Layout l{dp, tp, pp, ep, zero, mb, r, vpp};
                    l.cp = cp;
                    l.recompute_fraction = rf;
                    // Sequence parallelism where tp divides the micro-batch's tokens, else without.
                    l.sequence_parallel = (mb * w.seq_len / cp) % tp == 0;
                    Estimate e = estimate(planned, a, l, w);
                    if (!e.invalid.empty()) continue;
                    ++result.evaluated;
                    if (e.fits) {
                      result.ranked.push_back(std::move(e));
                      continue;
                    }
                    ++result.too_big;
                    if (!result.smallest_misfit ||
                        e.memory.total() < result.smallest_misfit->memory.total()) {
                      result.smallest_misfit = std::move(e);
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  auto key = [&](const Estimate& e) {
    return rank_by == RankBy::kTime ? e.time.total() : total_cost(e);
  };
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [&](const Estimate& x, const Estimate& y) { return key(x) < key(y); });
  return result;
}

}  // namespace

SearchResult search_layouts(const model::ModelConfig& c, const Accelerator& a, int64_t chips,
                            const Workload& w, RankBy rank_by) {
  PlannedModel planned(c);
  return search(planned, a, chips, w, rank_by);
}

std::optional<int64_t> smallest_feasible_chips(const model::ModelConfig& c, const Accelerator& a,
                                               const Workload& w) {
  PlannedModel planned(c);
  for (int64_t chips = 1; chips <= (int64_t{1} << 20); chips *= 2) {
    if (!search(planned, a, chips, w, RankBy::kTime).ranked.empty()) return chips;
  }
  return std::nullopt;
}

}  // namespace tessera::plan
