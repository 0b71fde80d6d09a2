// The dense reference forward pass and tiny-model helpers for the decoder
// tests. The reference follows Hugging Face's LlamaForCausalLM literally.
#include "tests/decoder/decoder_test_util.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kvtier/decoder/sampler.h"

namespace kvtier::decoder::testing {
namespace {

using Vec = std::vector<double>;

// y[r][o] = sum_i x[r][i] * w[o][i]
Vec MatMul(const Vec& x, size_t rows, size_t in, const std::vector<float>& w, size_t out) {
  Vec y(rows * out, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t o = 0; o < out; ++o) {
      double s = 0;
      for (size_t i = 0; i < in; ++i) s += x[r * in + i] * double(w[o * in + i]);
      y[r * out + o] = s;
    }
  return y;
}

Vec Norm(const Vec& x, size_t rows, size_t dim, const std::vector<float>& w, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (size_t i = 0; i < dim; ++i) ss += x[r * dim + i] * x[r * dim + i];
    double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (size_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] * inv * w[i];
  }
  return y;
}

void Rope(Vec& x, size_t rows, size_t heads, size_t hd, double theta) {
  for (size_t r = 0; r < rows; ++r)
    for (size_t h = 0; h < heads; ++h) {
      double* v = &x[(r * heads + h) * hd];
      for (size_t j = 0; j < hd / 2; ++j) {
        double a = double(r) * std::pow(theta, -2.0 * double(j) / double(hd));
        double x1 = v[j], x2 = v[j + hd / 2];
        v[j] = x1 * std::cos(a) - x2 * std::sin(a);
        v[j + hd / 2] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
}

Vec Attend(const Vec& q, const Vec& k, const Vec& v, size_t n, const ModelConfig& c, uint32_t window) {
  const size_t hq = c.num_attention_heads, hk = c.num_key_value_heads, hd = c.head_dim;
  Vec out(n * hq * hd, 0.0);
  for (size_t t = 0; t < n; ++t)
    for (size_t h = 0; h < hq; ++h) {
      const size_t kh = h / (hq / hk);
      const size_t first = (window == 0 || t + 1 <= window) ? 0 : t + 1 - window;
      std::vector<double> s;
      double mx = -1e300;
      for (size_t u = first; u <= t; ++u) {
        double d = 0;
        for (size_t i = 0; i < hd; ++i) d += q[(t * hq + h) * hd + i] * k[(u * hk + kh) * hd + i];
        s.push_back(d / std::sqrt(double(hd)));
        mx = std::max(mx, s.back());
      }
      double z = 0;
      for (double& e : s) z += e = std::exp(e - mx);
      for (size_t u = first; u <= t; ++u)
        for (size_t i = 0; i < hd; ++i)
          out[(t * hq + h) * hd + i] += s[u - first] / z * v[(u * hk + kh) * hd + i];
    }
  return out;
}

// y[r] += b (HF Linear's bias); an empty b is no bias.
Vec Bias(Vec y, const std::vector<float>& b) {
  for (size_t i = 0; !b.empty() && i < y.size(); ++i) y[i] += b[i % b.size()];
  return y;
}

}  // namespace

std::unique_ptr<ModelWeights> TinyWeights(uint64_t seed) {
  auto config = NamedConfig("tiny");
  return RandomWeights(*config, seed, 0.1f);
}

TinyModel MakeTiny(uint32_t tpp, Dtype kv_dtype, uint32_t pages, uint32_t window, uint64_t seed) {
  TinyModel m;
  m.weights = TinyWeights(seed);
  auto cache = PagedKvCache::Create({KvLayoutFor(m.weights->config, tpp, kv_dtype), pages, window});
  EXPECT_TRUE(cache.ok()) << cache.status();
  m.cache = *std::move(cache);
  auto model = Model::Create(m.weights.get(), m.cache.get());
  EXPECT_TRUE(model.ok()) << model.status();
  m.model = *std::move(model);
  return m;
}

std::vector<double> ReferenceLogits(const ModelWeights& w, const std::vector<uint32_t>& tokens,
                                    uint32_t window) {
  const ModelConfig& c = w.config;
  const size_t n = tokens.size(), d = c.hidden_size, qd = c.num_attention_heads * c.head_dim,
               kvd = c.num_key_value_heads * c.head_dim, ff = c.intermediate_size;
  Vec x(n * d);
  for (size_t t = 0; t < n; ++t)
    for (size_t i = 0; i < d; ++i) x[t * d + i] = w.embed[tokens[t] * d + i];
  for (const LayerWeights& l : w.layers) {
    Vec h = Norm(x, n, d, l.input_norm, c.rms_norm_eps);
    Vec q = Bias(MatMul(h, n, d, l.q_proj, qd), l.q_bias), k = Bias(MatMul(h, n, d, l.k_proj, kvd), l.k_bias),
        v = Bias(MatMul(h, n, d, l.v_proj, kvd), l.v_bias);
    Rope(q, n, c.num_attention_heads, c.head_dim, c.rope_theta);
    Rope(k, n, c.num_key_value_heads, c.head_dim, c.rope_theta);
    Vec o = Bias(MatMul(Attend(q, k, v, n, c, window), n, qd, l.o_proj, d), l.o_bias);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    h = Norm(x, n, d, l.post_norm, c.rms_norm_eps);
    Vec g = Bias(MatMul(h, n, d, l.gate_proj, ff), l.gate_bias),
        u = Bias(MatMul(h, n, d, l.up_proj, ff), l.up_bias);
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    Vec down = Bias(MatMul(g, n, ff, l.down_proj, d), l.down_bias);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  Vec h = Norm(x, n, d, w.final_norm, c.rms_norm_eps);
  std::vector<float> head(w.LmHead(), w.LmHead() + size_t(c.vocab_size) * d);
  return MatMul(h, n, d, head, c.vocab_size);
}

std::vector<uint32_t> GreedyCached(Model& model, const std::vector<uint32_t>& prompt, uint32_t n,
                                   std::vector<std::vector<float>>* logits) {
  PagedKvCache& cache = model.cache();
  SeqId seq = cache.AddSequence();
  std::vector<uint32_t> out;
  std::vector<float> l;
  absl::Status st = model.Forward({{seq, prompt}}, &l);
  EXPECT_TRUE(st.ok()) << st;
  for (uint32_t i = 0; i < n && st.ok(); ++i) {
    if (logits) logits->push_back(l);
    out.push_back(Argmax(l));
    if (i + 1 == n) break;
    st = model.Forward({{seq, absl::MakeConstSpan(&out.back(), 1)}}, &l);
    EXPECT_TRUE(st.ok()) << st;
  }
  EXPECT_TRUE(cache.RemoveSequence(seq).ok());
  return out;
}

std::vector<uint32_t> PromptTokens(uint32_t n, uint32_t salt) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = (i * 2654435761u + salt * 40503u + 17) % 251;
  return t;
}

double MaxAbsDiff(const float* a, const double* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

}  // namespace kvtier::decoder::testing
