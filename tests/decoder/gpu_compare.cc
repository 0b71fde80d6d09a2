// gpu_compare.h: models on both paths and the greedy near-tie comparison.
#include "tests/decoder/gpu_compare.h"

#include <algorithm>
#include <cmath>

#include "kvtier/decoder/safetensors.h"
#include "kvtier/decoder/sampler.h"
#include "tests/decoder/decoder_test_util.h"

namespace kvtier::decoder::testing {

DeviceModel MakeModel(const ModelWeights& weights, bool gpu, TensorDtype gpu_weights, uint32_t tpp,
                      Dtype kv_dtype, uint32_t pages, uint32_t max_rows_per_pass) {
  DeviceModel m;
  KvCacheOptions kv{KvLayoutFor(weights.config, tpp, kv_dtype), pages, 0};
  kv.on_gpu = gpu;
  auto cache = PagedKvCache::Create(kv);
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return m;
  m.cache = *std::move(cache);
  std::unique_ptr<DeviceForward> device;
  if (gpu) {
    CudaForwardOptions o;
    o.weights = gpu_weights;
    o.max_rows_per_pass = max_rows_per_pass;
    auto f = CreateCudaForward(weights, *m.cache, o);
    EXPECT_TRUE(f.ok()) << f.status();
    if (!f.ok()) return m;
    device = *std::move(f);
  }
  auto model = Model::Create(&weights, m.cache.get(), std::move(device));
  EXPECT_TRUE(model.ok()) << model.status();
  if (model.ok()) m.model = *std::move(model);
  return m;
}

double TopMargin(const std::vector<float>& l) {
  std::vector<float> v(l);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return double(v[0]) - v[1];
}

Comparison CompareGreedy(Model& cpu, Model& gpu, const std::vector<uint32_t>& prompt, uint32_t n) {
  std::vector<std::vector<float>> cl, gl;
  std::vector<uint32_t> ct = GreedyCached(cpu, prompt, n, &cl);
  std::vector<uint32_t> gt = GreedyCached(gpu, prompt, n, &gl);
  Comparison r;
  for (size_t i = 0; i < std::min(ct.size(), gt.size()); ++i) {
    std::vector<double> ref(cl[i].begin(), cl[i].end());
    r.max_logit_diff = std::max(r.max_logit_diff, MaxAbsDiff(gl[i].data(), ref.data(), ref.size()));
    r.min_margin = std::min(r.min_margin, TopMargin(cl[i]));
    if (ct[i] != gt[i]) {
      r.diverged = true;
      r.margin_at_divergence = TopMargin(cl[i]);
      break;
    }
    ++r.same_tokens;
  }
  std::printf("  compared %zu/%u tokens equal; max |logit diff| %.3g; min CPU top-2 margin %.3g%s\n",
              r.same_tokens, n, r.max_logit_diff, r.min_margin,
              r.diverged ? " (diverged at a near-tie)" : "");
  return r;
}

void RoundWeightsToBf16(ModelWeights& w) {
  auto round = [](std::vector<float>& v) {
    for (float& x : v) x = Bf16ToFloat(FloatToBf16(x));
  };
  round(w.embed);
  round(w.final_norm);
  round(w.lm_head);
  for (LayerWeights& l : w.layers)
    for (auto* t : {&l.input_norm, &l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.post_norm,
                    &l.gate_proj, &l.up_proj, &l.down_proj, &l.q_bias, &l.k_bias, &l.v_bias,
                    &l.o_bias, &l.gate_bias, &l.up_bias, &l.down_bias})
      round(*t);
}

}  // namespace kvtier::decoder::testing
