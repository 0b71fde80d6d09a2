// Internal: the online-softmax state of a set of query rows that share one
// kv head, the per-thread scratch it lives in, and AttendChunk, the loop over
// K/V tiles of the pages that both decode and prefill run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/kernels/paged_kv.h"

namespace kvtier::kernels::internal {

// Byte offsets of one thread's scratch for `rows` query rows of head_dim d.
struct ScratchLayout {
  ScratchLayout(uint32_t d, uint32_t rows);
  uint32_t d, rows, tile;  // tile: tokens per K/V tile (fp32 copies stay in L1/L2)
  size_t kbuf, vbuf, scores, states, qptr, lo, hi, stateptr, bytes;
};

// Query rows with their visible ranges and softmax state
// state[r] = {running max m, running sum l, acc[d]}.
struct RowSet {
  uint32_t n = 0;
  const float** q = nullptr;
  uint32_t* lo = nullptr;  // row r sees positions [lo[r], hi[r])
  uint32_t* hi = nullptr;
  float** state = nullptr;
  void Reset(uint32_t d);
  // out = acc / l (zeros when the row saw nothing).
  void Finish(uint32_t r, uint32_t d, float* out) const;
};

class Scratch {
 public:
  Scratch(const ScratchLayout& layout, uint8_t* base) : layout_(layout), base_(base) {}
  // A row set of n <= layout.rows rows whose states point into this scratch.
  RowSet Rows(uint32_t n);
  float* kbuf() const { return reinterpret_cast<float*>(base_ + layout_.kbuf); }
  float* vbuf() const { return reinterpret_cast<float*>(base_ + layout_.vbuf); }
  float* scores() const { return reinterpret_cast<float*>(base_ + layout_.scores); }
  uint32_t tile() const { return layout_.tile; }

 private:
  const ScratchLayout& layout_;
  uint8_t* base_;
};

// Folds positions [t0, t1) of a sequence (its block table `table`, kv head
// `head`) into every row's state. The table must cover t1 tokens with valid
// pages (callers validate).
void AttendChunk(const PagedKv& kv, const int32_t* table, uint32_t head, uint32_t t0, uint32_t t1,
                 float sm_scale, RowSet& rows, Scratch& scratch);

}  // namespace kvtier::kernels::internal
