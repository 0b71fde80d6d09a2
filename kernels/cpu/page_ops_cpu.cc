// CPU page scatter/gather and whole-page dtype conversion. Quantization
// (int8 / fp8 e4m3) computes one scale per token per head from that row's
// max |x|, so a row quantizes independently of its neighbours.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cpu/worker_pool.h"
#include "kvtier/kernels/attention.h"
#include "kvtier/kernels/numeric.h"
#include "kvtier/kernels/page_ops.h"
#include "kvtier/kernels/quant.h"
#include "kvtier/status_macros.h"

namespace kvtier::kernels {
namespace {

// Stores d fp32 values as one (head, slot) row of the page's dtype.
void WriteRow(const PagedKv& kv, int64_t page, int half, uint32_t head, uint32_t slot,
              const float* src) {
  const uint32_t d = kv.head_dim;
  uint8_t* dst = kv.Data(page, half, head, slot);
  switch (kv.dtype) {
    case KvDtype::kFp32:
      std::memcpy(dst, src, size_t(d) * 4);
      return;
    case KvDtype::kFp16:
    case KvDtype::kBf16:
      for (uint32_t i = 0; i < d; ++i) {
        const uint16_t h = kv.dtype == KvDtype::kFp16 ? FloatToHalf(src[i]) : FloatToBf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvDtype::kFp8E4M3:
    case KvDtype::kInt8: {
      float amax = 0;
      for (uint32_t i = 0; i < d; ++i) amax = std::max(amax, std::fabs(src[i]));
      const float scale = QuantScale(kv.dtype, amax);
      const float inv = scale > 0 ? 1.f / scale : 0.f;
      for (uint32_t i = 0; i < d; ++i) {
        dst[i] = kv.dtype == KvDtype::kInt8 ? uint8_t(FloatToInt8(src[i], inv))
                                            : FloatToFp8E4M3(src[i] * inv);
      }
      std::memcpy(kv.Scales(page, half, head) + 4 * slot, &scale, 4);
      return;
    }
  }
}

void ReadRow(const PagedKv& kv, int64_t page, int half, uint32_t head, uint32_t slot, float* out) {
  const uint8_t* src = kv.Data(page, half, head, slot);
  const float s = kv.HasScales() ? LoadF32(kv.Scales(page, half, head) + 4 * slot) : 1.f;
  for (uint32_t i = 0; i < kv.head_dim; ++i) out[i] = LoadElem(kv.dtype, src, i) * s;
}

absl::Status CheckCopy(const KvCopyParams& p, absl::string_view what) {
  RETURN_IF_ERROR(ValidatePagedKv(p.kv));
  if (p.num_tokens == 0) return absl::OkStatus();
  if (p.block_table == nullptr || p.k == nullptr || p.v == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(what, ": block_table, k and v must be set"));
  const uint64_t end = uint64_t(p.start_pos) + p.num_tokens;
  const uint64_t need = (end + p.kv.tokens_per_page - 1) / p.kv.tokens_per_page;
  if (need > p.num_blocks)
    return absl::InvalidArgumentError(absl::StrCat(what, ": positions up to ", end, " need ", need,
                                                   " blocks but num_blocks = ", p.num_blocks));
  for (uint64_t b = p.start_pos / p.kv.tokens_per_page; b < need; ++b) {
    if (!p.kv.ValidPage(p.block_table[b]))
      return absl::InvalidArgumentError(absl::StrCat(what, ": block_table[", b, "] = ",
                                                     p.block_table[b], " is not a page of the arena (",
                                                     p.kv.num_pages, " pages)"));
  }
  return absl::OkStatus();
}

// Runs fn(token) for every token, in parallel when there is enough work.
template <typename Fn>
void ForTokens(uint32_t n, const PagedKv& kv, Fn fn) {
  const bool big = uint64_t(n) * kv.kv_heads * kv.head_dim >= (1u << 16);
  internal::WorkerPool::Get().Run(n, big ? CpuThreads() : 1,
                                  [&](int, int64_t j) { fn(uint32_t(j)); });
}

// Runs row(page, head, slot, k, v) for every (token, head) of a copy, where
// k and v point at that token's head in the flat [token][head][dim] arrays.
template <typename RowFn>
void ForCopyRows(const KvCopyParams& p, RowFn row) {
  const PagedKv& kv = p.kv;
  const uint64_t stride = uint64_t(kv.kv_heads) * kv.head_dim;
  ForTokens(p.num_tokens, kv, [&](uint32_t j) {
    const uint32_t pos = p.start_pos + j;
    const int64_t page = p.block_table[pos / kv.tokens_per_page];
    for (uint32_t h = 0; h < kv.kv_heads; ++h)
      row(page, h, pos % kv.tokens_per_page, p.k + j * stride + h * kv.head_dim,
          p.v + j * stride + h * kv.head_dim);
  });
}

}  // namespace

absl::Status ScatterKvCpu(const KvCopyParams& p) {
  RETURN_IF_ERROR(CheckCopy(p, "scatter"));
  ForCopyRows(p, [&](int64_t page, uint32_t h, uint32_t slot, const float* k, const float* v) {
    WriteRow(p.kv, page, kKeys, h, slot, k);
    WriteRow(p.kv, page, kValues, h, slot, v);
  });
  return absl::OkStatus();
}

absl::Status ScatterKvBatchCpu(const KvBatchWriteParams& p) {
  RETURN_IF_ERROR(ValidatePagedKv(p.kv));
  const PagedKv& kv = p.kv;
  const uint64_t row = uint64_t(kv.kv_heads) * kv.head_dim;
  for (uint32_t s = 0; s < p.num_seqs; ++s) {
    KvCopyParams c;
    c.kv = kv;
    c.block_table = p.block_tables + uint64_t(s) * p.block_table_stride;
    c.num_blocks = p.block_table_stride;
    if (p.positions == nullptr || p.positions[s] < 0)
      return absl::InvalidArgumentError(absl::StrCat("scatter batch: positions[", s, "] missing or negative"));
    c.start_pos = uint32_t(p.positions[s]);
    c.num_tokens = 1;
    c.k = const_cast<float*>(p.k + s * row);
    c.v = const_cast<float*>(p.v + s * row);
    RETURN_IF_ERROR(ScatterKvCpu(c));
  }
  return absl::OkStatus();
}

absl::Status GatherKvCpu(const KvCopyParams& p) {
  RETURN_IF_ERROR(CheckCopy(p, "gather"));
  ForCopyRows(p, [&](int64_t page, uint32_t h, uint32_t slot, float* k, float* v) {
    ReadRow(p.kv, page, kKeys, h, slot, k);
    ReadRow(p.kv, page, kValues, h, slot, v);
  });
  return absl::OkStatus();
}

absl::Status ConvertPagesCpu(const PageConvertParams& p) {
  RETURN_IF_ERROR(ValidatePagedKv(p.src));
  RETURN_IF_ERROR(ValidatePagedKv(p.dst));
  const PagedKv &a = p.src, &b = p.dst;
  if (a.layers != b.layers || a.kv_heads != b.kv_heads || a.head_dim != b.head_dim ||
      a.tokens_per_page != b.tokens_per_page)
    return absl::InvalidArgumentError("convert pages: src and dst shapes differ");
  for (uint32_t i = 0; i < p.num_pages; ++i) {
    if (!a.ValidPage(p.src_pages[i]) || !b.ValidPage(p.dst_pages[i]))
      return absl::InvalidArgumentError(absl::StrCat("convert pages: pair ", i, " (",
                                                     p.src_pages[i], " -> ", p.dst_pages[i],
                                                     ") is out of range"));
  }
  const int64_t jobs = int64_t(p.num_pages) * a.layers;
  // Conversion is not a hot path: one row buffer per thread slot.
  const int threads = CpuThreads();
  std::vector<float> rows(size_t(threads) * a.head_dim);
  internal::WorkerPool::Get().Run(jobs, threads, [&](int slot, int64_t j) {
    float* row = rows.data() + size_t(slot) * a.head_dim;
    PagedKv src = a, dst = b;
    src.layer = dst.layer = uint32_t(j % a.layers);
    const int64_t sp = p.src_pages[j / a.layers], dp = p.dst_pages[j / a.layers];
    for (int half = 0; half < 2; ++half) {
      for (uint32_t h = 0; h < a.kv_heads; ++h) {
        for (uint32_t t = 0; t < a.tokens_per_page; ++t) {
          ReadRow(src, sp, half, h, t, row);
          WriteRow(dst, dp, half, h, t, row);
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace kvtier::kernels
