// The oracle: plain paged attention with double accumulation and a two-pass
// (exact) softmax, reading elements one at a time through numeric.h. Slow on
// purpose; tests compare every CPU and CUDA kernel against it.
#pragma once

#include <vector>

#include "kvtier/kernels/paged_kv.h"

namespace kvtier::kernels::reference {

// Element i of (position pos, kv head, K or V) of a sequence, dequantized.
double KvElem(const PagedKv& kv, const int32_t* table, uint32_t pos, int half, uint32_t head,
              uint32_t i);

// Attention of one query row q (head_dim) over positions [lo, hi) of kv head
// `head`; writes head_dim outputs.
void AttendRow(const PagedKv& kv, const int32_t* table, uint32_t head, const float* q, uint32_t lo,
               uint32_t hi, double sm_scale, double* out);

// Same contracts as PagedDecodeCpu / PagedPrefillCpu (inputs assumed valid);
// results in double, laid out like p.out.
std::vector<double> Decode(const DecodeParams& p);
std::vector<double> Prefill(const PrefillParams& p);

}  // namespace kvtier::kernels::reference
