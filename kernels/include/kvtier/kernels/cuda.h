// CUDA launchers for the paged kernels: same POD parameter structs as the CPU
// API, with every pointer (arena, q, out, block tables, lengths, workspace)
// in device memory. Only in builds with CUDA (target kvtier_kernels_cuda,
// macro KVTIER_HAVE_CUDA); call only when CudaAvailable().
//
// Usage:
//   size_t n = DecodeWorkspaceBytesCuda(p);   // once; cudaMalloc n bytes
//   KVTIER_CUDA_RETURN_IF_ERROR(PagedDecodeCuda(p, {ws, n}, stream));
// Launchers validate host-visible fields (returning cudaErrorInvalidValue) and
// return the launch status; kernels write NaN rows for out-of-range
// block-table entries instead of reading out of bounds.
#pragma once

#include <cuda_runtime_api.h>

#include "kvtier/kernels/paged_kv.h"

// The one macro every launcher returns through.
#define KVTIER_CUDA_RETURN_IF_ERROR(expr)         \
  do {                                            \
    cudaError_t kvtier_cuda_err_ = (expr);        \
    if (kvtier_cuda_err_ != cudaSuccess) return kvtier_cuda_err_; \
  } while (0)

namespace kvtier::kernels {

// Split-K flash decoding: (sequence, kv head, split) blocks write partial
// softmax states to the workspace; a combine kernel merges them.
size_t DecodeWorkspaceBytesCuda(const DecodeParams& p);
cudaError_t PagedDecodeCuda(const DecodeParams& p, Workspace ws, cudaStream_t stream);

cudaError_t PagedPrefillCuda(const PrefillParams& p, cudaStream_t stream);

// block_table, k, v in device memory.
cudaError_t ScatterKvCuda(const KvCopyParams& p, cudaStream_t stream);
cudaError_t ScatterKvBatchCuda(const KvBatchWriteParams& p, cudaStream_t stream);
cudaError_t GatherKvCuda(const KvCopyParams& p, cudaStream_t stream);

// src_pages / dst_pages in device memory.
cudaError_t ConvertPagesCuda(const PageConvertParams& p, cudaStream_t stream);

}  // namespace kvtier::kernels
