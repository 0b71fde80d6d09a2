// Helpers of the `gpu` decoder tests: a model on the CPU or on the CUDA
// backend over the same weights, and a greedy comparison that accepts a
// different token only at a near-tie of the CPU's logits (and reports the
// margins and logit differences it saw).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kvtier/decoder/device.h"
#include "kvtier/decoder/kv_cache.h"
#include "kvtier/decoder/model.h"
#include "kvtier/gpu_arena.h"

namespace kvtier::decoder::testing {

// Skips the test (with the reason) without the CUDA decoder or a GPU.
#define KVTIER_REQUIRE_CUDA_DECODER()                                              \
  do {                                                                             \
    std::string why_;                                                              \
    if (!::kvtier::decoder::CudaDecoderBuilt())                                    \
      GTEST_SKIP() << "built without CUDA (-DKVTIER_CUDA=ON builds the decoder's CUDA path)"; \
    if (!::kvtier::GpuArena::CudaAvailable(&why_))                                 \
      GTEST_SKIP() << "no usable CUDA device (" << why_ << ")";                    \
  } while (0)

struct DeviceModel {
  std::unique_ptr<PagedKvCache> cache;
  std::unique_ptr<Model> model;
};

// `weights` on the CPU (gpu = false) or the CUDA backend with weights stored
// as `gpu_weights`. Fails the test on error.
DeviceModel MakeModel(const ModelWeights& weights, bool gpu, TensorDtype gpu_weights,
                      uint32_t tokens_per_page, Dtype kv_dtype, uint32_t pages,
                      uint32_t max_rows_per_pass = 4096);

struct Comparison {
  size_t same_tokens = 0;        // leading tokens equal on both paths
  bool diverged = false;         // a later token differs
  double margin_at_divergence = 0;  // CPU top-1 minus top-2 logit there
  double min_margin = 1e30;      // smallest CPU top-2 margin over the compared steps
  double max_logit_diff = 0;     // max |cpu - gpu| over the steps with equal history
};

// Greedy `n` tokens after `prompt` on both models; compares until the first
// differing token.
Comparison CompareGreedy(Model& cpu, Model& gpu, const std::vector<uint32_t>& prompt, uint32_t n);

// The CPU's top-1 minus top-2 logit.
double TopMargin(const std::vector<float>& logits);

// Rounds every tensor to bf16 in place (what a bf16 checkpoint holds).
void RoundWeightsToBf16(ModelWeights& w);

}  // namespace kvtier::decoder::testing
