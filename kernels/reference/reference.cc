// Reference paged attention (see reference.h): no tiling, no online softmax,
// no vectors, so its only shared assumption with the kernels is the layout.
#include "reference/reference.h"

#include <algorithm>
#include <cmath>

#include "kvtier/kernels/numeric.h"

namespace kvtier::kernels::reference {

double KvElem(const PagedKv& kv, const int32_t* table, uint32_t pos, int half, uint32_t head,
              uint32_t i) {
  const int64_t page = table[pos / kv.tokens_per_page];
  const uint32_t slot = pos % kv.tokens_per_page;
  double x = LoadElem(kv.dtype, kv.Data(page, half, head, slot), i);
  if (kv.HasScales()) x *= LoadF32(kv.Scales(page, half, head) + 4 * slot);
  return x;
}

void AttendRow(const PagedKv& kv, const int32_t* table, uint32_t head, const float* q, uint32_t lo,
               uint32_t hi, double sm_scale, double* out) {
  const uint32_t d = kv.head_dim;
  std::vector<double> s(hi - lo);
  double mx = -INFINITY;
  for (uint32_t t = lo; t < hi; ++t) {
    double dot = 0;
    for (uint32_t i = 0; i < d; ++i) dot += double(q[i]) * KvElem(kv, table, t, kKeys, head, i);
    s[t - lo] = dot * sm_scale;
    mx = std::max(mx, s[t - lo]);
  }
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  std::fill(out, out + d, 0.0);
  for (uint32_t t = lo; t < hi; ++t) {
    const double w = s[t - lo] / sum;
    for (uint32_t i = 0; i < d; ++i) out[i] += w * KvElem(kv, table, t, kValues, head, i);
  }
}

std::vector<double> Decode(const DecodeParams& p) {
  const uint32_t d = p.kv.head_dim, g = p.num_q_heads / p.kv.kv_heads;
  std::vector<double> out(size_t(p.num_seqs) * p.num_q_heads * d);
  for (uint32_t s = 0; s < p.num_seqs; ++s) {
    const uint32_t len = uint32_t(p.seq_lens[s]);
    const uint32_t lo = p.sliding_window && len > p.sliding_window ? len - p.sliding_window : 0;
    for (uint32_t h = 0; h < p.num_q_heads; ++h) {
      const size_t row = size_t(s) * p.num_q_heads + h;
      AttendRow(p.kv, p.block_tables + size_t(s) * p.block_table_stride, h / g, p.q + row * d, lo,
                len, p.sm_scale, out.data() + row * d);
    }
  }
  return out;
}

std::vector<double> Prefill(const PrefillParams& p) {
  const uint32_t d = p.kv.head_dim, g = p.num_q_heads / p.kv.kv_heads;
  std::vector<double> out(size_t(p.num_new) * p.num_q_heads * d);
  for (uint32_t j = 0; j < p.num_new; ++j) {
    const uint32_t pos = p.cached_len + j;
    const uint32_t lo =
        p.sliding_window && pos + 1 > p.sliding_window ? pos + 1 - p.sliding_window : 0;
    for (uint32_t h = 0; h < p.num_q_heads; ++h) {
      const size_t row = size_t(j) * p.num_q_heads + h;
      AttendRow(p.kv, p.block_table, h / g, p.q + row * d, lo, pos + 1, p.sm_scale,
                out.data() + row * d);
    }
  }
  return out;
}

}  // namespace kvtier::kernels::reference
