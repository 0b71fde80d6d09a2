// Page scatter/gather: move fp32 K/V rows of one sequence and one layer into
// (or out of) its pages, converting to (from) the page dtype.
//
// Usage (after computing k, v for tokens [pos, pos + n) of layer l):
//   KvCopyParams c{kv, block_table, num_blocks, pos, n, k, v};  // kv.layer = l
//   RETURN_IF_ERROR(ScatterKvCpu(c));
// Thread safety: concurrent calls must not write the same (page, layer).
#pragma once

#include "absl/status/status.h"
#include "kvtier/kernels/paged_kv.h"

namespace kvtier::kernels {

// Writes k/v rows into the pages (quantizing for int8/fp8 with a fresh scale
// per token per head). InvalidArgument if a needed block-table entry is
// missing or out of range, or a pointer is null.
absl::Status ScatterKvCpu(const KvCopyParams& p);

// One token per sequence (decode step of a batch); same errors.
absl::Status ScatterKvBatchCpu(const KvBatchWriteParams& p);

// Reads (dequantizes) tokens from the pages into k/v rows.
absl::Status GatherKvCpu(const KvCopyParams& p);

}  // namespace kvtier::kernels
