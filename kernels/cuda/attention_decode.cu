// CUDA paged decode: split-K "flash decoding". Block (split, kv head, seq)
// runs 4 warps over its token chunk, each warp one token at a time for all
// query heads of the GQA group (K/V read once per group), online softmax per
// warp, merged in shared memory; splits > 1 leave (m, l, acc) partials that
// a combine kernel merges per (seq, q head).
#include <algorithm>

#include "cuda/cuda_common.cuh"

namespace kvtier::kernels {
namespace {

using namespace cuda_internal;

constexpr int kWarps = 4;
constexpr uint32_t kMinSplitTokens = 256;
constexpr uint32_t kMaxSplits = 128;

uint32_t Splits(const DecodeParams& p) {
  int dev = 0, sms = 100;
  if (cudaGetDevice(&dev) == cudaSuccess)
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const uint64_t base = std::max<uint64_t>(uint64_t(p.num_seqs) * p.kv.kv_heads, 1);
  const uint64_t want = (2ull * sms + base - 1) / base;
  const uint64_t by_len = CeilDiv(p.max_seq_len, kMinSplitTokens);
  return uint32_t(std::clamp<uint64_t>(std::min(want, by_len), 1, kMaxSplits));
}

size_t SharedBytes(const DecodeParams& p) {
  const uint32_t g = p.num_q_heads / p.kv.kv_heads, d = p.kv.head_dim;
  return (size_t(g) * d + size_t(kWarps) * g * (d + 2)) * sizeof(float) + sizeof(int);
}

// Folds token t (scaled K row in kr, V row in vr) into warp state st[g][d+2].
__device__ void WarpUpdate(const float* qs, float* st, uint32_t g, uint32_t d, float sm_scale,
                           const float* kr, const float* vr, int lane) {
  for (uint32_t r = 0; r < g; ++r) {
    float dot = 0;
#pragma unroll
    for (int j = 0; j < kMaxElemsPerLane; ++j) {
      const uint32_t i = lane + kWarp * j;
      if (i < d) dot += qs[r * d + i] * kr[j];
    }
    const float s = WarpSum(dot) * sm_scale;
    float* sr = st + r * (d + 2);
    const float m_old = sr[0], m_new = fmaxf(m_old, s);
    const float alpha = __expf(m_old - m_new), w = __expf(s - m_new);
#pragma unroll
    for (int j = 0; j < kMaxElemsPerLane; ++j) {
      const uint32_t i = lane + kWarp * j;
      if (i < d) sr[2 + i] = sr[2 + i] * alpha + w * vr[j];
    }
    const float l_new = sr[1] * alpha + w;
    __syncwarp();
    if (lane == 0) {
      sr[0] = m_new;
      sr[1] = l_new;
    }
    __syncwarp();
  }
}

template <KvDtype D>
__global__ void DecodeSplitKernel(DecodeParams p, uint32_t splits, float* partials) {
  extern __shared__ float smem[];
  const uint32_t k = blockIdx.x, h = blockIdx.y, s = blockIdx.z;
  const uint32_t d = p.kv.head_dim, g = p.num_q_heads / p.kv.kv_heads, tpp = p.kv.tokens_per_page;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  float* qs = smem;
  float* states = smem + g * d;
  int* bad = reinterpret_cast<int*>(states + kWarps * g * (d + 2));
  const float* q = p.q + (uint64_t(s) * p.num_q_heads + h * g) * d;
  for (uint32_t i = threadIdx.x; i < g * d; i += blockDim.x) qs[i] = q[i];
  for (uint32_t i = threadIdx.x; i < kWarps * g * (d + 2); i += blockDim.x)
    states[i] = (i % (d + 2) == 0) ? -INFINITY : 0.f;
  if (threadIdx.x == 0) *bad = 0;
  __syncthreads();

  const uint32_t len = uint32_t(p.seq_lens[s]);
  const uint32_t lo = p.sliding_window > 0 && len > p.sliding_window ? len - p.sliding_window : 0;
  const uint32_t chunk = (len - lo + splits - 1) / splits;
  const uint32_t t0 = min(len, lo + k * chunk), t1 = min(len, t0 + chunk);
  const int32_t* table = p.block_tables + uint64_t(s) * p.block_table_stride;
  float* st = states + warp * g * (d + 2);
  for (uint32_t t = t0 + warp; t < t1; t += kWarps) {
    const int64_t page = table[t / tpp];
    if (!p.kv.ValidPage(page)) {
      *bad = 1;
      continue;
    }
    const uint8_t* krow = p.kv.Data(page, kKeys, h, t % tpp);
    const uint8_t* vrow = p.kv.Data(page, kValues, h, t % tpp);
    float ks = 1.f, vs = 1.f;
    if (p.kv.HasScales()) {
      ks = LoadF32(p.kv.Scales(page, kKeys, h) + 4 * (t % tpp));
      vs = LoadF32(p.kv.Scales(page, kValues, h) + 4 * (t % tpp));
    }
    float kr[kMaxElemsPerLane], vr[kMaxElemsPerLane];
#pragma unroll
    for (int j = 0; j < kMaxElemsPerLane; ++j) {
      const uint32_t i = lane + kWarp * j;
      kr[j] = i < d ? Elem<D>(krow, i) * ks : 0.f;
      vr[j] = i < d ? Elem<D>(vrow, i) * vs : 0.f;
    }
    WarpUpdate(qs, st, g, d, p.sm_scale, kr, vr, lane);
  }
  __syncthreads();

  // Merge the warps' states; thread i handles element i of each row.
  for (uint32_t r = 0; r < g; ++r) {
    float m = -INFINITY;
    for (int w = 0; w < kWarps; ++w) m = fmaxf(m, states[(w * g + r) * (d + 2)]);
    float l = 0;
    for (int w = 0; w < kWarps; ++w) {
      const float* sw = states + (w * g + r) * (d + 2);
      if (sw[1] > 0) l += __expf(sw[0] - m) * sw[1];
    }
    const uint64_t qh = uint64_t(s) * p.num_q_heads + h * g + r;
    float* part = splits > 1 ? partials + (qh * splits + k) * (d + 2) : nullptr;
    for (uint32_t i = threadIdx.x; i < d; i += blockDim.x) {
      float a = 0;
      for (int w = 0; w < kWarps; ++w) {
        const float* sw = states + (w * g + r) * (d + 2);
        if (sw[1] > 0) a += __expf(sw[0] - m) * sw[2 + i];
      }
      if (*bad) a = NAN;
      if (part == nullptr) {
        p.out[qh * d + i] = l > 0 ? a / l : a * 0.f;
      } else {
        part[2 + i] = a;
      }
    }
    if (part != nullptr && threadIdx.x == 0) {
      part[0] = m;
      part[1] = l;
    }
  }
}

__global__ void CombineKernel(DecodeParams p, uint32_t splits, const float* partials) {
  const uint32_t d = p.kv.head_dim;
  const float* part = partials + uint64_t(blockIdx.x) * splits * (d + 2);
  float m = -INFINITY;
  for (uint32_t k = 0; k < splits; ++k) m = fmaxf(m, part[k * (d + 2)]);
  float l = 0;
  for (uint32_t k = 0; k < splits; ++k) {
    if (part[k * (d + 2) + 1] > 0) l += __expf(part[k * (d + 2)] - m) * part[k * (d + 2) + 1];
  }
  for (uint32_t i = threadIdx.x; i < d; i += blockDim.x) {
    float a = 0;
    for (uint32_t k = 0; k < splits; ++k) {
      const float* st = part + k * (d + 2);
      if (st[1] > 0 || st[2 + i] != st[2 + i]) a += __expf(st[0] - m) * st[2 + i];
    }
    p.out[uint64_t(blockIdx.x) * d + i] = l > 0 ? a / l : a * 0.f;
  }
}

cudaError_t CheckDecode(const DecodeParams& p) {
  KVTIER_CUDA_RETURN_IF_ERROR(CheckKv(p.kv));
  if (p.num_q_heads == 0 || p.num_q_heads % p.kv.kv_heads != 0 || p.max_seq_len == 0)
    return cudaErrorInvalidValue;
  if (p.num_seqs > 0 && (p.q == nullptr || p.out == nullptr || p.block_tables == nullptr ||
                         p.seq_lens == nullptr))
    return cudaErrorInvalidValue;
  if (SharedBytes(p) > 48 * 1024) return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

size_t DecodeWorkspaceBytesCuda(const DecodeParams& p) {
  if (p.kv.kv_heads == 0) return 0;
  const uint32_t splits = Splits(p);
  if (splits <= 1) return 0;
  return size_t(p.num_seqs) * p.num_q_heads * splits * (p.kv.head_dim + 2) * sizeof(float);
}

cudaError_t PagedDecodeCuda(const DecodeParams& p, Workspace ws, cudaStream_t stream) {
  KVTIER_CUDA_RETURN_IF_ERROR(CheckDecode(p));
  if (p.num_seqs == 0) return cudaSuccess;
  const uint32_t splits = Splits(p);
  if (ws.bytes < DecodeWorkspaceBytesCuda(p) || (splits > 1 && ws.data == nullptr))
    return cudaErrorInvalidValue;
  float* partials = static_cast<float*>(ws.data);
  const dim3 grid(splits, p.kv.kv_heads, p.num_seqs);
  KVTIER_CUDA_RETURN_IF_ERROR(DispatchDtype(p.kv.dtype, [&](auto dt) {
    DecodeSplitKernel<decltype(dt)::value>
        <<<grid, kWarps * kWarp, SharedBytes(p), stream>>>(p, splits, partials);
    return cudaGetLastError();
  }));
  if (splits > 1) {
    CombineKernel<<<p.num_seqs * p.num_q_heads, 128, 0, stream>>>(p, splits, partials);
    KVTIER_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return cudaSuccess;
}

}  // namespace kvtier::kernels
