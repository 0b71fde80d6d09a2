// The CUDA decoder's small kernels (everything but GEMMs and attention):
// weight conversion and hash-seeded random init, embedding rows, RMSNorm,
// RoPE, SwiGLU, bias. Host launchers on one stream, returning cudaError_t
// like kernels/include/kvtier/kernels/cuda.h. Internal to kvtier_decoder.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvtier::decoder::cuda {

// Element type of weight matrices and GEMM inputs on the device (same
// values as TensorDtype: kF32, kF16, kBF16).
enum class Elem : int { kF32 = 0, kF16 = 1, kBF16 = 2 };
inline int ElemBytes(Elem e) { return e == Elem::kF32 ? 4 : 2; }

// dst[i] = src[i] rounded to `dst_type` (round to nearest even). n elements.
cudaError_t ConvertF32(const float* src, void* dst, Elem dst_type, int64_t n, cudaStream_t s);

// dst[i] ~ N(0, std) from a counter-based hash of (seed, tensor, i): the same
// numbers on every GPU and launch shape, nothing stored on the host.
cudaError_t FillNormal(void* dst, Elem type, int64_t n, uint64_t seed, uint64_t tensor, float std,
                       cudaStream_t s);
cudaError_t FillConstF32(float* dst, int64_t n, float value, cudaStream_t s);

// x[r] = table[tokens[r]] as fp32 ([rows][hidden]); tokens in device memory.
cudaError_t EmbedRows(const void* table, Elem type, const int32_t* tokens, int rows, int hidden,
                      float* x, cudaStream_t s);

// y[i] = x[src_rows[i]] / rms * w for `rows` output rows; src_rows null:
// row i. Sum of squares in double, as on the CPU.
cudaError_t RmsNorm(const float* x, const int32_t* src_rows, int rows, int dim, const float* w,
                    float eps, float* y, cudaStream_t s);

// Hugging Face rotate-half RoPE in place on `heads` heads of each row; angle
// = positions[r] * theta^(-2j/head_dim), computed in double like the CPU.
cudaError_t Rope(float* x, const int32_t* positions, int rows, int heads, int head_dim, float theta,
                 cudaStream_t s);

// gate[i] = silu(gate[i]) * up[i].
cudaError_t SwiGlu(float* gate, const float* up, int64_t n, cudaStream_t s);

// y[r][i] += bias[i] (no-op when bias is null).
cudaError_t AddBias(float* y, int rows, int out, const float* bias, cudaStream_t s);

}  // namespace kvtier::decoder::cuda
