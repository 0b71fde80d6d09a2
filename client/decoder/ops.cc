// Dense ops of the decoder. Linear layers are BLAS calls (OpenBLAS on the
// CPU): hand-written matmuls would be slower and are not what an inference
// engine runs.
#include "ops.h"

#include <cblas.h>

#include <cmath>

namespace kvtier::decoder::ops {

void Linear(const float* x, int rows, int in, const float* w, int out, float* y, float beta) {
  if (rows == 1) {  // one token (decode): a matrix-vector product
    cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x, 1, beta, y, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, x, in, w, in, beta, y, out);
}

void AddBias(float* y, int rows, int out, const std::vector<float>& bias) {
  if (bias.empty()) return;
  for (int r = 0; r < rows; ++r) {
    float* yr = y + int64_t(r) * out;
    for (int i = 0; i < out; ++i) yr[i] += bias[i];
  }
}

void RmsNorm(const float* x, int rows, int dim, const float* weight, float eps, float* y) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + int64_t(r) * dim;
    float* yr = y + int64_t(r) * dim;
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(xr[i]) * xr[i];
    const float inv = float(1.0 / std::sqrt(ss / dim + eps));
    for (int i = 0; i < dim; ++i) yr[i] = xr[i] * inv * weight[i];
  }
}

void MakeRopeTable(absl::Span<const uint32_t> positions, int head_dim, float theta,
                   std::vector<float>* cos, std::vector<float>* sin) {
  const int half = head_dim / 2;
  cos->resize(positions.size() * half);
  sin->resize(positions.size() * half);
  std::vector<double> inv_freq(half);
  for (int j = 0; j < half; ++j) inv_freq[j] = std::pow(double(theta), -2.0 * j / head_dim);
  for (size_t i = 0; i < positions.size(); ++i) {
    for (int j = 0; j < half; ++j) {
      const double a = double(positions[i]) * inv_freq[j];
      (*cos)[i * half + j] = float(std::cos(a));
      (*sin)[i * half + j] = float(std::sin(a));
    }
  }
}

void ApplyRope(float* x, int rows, int heads, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int r = 0; r < rows; ++r) {
    const float* c = cos + int64_t(r) * half;
    const float* s = sin + int64_t(r) * half;
    for (int h = 0; h < heads; ++h) {
      float* v = x + (int64_t(r) * heads + h) * head_dim;
      for (int j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half];
        v[j] = a * c[j] - b * s[j];
        v[j + half] = b * c[j] + a * s[j];
      }
    }
  }
}

void SwiGlu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace kvtier::decoder::ops
