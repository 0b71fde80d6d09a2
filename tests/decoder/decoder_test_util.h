// Shared pieces of the decoder tests: a tiny model on a small paged cache,
// and an independent dense reference forward pass (double precision, plain
// loops, no paging) that the decoder's logits are checked against.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvtier/decoder/kv_cache.h"
#include "kvtier/decoder/model.h"
#include "kvtier/decoder/weights.h"

namespace kvtier::decoder::testing {

struct TinyModel {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<PagedKvCache> cache;
  std::unique_ptr<Model> model;
};

// The "tiny" config with weights of std 0.1 (attention far from uniform, so
// position and cache mistakes show in the logits).
std::unique_ptr<ModelWeights> TinyWeights(uint64_t seed = 1);

TinyModel MakeTiny(uint32_t tokens_per_page = 16, Dtype kv_dtype = Dtype::kFp32,
                   uint32_t pages = 64, uint32_t sliding_window = 0, uint64_t seed = 1);

// Logits of every position of `tokens` ([n][vocab]), computed densely in
// double. sliding_window 0 = full causal attention.
std::vector<double> ReferenceLogits(const ModelWeights& w, const std::vector<uint32_t>& tokens,
                                    uint32_t sliding_window = 0);

// Greedy generation through Model::Forward in a fresh sequence: returns the
// new tokens and (if asked) each step's logits.
std::vector<uint32_t> GreedyCached(Model& model, const std::vector<uint32_t>& prompt, uint32_t n,
                                   std::vector<std::vector<float>>* logits = nullptr);

// Deterministic byte tokens for a prompt of length n.
std::vector<uint32_t> PromptTokens(uint32_t n, uint32_t salt = 0);

// max |a - b| over the shorter length.
double MaxAbsDiff(const float* a, const double* b, size_t n);

}  // namespace kvtier::decoder::testing
