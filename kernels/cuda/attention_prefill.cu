// CUDA paged causal prefill: one warp per (query token, query head) walks
// the visible positions one token at a time with an online softmax held in
// registers (lanes split head_dim). Simple rather than fast: it reads K/V
// once per query head; the CPU path and the decode kernel carry the tuning.
#include "cuda/cuda_common.cuh"

namespace kvtier::kernels {
namespace {

using namespace cuda_internal;

constexpr int kWarps = 4;

template <KvDtype D>
__global__ void PrefillKernel(PrefillParams p) {
  const int lane = threadIdx.x % kWarp;
  const uint32_t j = blockIdx.x * kWarps + threadIdx.x / kWarp, qh = blockIdx.y;
  if (j >= p.num_new) return;
  const uint32_t d = p.kv.head_dim, g = p.num_q_heads / p.kv.kv_heads, h = qh / g;
  const uint32_t tpp = p.kv.tokens_per_page, pos = p.cached_len + j;
  const uint32_t lo = p.sliding_window > 0 && pos + 1 > p.sliding_window ? pos + 1 - p.sliding_window : 0;
  const float* q = p.q + (uint64_t(j) * p.num_q_heads + qh) * d;
  float qr[kMaxElemsPerLane], acc[kMaxElemsPerLane];
#pragma unroll
  for (int e = 0; e < kMaxElemsPerLane; ++e) {
    const uint32_t i = lane + kWarp * e;
    qr[e] = i < d ? q[i] : 0.f;
    acc[e] = 0.f;
  }
  float m = -INFINITY, l = 0;
  bool bad = false;
  for (uint32_t t = lo; t <= pos; ++t) {
    const int64_t page = p.block_table[t / tpp];
    if (!p.kv.ValidPage(page)) {
      bad = true;
      continue;
    }
    const uint8_t* krow = p.kv.Data(page, kKeys, h, t % tpp);
    const uint8_t* vrow = p.kv.Data(page, kValues, h, t % tpp);
    float ks = 1.f, vs = 1.f;
    if (p.kv.HasScales()) {
      ks = LoadF32(p.kv.Scales(page, kKeys, h) + 4 * (t % tpp));
      vs = LoadF32(p.kv.Scales(page, kValues, h) + 4 * (t % tpp));
    }
    float dot = 0;
#pragma unroll
    for (int e = 0; e < kMaxElemsPerLane; ++e) {
      const uint32_t i = lane + kWarp * e;
      if (i < d) dot += qr[e] * Elem<D>(krow, i);
    }
    const float s = WarpSum(dot) * ks * p.sm_scale;
    const float m_new = fmaxf(m, s), alpha = __expf(m - m_new), w = __expf(s - m_new);
#pragma unroll
    for (int e = 0; e < kMaxElemsPerLane; ++e) {
      const uint32_t i = lane + kWarp * e;
      if (i < d) acc[e] = acc[e] * alpha + w * Elem<D>(vrow, i) * vs;
    }
    l = l * alpha + w;
    m = m_new;
  }
  float* out = p.out + (uint64_t(j) * p.num_q_heads + qh) * d;
#pragma unroll
  for (int e = 0; e < kMaxElemsPerLane; ++e) {
    const uint32_t i = lane + kWarp * e;
    if (i < d) out[i] = bad ? NAN : (l > 0 ? acc[e] / l : 0.f);
  }
}

}  // namespace

cudaError_t PagedPrefillCuda(const PrefillParams& p, cudaStream_t stream) {
  KVTIER_CUDA_RETURN_IF_ERROR(CheckKv(p.kv));
  if (p.num_q_heads == 0 || p.num_q_heads % p.kv.kv_heads != 0) return cudaErrorInvalidValue;
  if (p.num_new == 0) return cudaSuccess;
  if (p.q == nullptr || p.out == nullptr || p.block_table == nullptr ||
      CeilDiv(uint64_t(p.cached_len) + p.num_new, p.kv.tokens_per_page) > p.num_blocks)
    return cudaErrorInvalidValue;
  const dim3 grid(CeilDiv(p.num_new, kWarps), p.num_q_heads);
  return DispatchDtype(p.kv.dtype, [&](auto dt) {
    PrefillKernel<decltype(dt)::value><<<grid, kWarps * kWarp, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

}  // namespace kvtier::kernels
