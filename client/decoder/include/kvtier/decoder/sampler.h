// Next-token choice from logits: greedy (temperature 0) or seeded sampling
// with temperature, top-k and top-p, reproducible for a given seed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "absl/types/span.h"

namespace kvtier::decoder {

struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  uint32_t top_k = 0;        // 0: no top-k cut
  float top_p = 1.0f;        // 1: no nucleus cut
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {}
  uint32_t Sample(absl::Span<const float> logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, uint32_t>> scratch_;
};

// Index of the largest logit (lowest index on ties).
uint32_t Argmax(absl::Span<const float> logits);

}  // namespace kvtier::decoder
