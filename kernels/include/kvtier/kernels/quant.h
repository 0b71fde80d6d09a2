// Whole-page dtype conversion (quantize to int8 / fp8 e4m3 with fp32 scales
// per token per head, dequantize back) and the scalar number conversions the
// kernels use (host and device).
//
// Usage: PageConvertParams c{fp16_kv, int8_kv, src_pages, dst_pages, n};
//        RETURN_IF_ERROR(ConvertPagesCpu(c));
// Error bound of a round trip through int8: |x - x'| <= amax / 254 per
// element (amax = max |x| of that token's head row); fp8 e4m3: relative
// 2^-4 of |x| for normal values, plus amax/448 * 2^-9 absolute near zero.
#pragma once

#include "absl/status/status.h"
#include "kvtier/kernels/numeric.h"
#include "kvtier/kernels/paged_kv.h"

namespace kvtier::kernels {

// src and dst must have the same layers, kv_heads, head_dim,
// tokens_per_page; dtypes may differ. Converts every layer of each page pair.
absl::Status ConvertPagesCpu(const PageConvertParams& p);

}  // namespace kvtier::kernels
