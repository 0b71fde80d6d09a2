// CPU paged attention: decode (split-K flash decoding + combine) and causal
// prefill, both built on one online-softmax routine over K/V tiles read
// straight from the pages. Parallel over work items on the WorkerPool, whose
// threads are created once, so a launch neither spawns threads nor allocates.
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "cpu/attention_state.h"
#include "cpu/worker_pool.h"
#include "kvtier/status_macros.h"
#include "kvtier/kernels/attention.h"

namespace kvtier::kernels {
namespace {

using internal::AttendChunk;
using internal::RowSet;
using internal::Scratch;
using internal::ScratchLayout;

constexpr uint32_t kQBlock = 16;          // prefill queries per work item
constexpr uint32_t kMinSplitTokens = 256;  // decode splits never go below this
constexpr uint32_t kMaxSplits = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

size_t AlignUp(size_t n) { return (n + 63) & ~size_t(63); }

uint32_t Group(uint32_t q_heads, uint32_t kv_heads) { return q_heads / kv_heads; }

uint32_t DecodeSplits(const DecodeParams& p, int threads) {
  const uint64_t base = uint64_t(p.num_seqs) * p.kv.kv_heads;
  const uint64_t want = (2ull * threads + base - 1) / std::max<uint64_t>(base, 1);
  const uint64_t by_len = (uint64_t(p.max_seq_len) + kMinSplitTokens - 1) / kMinSplitTokens;
  return uint32_t(std::clamp<uint64_t>(std::min(want, by_len), 1, kMaxSplits));
}

size_t DecodePartialBytes(const DecodeParams& p, uint32_t splits) {
  if (splits <= 1) return 0;
  return AlignUp(uint64_t(p.num_seqs) * p.num_q_heads * splits * (p.kv.head_dim + 2) * 4);
}

absl::Status CheckTable(const PagedKv& kv, const int32_t* table, uint32_t entries,
                        uint64_t tokens, absl::string_view what) {
  const uint64_t need = (tokens + kv.tokens_per_page - 1) / kv.tokens_per_page;
  if (need > entries)
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", tokens, " tokens need ", need,
                                                   " blocks but the table has ", entries));
  for (uint64_t b = 0; b < need; ++b) {
    if (!kv.ValidPage(table[b]))
      return absl::InvalidArgumentError(absl::StrCat(what, ": block_table[", b, "] = ", table[b],
                                                     " is not a page of the arena (",
                                                     kv.num_pages, " pages)"));
  }
  return absl::OkStatus();
}

absl::Status CheckHeads(const PagedKv& kv, uint32_t q_heads) {
  if (q_heads == 0 || q_heads % kv.kv_heads != 0)
    return absl::InvalidArgumentError(absl::StrCat("num_q_heads = ", q_heads,
                                                   " must be a positive multiple of kv_heads = ",
                                                   kv.kv_heads));
  return absl::OkStatus();
}

absl::Status ValidateDecode(const DecodeParams& p) {
  RETURN_IF_ERROR(ValidatePagedKv(p.kv));
  RETURN_IF_ERROR(CheckHeads(p.kv, p.num_q_heads));
  if (p.num_seqs == 0) return absl::OkStatus();
  if (p.q == nullptr || p.out == nullptr || p.block_tables == nullptr || p.seq_lens == nullptr)
    return absl::InvalidArgumentError("decode: q, out, block_tables and seq_lens must be set");
  for (uint32_t s = 0; s < p.num_seqs; ++s) {
    const int32_t len = p.seq_lens[s];
    if (len < 1 || uint32_t(len) > p.max_seq_len)
      return absl::InvalidArgumentError(absl::StrCat("decode: seq_lens[", s, "] = ", len,
                                                     " outside [1, max_seq_len = ",
                                                     p.max_seq_len, "]"));
    RETURN_IF_ERROR(CheckTable(p.kv, p.block_tables + uint64_t(s) * p.block_table_stride,
                               p.block_table_stride, uint64_t(len),
                               absl::StrCat("decode sequence ", s)));
  }
  return absl::OkStatus();
}

// Threads the workspace has room for (0 when not even one).
int ThreadsFitting(size_t ws_bytes, size_t fixed, size_t per_thread) {
  if (ws_bytes < fixed + per_thread) return 0;
  return int(std::min<size_t>((ws_bytes - fixed) / per_thread, size_t(CpuThreads())));
}

