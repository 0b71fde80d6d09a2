// The replay layout: from --page_bytes, or from layers x heads x dims.
#include "tools/stress/stress_options.h"

#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"

namespace kvtier::stress {

absl::StatusOr<Layout> MakeLayout(const StressOptions& o, uint32_t block_tokens) {
  if (o.pages_per_block == 0 || block_tokens % o.pages_per_block != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "--pages_per_block=", o.pages_per_block, " must divide the trace's ", block_tokens,
        "-token blocks"));
  Layout l;
  l.tokens_per_page = block_tokens / o.pages_per_block;
  if (o.page_bytes > 0) {
    // {1 layer, fp16}: page_bytes = 2 (K,V) x heads x tokens x head_dim x 2 bytes.
    const uint64_t per_dim = 4ull * l.tokens_per_page;
    if (o.page_bytes % per_dim != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "--page_bytes=", o.page_bytes, " is not a multiple of ", per_dim,
          " (K and V, fp16, ", l.tokens_per_page, " tokens per page)"));
    l.layers = 1;
    l.kv_heads = 1;
    l.head_dim = static_cast<uint32_t>(o.page_bytes / per_dim);
    l.dtype = Dtype::kFp16;
    // Large pages: more heads rather than one absurdly wide head.
    while (l.head_dim > 256 && l.head_dim % 2 == 0) l.head_dim /= 2, l.kv_heads *= 2;
  } else {
    l.layers = o.layers;
    l.kv_heads = o.kv_heads;
    l.head_dim = o.head_dim;
    ASSIGN_OR_RETURN(l.dtype, ParseDtype(o.dtype));
  }
  RETURN_IF_ERROR(l.Validate());
  return l;
}

}  // namespace kvtier::stress
