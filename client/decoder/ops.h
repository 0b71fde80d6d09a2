// The decoder's dense building blocks on fp32 rows: linear layers through
// BLAS (cblas_sgemm), RMSNorm, rotary embeddings (Hugging Face's rotate-half
// convention) and the SwiGLU gate. Internal to kvtier_decoder.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace kvtier::decoder::ops {

// y[rows][out] = x[rows][in] * w[out][in]^T + beta * y. `w` is in HF's
// [out, in] row-major shape, so no transposed copy is needed.
void Linear(const float* x, int rows, int in, const float* w, int out, float* y, float beta = 0.f);

// y[r] += bias for each of `rows` rows of `out`; nothing when `bias` is empty
// (the projection has none).
void AddBias(float* y, int rows, int out, const std::vector<float>& bias);

// y[r] = x[r] / rms(x[r]) * weight, row by row (y may alias x).
void RmsNorm(const float* x, int rows, int dim, const float* weight, float eps, float* y);

// cos/sin of every (position, frequency) pair, [positions][head_dim / 2]:
// angle = positions[i] * theta^(-2j/head_dim).
void MakeRopeTable(absl::Span<const uint32_t> positions, int head_dim, float theta,
                   std::vector<float>* cos, std::vector<float>* sin);

// Rotates `heads` heads of every row in place: row i uses table row i.
void ApplyRope(float* x, int rows, int heads, int head_dim, const float* cos, const float* sin);

// gate[i] = silu(gate[i]) * up[i] for n elements.
void SwiGlu(float* gate, const float* up, int64_t n);

}  // namespace kvtier::decoder::ops
