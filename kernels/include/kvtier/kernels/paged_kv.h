// The paged KV layout as a POD struct with bounds-safe accessors, plus the
// POD parameter structs of every kernel. Host- and device-safe (no absl, no
// STL), so the CPU kernels, the CUDA kernels and the decoder share one view.
//
// Usage:
//   kvtier::kernels::PagedKv kv = kvtier::kernels::MakePagedKv(layout, arena, n);
//   kv.layer = 3;                                  // kernels work on one layer
//   const uint8_t* k = kv.Data(page, kKeys, head, token);  // head_dim elements
//
// Page layout (exactly kvtier::Layout; see api/layout.cc LayerBytes()):
//   arena   = pages back to back; page p starts at arena + p * PageBytes().
//   page    = layer 0 | layer 1 | ... (each LayerBytes() = 2 * HalfBytes()).
//   layer   = K half | V half.
//   half    = data   [kv_heads][tokens_per_page][head_dim] elements of dtype,
//             then, for int8 / fp8 only,
//             scales [kv_heads][tokens_per_page] fp32 (one per token per head;
//             element value = stored value * scale).
//   So HalfBytes() = kv_heads * tokens_per_page * (head_dim * ElemBytes()
//   + (HasScales() ? 4 : 0)), and 2 * HalfBytes() == Layout::LayerBytes().
//   Token t of a sequence lives in block t / tokens_per_page of its block
//   table, at slot t % tokens_per_page.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define KVTIER_HD __host__ __device__ __forceinline__
#else
#define KVTIER_HD inline
#endif

namespace kvtier::kernels {

// Same numeric values as kvtier::Dtype (api/include/kvtier/layout.h); kept
// separate so this header compiles under nvcc without absl.
enum class KvDtype : uint32_t { kFp32 = 1, kFp16 = 2, kBf16 = 3, kFp8E4M3 = 4, kInt8 = 5 };

inline constexpr int kKeys = 0;
inline constexpr int kValues = 1;

KVTIER_HD uint32_t KvDtypeBytes(KvDtype d) {
  switch (d) {
    case KvDtype::kFp32: return 4;
    case KvDtype::kFp16:
    case KvDtype::kBf16: return 2;
    case KvDtype::kFp8E4M3:
    case KvDtype::kInt8: return 1;
  }
  return 0;
}

KVTIER_HD bool KvDtypeHasScales(KvDtype d) {
  return d == KvDtype::kFp8E4M3 || d == KvDtype::kInt8;
}

// One layer's view of an arena of pages. `arena` may be host or device
// memory; the struct is copied by value into kernels. The arena is borrowed.
struct PagedKv {
  void* arena = nullptr;
  uint64_t num_pages = 0;  // pages in the arena; block-table entries must be < this
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t tokens_per_page = 0;
  KvDtype dtype = KvDtype::kFp16;
  uint32_t layer = 0;  // the layer a kernel reads or writes

