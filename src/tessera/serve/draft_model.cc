#include "tessera/serve/draft_model.h"

#include <algorithm>

namespace tessera::serve {

DraftModel::DraftModel(ServedModel& served, int64_t pool_tokens, int64_t max_step_tokens,
                       int64_t block_tokens)
    : served_(served),
      max_step_tokens_(max_step_tokens),
      cache_(served.context(), served.model->model_layout(), pool_tokens, block_tokens,
             /*prefix_caching=*/false, served.kv_dtype),
      decoder_(*served.model) {}

void DraftModel::draft(std::span<const Job> jobs) {
  chunks_.clear();
  running_.clear();
  int64_t budget = max_step_tokens_;
  for (const Job& job : jobs) {
    job.drafted->clear();
    if (job.k <= 0) continue;
    if (*job.id < 0) *job.id = cache_.add_sequence();
    std::vector<int32_t>& written = written_[*job.id];
    const int64_t held =
        std::mismatch(written.begin(), written.end(), job.tokens.begin(), job.tokens.end()).first -
        written.begin();
    if (held < int64_t(written.size())) {
      cache_.truncate(*job.id, held);
      written.resize(size_t(held));
    }
    const int64_t missing = int64_t(job.tokens.size()) - held;
    if (missing < 1 || missing > budget || !cache_.reserve(*job.id, missing)) continue;
    budget -= missing;
    chunks_.push_back(cache_.chunk(*job.id, job.tokens.subspan(size_t(held))));
    running_.push_back(&job);
  }
  const int64_t vocab = served_.config().vocab_size;
  while (!running_.empty()) {
    const float* logits = on_host(served_.context(), decoder_.decode(cache_.view(), chunks_),
                                  int64_t(running_.size()) * vocab, host_logits_);
    size_t still = 0;
    for (size_t i = 0; i < running_.size(); ++i) {
      const Job& job = *running_[i];
      const std::span<const int32_t> ran(chunks_[i].tokens, size_t(chunks_[i].n));
      cache_.advance(*job.id, ran);
      written_[*job.id].insert(written_[*job.id].end(), ran.begin(), ran.end());
      const float* row = logits + int64_t(i) * vocab;
      job.drafted->push_back(int32_t(std::max_element(row, row + vocab) - row));
      if (int64_t(job.drafted->size()) < job.k && cache_.reserve(*job.id, 1)) {
        running_[still++] = &job;
      }
    }
    running_.resize(still);
    chunks_.clear();
    for (const Job* job : running_) {
      chunks_.push_back(cache_.chunk(*job->id, std::span<const int32_t>(&job->drafted->back(), 1)));
    }
  }
}

void DraftModel::release(int64_t id) {
  cache_.release(id);
  written_.erase(id);
}

}  // namespace tessera::serve
