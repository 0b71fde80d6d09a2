// Greedy and seeded sampling. Sampling works on a sorted candidate list so
// top-k and top-p are one cut each.
#include "kvtier/decoder/sampler.h"

#include <algorithm>
#include <cmath>

namespace kvtier::decoder {

uint32_t Argmax(absl::Span<const float> logits) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

uint32_t Sampler::Sample(absl::Span<const float> logits) {
  if (options_.temperature <= 0.0f || logits.size() <= 1) return Argmax(logits);
  scratch_.resize(logits.size());
  for (uint32_t i = 0; i < logits.size(); ++i) scratch_[i] = {logits[i], i};
  size_t n = scratch_.size();
  if (options_.top_k > 0 && options_.top_k < n) n = options_.top_k;
  // Largest first; ties by lower id so the order (and the draw) is stable.
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  std::partial_sort(scratch_.begin(), scratch_.begin() + n, scratch_.end(), by_logit);
  const float inv_t = 1.0f / options_.temperature, top = scratch_[0].first;
  double total = 0;
  std::vector<double> probs(n);
  for (size_t i = 0; i < n; ++i) total += probs[i] = std::exp(double(scratch_[i].first - top) * inv_t);
  if (options_.top_p < 1.0f) {  // keep the smallest prefix with mass >= top_p
    double mass = 0;
    size_t keep = 0;
    while (keep < n && mass < options_.top_p * total) mass += probs[keep++];
    n = std::max<size_t>(keep, 1);
    total = mass > 0 ? mass : probs[0];
  }
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (size_t i = 0; i < n; ++i) {
    if (r < probs[i]) return scratch_[i].second;
    r -= probs[i];
  }
  return scratch_[n - 1].second;
}

}  // namespace kvtier::decoder