absl::Status TooSmall(size_t need, size_t got) {
  return absl::InvalidArgumentError(
      absl::StrCat("workspace of ", got, " bytes is too small: need ", need));
}

// One decode work item: sequence s, kv head h, split k of `splits`.
void DecodeItem(const DecodeParams& p, uint32_t s, uint32_t h, uint32_t k, uint32_t splits,
                float* partials, Scratch& scratch) {
  const uint32_t d = p.kv.head_dim, g = Group(p.num_q_heads, p.kv.kv_heads);
  const uint32_t len = uint32_t(p.seq_lens[s]);
  const uint32_t lo = p.sliding_window > 0 && len > p.sliding_window ? len - p.sliding_window : 0;
  const uint32_t chunk = (len - lo + splits - 1) / splits;
  const uint32_t t0 = std::min(len, lo + k * chunk), t1 = std::min(len, t0 + chunk);
  RowSet rows = scratch.Rows(g);
  for (uint32_t r = 0; r < g; ++r) {
    const uint64_t qh = uint64_t(s) * p.num_q_heads + h * g + r;
    rows.q[r] = p.q + qh * d;
    rows.lo[r] = lo;
    rows.hi[r] = len;
    if (splits > 1) rows.state[r] = partials + (qh * splits + k) * (d + 2);
  }
  rows.Reset(d);
  AttendChunk(p.kv, p.block_tables + uint64_t(s) * p.block_table_stride, h, t0, t1, p.sm_scale,
              rows, scratch);
  if (splits == 1) {
    for (uint32_t r = 0; r < g; ++r) {
      rows.Finish(r, d, p.out + (uint64_t(s) * p.num_q_heads + h * g + r) * d);
    }
  }
}

// out = merge of the splits' (m, l, acc) softmax states of one (seq, q head).
void Combine(const float* part, uint32_t splits, uint32_t d, float* out) {
  float m = kNegInf;
  for (uint32_t k = 0; k < splits; ++k) m = std::max(m, part[k * (d + 2)]);
  float l = 0;
  std::fill(out, out + d, 0.f);
  for (uint32_t k = 0; k < splits; ++k) {
    const float* st = part + k * (d + 2);
    if (st[1] == 0.f) continue;
    const float w = std::exp(st[0] - m);
    l += w * st[1];
    for (uint32_t i = 0; i < d; ++i) out[i] += w * st[2 + i];
  }
  const float inv = l > 0 ? 1.f / l : 0.f;
  for (uint32_t i = 0; i < d; ++i) out[i] *= inv;
}

}  // namespace

size_t DecodeWorkspaceBytesCpu(const DecodeParams& p) {
  if (p.kv.kv_heads == 0 || p.kv.head_dim == 0) return 0;
  const int threads = CpuThreads();
  const uint32_t splits = DecodeSplits(p, threads);
  const ScratchLayout sl(p.kv.head_dim, Group(p.num_q_heads, p.kv.kv_heads));
  return DecodePartialBytes(p, splits) + sl.bytes * threads;
}

absl::Status PagedDecodeCpu(const DecodeParams& p, Workspace ws) {
  RETURN_IF_ERROR(ValidateDecode(p));
  if (p.num_seqs == 0) return absl::OkStatus();
  const uint32_t splits = DecodeSplits(p, CpuThreads());
  const uint32_t d = p.kv.head_dim, h_kv = p.kv.kv_heads;
  const ScratchLayout sl(d, Group(p.num_q_heads, h_kv));
  const size_t fixed = DecodePartialBytes(p, splits);
  const int threads = ThreadsFitting(ws.bytes, fixed, sl.bytes);
  if (threads == 0 || ws.data == nullptr) return TooSmall(fixed + sl.bytes, ws.bytes);
  auto* base = static_cast<uint8_t*>(ws.data);
  float* partials = reinterpret_cast<float*>(base);
  const int64_t items = int64_t(p.num_seqs) * h_kv * splits;
  const int64_t outs = int64_t(p.num_seqs) * p.num_q_heads;
  internal::WorkerPool& pool = internal::WorkerPool::Get();
  pool.Run(items, threads, [&](int slot, int64_t i) {
    Scratch scratch(sl, base + fixed + sl.bytes * slot);
    DecodeItem(p, uint32_t(i / (h_kv * splits)), uint32_t(i / splits % h_kv),
               uint32_t(i % splits), splits, partials, scratch);
  });
  if (splits > 1) {
    pool.Run(outs, threads, [&](int, int64_t o) {
      Combine(partials + o * splits * (d + 2), splits, d, p.out + o * d);
    });
  }
  return absl::OkStatus();
}

