#include "tessera/parallel/model_parallel.h"

#include <algorithm>
#include <chrono>

#include "tessera/model/model_layout.h"

namespace tessera::parallel {

CommunicatorCollectives::CommunicatorCollectives(comm::Communicator& communicator)
    : c_(communicator), counts_(communicator.size()) {}

template <typename Call>
void CommunicatorCollectives::timed(Call&& call) {
  if (c_.size() == 1) {
    call();
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  call();
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void CommunicatorCollectives::all_reduce(float* data, int64_t n) {
  timed([&] { c_.all_reduce(data, n, DType::f32); });
}

void CommunicatorCollectives::all_reduce(double* data, int64_t n) {
  timed([&] { c_.all_reduce(data, n); });
}

void CommunicatorCollectives::all_gather(const float* send, float* recv, int64_t n) {
  std::fill(counts_.begin(), counts_.end(), n);
  timed([&] { c_.all_gather(send, recv, counts_, DType::f32); });
}

void CommunicatorCollectives::reduce_scatter(const float* send, float* recv, int64_t n) {
  std::fill(counts_.begin(), counts_.end(), n);
  timed([&] { c_.reduce_scatter(send, recv, counts_, DType::f32); });
}

void CommunicatorCollectives::all_to_all(const float* send, std::span<const int64_t> send_counts,
                                         float* recv, std::span<const int64_t> recv_counts) {
  timed([&] { c_.all_to_all_v(send, send_counts, recv, recv_counts, DType::f32); });
}

void ModelGroups::set_stage_blocks(int64_t begin, int64_t end) {
  parallel_.sharding.block_begin = begin;
  parallel_.sharding.block_end = end;
}

double ModelGroups::communication_seconds() const {
  return tp_.seconds() + ep_.seconds() + dp_.seconds() + cp_.seconds();
}

ModelGroups::ModelGroups(const comm::Mesh& mesh, const model::ModelConfig& config,
                         bool sequence_parallel, DpTokens tokens)
    : tp_(mesh.tp()), ep_(mesh.ep()), dp_(mesh.dp()), cp_(mesh.cp()) {
  const comm::MeshShape& s = mesh.shape();
  model::check_sharding(config, s.tp, s.ep);
  parallel_.sharding = {s.tp, mesh.coords().tp, s.ep, mesh.ep_rank()};
  parallel_.tp = &tp_;
  parallel_.sequence_parallel = sequence_parallel && s.tp > 1;
  parallel_.ep = &ep_;
  parallel_.batch = tokens == DpTokens::kSplit ? &dp_ : nullptr;
  parallel_.cp = s.cp > 1 ? &cp_ : nullptr;
}

}  // namespace tessera::parallel
