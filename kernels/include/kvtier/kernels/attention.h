// Paged cached-attention kernels: the host API. CPU versions run here;
// CUDA versions (same parameter structs) are declared in cuda.h and only
// callable when CudaAvailable().
//
// Usage (decode step of a batch, one layer, all buffers fp32):
//   using namespace kvtier::kernels;
//   PagedKv kv = MakePagedKv(layout, arena_base, arena_pages);  // once
//   kv.layer = l;
//   ScatterKvCpu({kv, table, nblocks, pos, 1, k_row, v_row});   // write new K/V first
//   DecodeParams p{kv, num_seqs, q_heads, 1/sqrtf(head_dim), 0, q, out,
//                  tables, stride, lens, max_len};
//   std::vector<uint8_t> ws(DecodeWorkspaceBytesCpu(p));        // once, worst case
//   absl::Status s = PagedDecodeCpu(p, {ws.data(), ws.size()});
// Thread safety: calls are independent; each call must have its own
// workspace. Kernels spread work over a process-wide pool of blocking worker
// threads (hardware_concurrency(), or KVTIER_KERNEL_THREADS); concurrent
// calls take turns on the pool.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kvtier/kernels/paged_kv.h"
#include "kvtier/layout.h"

namespace kvtier::kernels {

// The kernels' view of `layout` over an arena of `num_pages` pages at
// `arena` (layer 0 selected). KvDtype values equal kvtier::Dtype values.
PagedKv MakePagedKv(const Layout& layout, void* arena, uint64_t num_pages);
KvDtype ToKvDtype(Dtype d);

// Checks the layout fields (non-zero, known dtype, layer < layers) and that
// arena is non-null. Named field and value in the message.
absl::Status ValidatePagedKv(const PagedKv& kv);

// True when built with CUDA and cudaGetDeviceCount() reports >= 1 device.
// Always false in a CPU-only build (-DKVTIER_CUDA=OFF).
bool CudaAvailable();

// Threads the CPU kernels use, the caller included (>= 1).
int CpuThreads();

// Bytes of workspace PagedDecodeCpu needs for `p` (uses num_seqs,
// num_q_heads, kv shape and max_seq_len; pointers are not read). Monotone in
// those, so size once for the largest batch and longest sequence.
size_t DecodeWorkspaceBytesCpu(const DecodeParams& p);
// Decode attention (see DecodeParams). Flash-decoding: each (sequence, kv
// head) is split into chunks processed in parallel with an online softmax,
// then combined. Errors: InvalidArgument naming the bad field (block-table
// entry out of range, seq_len 0 or > max_seq_len, too few blocks, workspace
// too small, num_q_heads not a multiple of kv_heads).
absl::Status PagedDecodeCpu(const DecodeParams& p, Workspace ws);

// Bytes of workspace PagedPrefillCpu needs (monotone in num_q_heads and the
// kv shape; independent of lengths).
size_t PrefillWorkspaceBytesCpu(const PrefillParams& p);
// Causal prefill attention (see PrefillParams).
absl::Status PagedPrefillCpu(const PrefillParams& p, Workspace ws);

// Which CPU code path runs: "avx2" (AVX2+FMA+F16C, chosen at run time with
// __builtin_cpu_supports) or "portable".
const char* CpuKernelIsa();
// Forces the portable path (tests compare both); true = portable only.
void ForcePortableCpuKernels(bool portable);

}  // namespace kvtier::kernels
