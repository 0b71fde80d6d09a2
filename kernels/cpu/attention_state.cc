// The tile loop shared by CPU decode and prefill: converts each K/V tile of
// a page to fp32 once (or reads fp32 pages in place) and folds it into every
// query row that can see it, with the flash-attention online softmax.
#include "cpu/attention_state.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "cpu/cpu_ops.h"

namespace kvtier::kernels::internal {
namespace {

size_t Align(size_t n) { return (n + 63) & ~size_t(63); }

}  // namespace

ScratchLayout::ScratchLayout(uint32_t d_in, uint32_t rows_in) : d(d_in), rows(rows_in) {
  // Two fp32 tiles of about 16 KiB each, a multiple of 8 tokens.
  tile = std::clamp<uint32_t>(4096 / std::max<uint32_t>(d, 1), 8, 64) & ~7u;
  size_t off = 0;
  auto take = [&off](size_t n) {
    const size_t at = off;
    off += Align(n);
    return at;
  };
  kbuf = take(size_t(tile) * d * 4);
  vbuf = take(size_t(tile) * d * 4);
  scores = take(size_t(tile) * 4);
  states = take(size_t(rows) * (d + 2) * 4);
  qptr = take(size_t(rows) * sizeof(float*));
  lo = take(size_t(rows) * 4);
  hi = take(size_t(rows) * 4);
  stateptr = take(size_t(rows) * sizeof(float*));
  bytes = off;
}

RowSet Scratch::Rows(uint32_t n) {
  RowSet rows;
  rows.n = n;
  rows.q = reinterpret_cast<const float**>(base_ + layout_.qptr);
  rows.lo = reinterpret_cast<uint32_t*>(base_ + layout_.lo);
  rows.hi = reinterpret_cast<uint32_t*>(base_ + layout_.hi);
  rows.state = reinterpret_cast<float**>(base_ + layout_.stateptr);
  float* states = reinterpret_cast<float*>(base_ + layout_.states);
  for (uint32_t r = 0; r < n; ++r) rows.state[r] = states + size_t(r) * (layout_.d + 2);
  return rows;
}

void RowSet::Reset(uint32_t d) {
  for (uint32_t r = 0; r < n; ++r) {
    state[r][0] = -std::numeric_limits<float>::infinity();
    std::fill(state[r] + 1, state[r] + 2 + d, 0.f);
  }
}

void RowSet::Finish(uint32_t r, uint32_t d, float* out) const {
  const float l = state[r][1];
  const float inv = l > 0 ? 1.f / l : 0.f;
  for (uint32_t i = 0; i < d; ++i) out[i] = state[r][2 + i] * inv;
}

namespace {

// fp32 rows of one K or V tile: in place for fp32 pages, else converted.
const float* TileRows(const CpuOps& ops, const PagedKv& kv, int64_t page, int kv_half,
                      uint32_t head, uint32_t slot, uint32_t n, float* buf) {
  const uint8_t* data = kv.Data(page, kv_half, head, slot);
  if (kv.dtype == KvDtype::kFp32) return reinterpret_cast<const float*>(data);
  const uint8_t* scales = kv.HasScales() ? kv.Scales(page, kv_half, head) + 4 * slot : nullptr;
  ops.to_f32(kv.dtype, data, scales, n, kv.head_dim, buf);
  return buf;
}

}  // namespace

// Folds one row's visible part [a, a + m) of a tile into its state; K and V
// are fp32 rows (or fp16 rows when the ops read them directly).
template <typename T>
void FoldRow(const CpuOps& ops, const float* q, const T* k, const T* v, uint32_t m, uint32_t d,
             float sm_scale, float* sc, float* st) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    ops.scores_f16(q, k, m, d, sm_scale, sc);
  } else {
    ops.scores(q, k, m, d, sm_scale, sc);
  }
  float mx = st[0];
  for (uint32_t i = 0; i < m; ++i) mx = std::max(mx, sc[i]);
  const float alpha = std::exp(st[0] - mx);  // 0 on the first tile (m = -inf)
  const float sum = ops.exp_sum(sc, m, mx);
  st[1] = st[1] * alpha + sum;
  if constexpr (std::is_same_v<T, uint16_t>) {
    ops.accumulate_f16(st + 2, alpha, sc, v, m, d);
  } else {
    ops.accumulate(st + 2, alpha, sc, v, m, d);
  }
  st[0] = mx;
}

void AttendChunk(const PagedKv& kv, const int32_t* table, uint32_t head, uint32_t t0, uint32_t t1,
                 float sm_scale, RowSet& rows, Scratch& scratch) {
  const CpuOps& ops = ActiveOps();
  const uint32_t d = kv.head_dim, tpp = kv.tokens_per_page;
  const bool direct_f16 = kv.dtype == KvDtype::kFp16 && ops.scores_f16 != nullptr;
  float* sc = scratch.scores();
  for (uint32_t t = t0; t < t1;) {
    const uint32_t slot = t % tpp;
    const uint32_t n = std::min({t1 - t, tpp - slot, scratch.tile()});
    const int64_t page = table[t / tpp];
    const float *k = nullptr, *v = nullptr;
    const uint16_t *kh = nullptr, *vh = nullptr;
    if (direct_f16) {
      kh = reinterpret_cast<const uint16_t*>(kv.Data(page, kKeys, head, slot));
      vh = reinterpret_cast<const uint16_t*>(kv.Data(page, kValues, head, slot));
    } else {
      k = TileRows(ops, kv, page, kKeys, head, slot, n, scratch.kbuf());
      v = TileRows(ops, kv, page, kValues, head, slot, n, scratch.vbuf());
    }
    for (uint32_t r = 0; r < rows.n; ++r) {
      const uint32_t a = std::max(rows.lo[r], t), b = std::min(rows.hi[r], t + n);
      if (a >= b) continue;
      const size_t off = size_t(a - t) * d;
      if (direct_f16) {
        FoldRow(ops, rows.q[r], kh + off, vh + off, b - a, d, sm_scale, sc, rows.state[r]);
      } else {
        FoldRow(ops, rows.q[r], k + off, v + off, b - a, d, sm_scale, sc, rows.state[r]);
      }
    }
    t += n;
  }
}

}  // namespace kvtier::kernels::internal