  KVTIER_HD uint32_t ElemBytes() const { return KvDtypeBytes(dtype); }
  KVTIER_HD bool HasScales() const { return KvDtypeHasScales(dtype); }
  KVTIER_HD uint64_t HeadDataBytes() const {
    return uint64_t(tokens_per_page) * head_dim * ElemBytes();
  }
  KVTIER_HD uint64_t DataBytes() const { return HeadDataBytes() * kv_heads; }
  KVTIER_HD uint64_t HalfBytes() const {
    return DataBytes() + (HasScales() ? uint64_t(kv_heads) * tokens_per_page * 4 : 0);
  }
  KVTIER_HD uint64_t LayerBytes() const { return 2 * HalfBytes(); }
  KVTIER_HD uint64_t PageBytes() const { return LayerBytes() * layers; }
  KVTIER_HD bool ValidPage(int64_t page) const {
    return page >= 0 && uint64_t(page) < num_pages;
  }
  // Start of the K (kv == kKeys) or V half of `layer` in `page`; nullptr when
  // the page or layer is out of range.
  KVTIER_HD uint8_t* Half(int64_t page, int kv) const {
    if (!ValidPage(page) || layer >= layers) return nullptr;
    return static_cast<uint8_t*>(arena) + uint64_t(page) * PageBytes() +
           uint64_t(layer) * LayerBytes() + (kv == kKeys ? 0 : HalfBytes());
  }
  // head_dim elements of (head, slot); nullptr when out of range.
  KVTIER_HD uint8_t* Data(int64_t page, int kv, uint32_t head, uint32_t slot) const {
    uint8_t* h = Half(page, kv);
    if (h == nullptr || head >= kv_heads || slot >= tokens_per_page) return nullptr;
    return h + uint64_t(head) * HeadDataBytes() + uint64_t(slot) * head_dim * ElemBytes();
  }
  // tokens_per_page fp32 scales of `head` (int8 / fp8 only, else nullptr).
  // May be only 1-byte aligned when kv_heads*tokens_per_page*head_dim is not
  // a multiple of 4: the CPU reads it with memcpy; the CUDA launchers reject
  // such layouts.
  KVTIER_HD uint8_t* Scales(int64_t page, int kv, uint32_t head) const {
    uint8_t* h = Half(page, kv);
    if (h == nullptr || !HasScales() || head >= kv_heads) return nullptr;
    return h + DataBytes() + uint64_t(head) * tokens_per_page * 4;
  }
};

// Decode: one new query per sequence, many sequences. The new token's K/V
// must already be written (ScatterKv*) at position seq_lens[i] - 1; query i
// attends to positions [max(0, seq_len - window), seq_len) of sequence i.
struct DecodeParams {
  PagedKv kv;
  uint32_t num_seqs = 0;
  uint32_t num_q_heads = 0;     // multiple of kv.kv_heads (GQA/MQA); q head h uses kv head h / (num_q_heads / kv_heads)
  float sm_scale = 0.f;         // softmax scale, usually 1/sqrt(head_dim)
  uint32_t sliding_window = 0;  // 0 = full attention; else each query sees its last `window` positions (itself included)
  const float* q = nullptr;     // [num_seqs][num_q_heads][head_dim]
  float* out = nullptr;         // [num_seqs][num_q_heads][head_dim]
  const int32_t* block_tables = nullptr;  // [num_seqs][block_table_stride] page indices
  uint32_t block_table_stride = 0;
  const int32_t* seq_lens = nullptr;      // [num_seqs], each in [1, max_seq_len]
  uint32_t max_seq_len = 0;     // bound of every seq_len (sizes split-K; checked on the CPU)
};

// Prefill (or chunked prefill) of one sequence: num_new query tokens at
// positions [cached_len, cached_len + num_new), causal; their K/V must
// already be written into the pages. Query j sees positions
// [max(0, p - window + 1), p] with p = cached_len + j.
struct PrefillParams {
  PagedKv kv;
  uint32_t num_q_heads = 0;
  float sm_scale = 0.f;
  uint32_t sliding_window = 0;
  const float* q = nullptr;     // [num_new][num_q_heads][head_dim]
  float* out = nullptr;         // [num_new][num_q_heads][head_dim]
  const int32_t* block_table = nullptr;  // >= ceil((cached_len + num_new) / tokens_per_page) entries
  uint32_t num_blocks = 0;      // entries in block_table
  uint32_t cached_len = 0;
  uint32_t num_new = 0;
};

// Write (scatter) or read (gather) num_tokens tokens of one sequence and one
// layer at positions [start_pos, start_pos + num_tokens). Rows are fp32
// [num_tokens][kv_heads][head_dim] (the natural k_proj/v_proj output).
// Writing converts to the page dtype; int8/fp8 get a fresh per-token-per-head
// scale (amax / 127 for int8, amax / 448 for fp8 e4m3). Reading dequantizes.
struct KvCopyParams {
  PagedKv kv;
  const int32_t* block_table = nullptr;
  uint32_t num_blocks = 0;
  uint32_t start_pos = 0;
  uint32_t num_tokens = 0;
  float* k = nullptr;  // source when writing (treated as const), destination when reading
  float* v = nullptr;
};

// Batched decode write: sequence i writes one token (k/v rows
// [num_seqs][kv_heads][head_dim]) at position positions[i] of its own block
// table (block_tables[i * block_table_stride ...]).
struct KvBatchWriteParams {
  PagedKv kv;
  uint32_t num_seqs = 0;
  const int32_t* block_tables = nullptr;
  uint32_t block_table_stride = 0;
  const int32_t* positions = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
};

// Converts whole pages (all layers) between dtypes of the same shape:
// quantize (fp32/fp16/bf16 -> int8/fp8), dequantize, or any other pair.
// src.layer / dst.layer are ignored. src_pages[i] -> dst_pages[i].
struct PageConvertParams {
  PagedKv src;
  PagedKv dst;
  const int32_t* src_pages = nullptr;
  const int32_t* dst_pages = nullptr;
  uint32_t num_pages = 0;
};

// Caller-owned scratch memory so a launch allocates nothing.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

}  // namespace kvtier::kernels