size_t PrefillWorkspaceBytesCpu(const PrefillParams& p) {
  if (p.kv.kv_heads == 0 || p.kv.head_dim == 0) return 0;
  const ScratchLayout sl(p.kv.head_dim, kQBlock * Group(p.num_q_heads, p.kv.kv_heads));
  return sl.bytes * CpuThreads();
}

namespace {

// One prefill work item: kv head h, queries [j0, j0 + nq).
void PrefillItem(const PrefillParams& p, uint32_t h, uint32_t j0, uint32_t nq,
                 Scratch& scratch) {
  const uint32_t d = p.kv.head_dim, g = Group(p.num_q_heads, p.kv.kv_heads);
  RowSet rows = scratch.Rows(nq * g);
  uint32_t t0 = std::numeric_limits<uint32_t>::max(), t1 = 0;
  for (uint32_t j = 0; j < nq; ++j) {
    const uint32_t pos = p.cached_len + j0 + j;
    const uint32_t lo =
        p.sliding_window > 0 && pos + 1 > p.sliding_window ? pos + 1 - p.sliding_window : 0;
    t0 = std::min(t0, lo);
    t1 = std::max(t1, pos + 1);
    for (uint32_t r = 0; r < g; ++r) {
      rows.q[j * g + r] = p.q + ((uint64_t(j0) + j) * p.num_q_heads + h * g + r) * d;
      rows.lo[j * g + r] = lo;
      rows.hi[j * g + r] = pos + 1;
    }
  }
  rows.Reset(d);
  AttendChunk(p.kv, p.block_table, h, t0, t1, p.sm_scale, rows, scratch);
  for (uint32_t j = 0; j < nq; ++j) {
    for (uint32_t r = 0; r < g; ++r) {
      rows.Finish(j * g + r, d, p.out + ((uint64_t(j0) + j) * p.num_q_heads + h * g + r) * d);
    }
  }
}

}  // namespace

absl::Status PagedPrefillCpu(const PrefillParams& p, Workspace ws) {
  RETURN_IF_ERROR(ValidatePagedKv(p.kv));
  RETURN_IF_ERROR(CheckHeads(p.kv, p.num_q_heads));
  if (p.num_new == 0) return absl::OkStatus();
  if (p.q == nullptr || p.out == nullptr || p.block_table == nullptr)
    return absl::InvalidArgumentError("prefill: q, out and block_table must be set");
  RETURN_IF_ERROR(CheckTable(p.kv, p.block_table, p.num_blocks,
                             uint64_t(p.cached_len) + p.num_new, "prefill"));
  const uint32_t h_kv = p.kv.kv_heads;
  const ScratchLayout sl(p.kv.head_dim, kQBlock * Group(p.num_q_heads, h_kv));
  const int threads = ThreadsFitting(ws.bytes, 0, sl.bytes);
  if (threads == 0 || ws.data == nullptr) return TooSmall(sl.bytes, ws.bytes);
  const uint32_t blocks = (p.num_new + kQBlock - 1) / kQBlock;
  const int64_t items = int64_t(blocks) * h_kv;
  auto* base = static_cast<uint8_t*>(ws.data);
  // Last query blocks first: they attend to the most tokens (causal).
  internal::WorkerPool::Get().Run(items, threads, [&](int slot, int64_t i) {
    Scratch scratch(sl, base + sl.bytes * slot);
    const uint32_t b = blocks - 1 - uint32_t(i / h_kv);
    const uint32_t j0 = b * kQBlock;
    PrefillItem(p, uint32_t(i % h_kv), j0, std::min(kQBlock, p.num_new - j0), scratch);
  });
  return absl::OkStatus();
}

}  // namespace kvtier::kernels
