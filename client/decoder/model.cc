// The decoder's forward pass: embeddings, then per layer RMSNorm -> q/k/v
// (BLAS, + biases when the checkpoint has them) -> RoPE -> K/V scatter into the pages -> paged attention (kernels)
// -> o_proj residual -> RMSNorm -> SwiGLU MLP residual; final norm and the
// logits of the rows the caller wants.
#include "kvtier/decoder/model.h"

#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "kvtier/decoder/device.h"
#include "kvtier/kernels/attention.h"
#include "kvtier/kernels/page_ops.h"
#include "kvtier/status_macros.h"
#include "ops.h"

namespace kvtier::decoder {
namespace {

// The kernels check every block-table entry against the arena, but never read
// a page wholly behind the sliding window; entries the window freed (and the
// padding of shorter tables in a batch) are pointed at page 0 to pass that check.
void FillFreed(std::vector<int32_t>::iterator begin, std::vector<int32_t>::iterator end) {
  for (auto it = begin; it != end; ++it)
    if (*it == kNoPage) *it = 0;
}

}  // namespace

Layout KvLayoutFor(const ModelConfig& c, uint32_t tokens_per_page, Dtype dtype) {
  return Layout{c.num_hidden_layers, c.num_key_value_heads, c.head_dim, tokens_per_page, dtype};
}

Model::Model(const ModelWeights* w, PagedKvCache* cache, std::unique_ptr<DeviceForward> device)
    : w_(*w), cache_(*cache), device_(std::move(device)) {}

Model::~Model() = default;

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const ModelWeights* weights,
                                                     PagedKvCache* cache,
                                                     std::unique_ptr<DeviceForward> device) {
  RETURN_IF_ERROR(weights->config.Validate());
  const ModelConfig& c = weights->config;
  const Layout& l = cache->layout();
  if (l.layers != c.num_hidden_layers || l.kv_heads != c.num_key_value_heads || l.head_dim != c.head_dim)
    return absl::InvalidArgumentError(absl::StrCat("kv cache layout ", l.DebugString(),
                                                   " does not match the model (layers ",
                                                   c.num_hidden_layers, ", kv_heads ",
                                                   c.num_key_value_heads, ", head_dim ", c.head_dim, ")"));
  return std::unique_ptr<Model>(new Model(weights, cache, std::move(device)));
}

kernels::Workspace Model::Scratch(size_t bytes) {
  if (ws_.size() < bytes) ws_.resize(bytes);
  return kernels::Workspace{ws_.data(), ws_.size()};
}

absl::Status Model::CheckChunks(absl::Span<const ForwardChunk> chunks) {
  const ModelConfig& c = w_.config;
  absl::flat_hash_set<SeqId> seen;
  for (const ForwardChunk& ch : chunks) {
    if (!cache_.HasSequence(ch.seq)) return absl::NotFoundError(absl::StrCat("forward: no sequence ", ch.seq));
    if (!seen.insert(ch.seq).second)
      return absl::InvalidArgumentError(absl::StrCat("forward: sequence ", ch.seq, " appears twice"));
    if (ch.tokens.empty()) return absl::InvalidArgumentError(absl::StrCat("forward: empty chunk for sequence ", ch.seq));
    const uint64_t end = uint64_t(cache_.Length(ch.seq)) + ch.tokens.size();
    if (end > c.max_position_embeddings)
      return absl::OutOfRangeError(absl::StrCat("forward: sequence ", ch.seq, " would reach ", end,
                                                " tokens, past max_position_embeddings ",
                                                c.max_position_embeddings));
    for (size_t i = 0; i < ch.tokens.size(); ++i)
      if (ch.tokens[i] >= c.vocab_size)
        return absl::InvalidArgumentError(absl::StrCat("forward: token ", ch.tokens[i], " at index ", i,
                                                       " is outside the vocabulary (", c.vocab_size, ")"));
  }
  return absl::OkStatus();
}

absl::Status Model::Forward(absl::Span<const ForwardChunk> chunks, std::vector<float>* logits,
                            bool all_logits, const LayerGate& gate) {
  RETURN_IF_ERROR(CheckChunks(chunks));
  rows_ = 0;
  for (const ForwardChunk& ch : chunks) rows_ += int(ch.tokens.size());
  // Reserve first so an arena that is too small fails before any work.
  size_t reserved = 0;
  absl::Status st;
  for (; reserved < chunks.size(); ++reserved)
    if (st = cache_.Reserve(chunks[reserved].seq, uint32_t(chunks[reserved].tokens.size())); !st.ok()) break;
  if (!st.ok()) {
    for (size_t i = 0; i < reserved; ++i)  // give back what was taken
      (void)cache_.Truncate(chunks[i].seq, cache_.Length(chunks[i].seq));
    return st;
  }
  positions_.clear();
  start_.clear();
  for (const ForwardChunk& ch : chunks) {
    start_.push_back(cache_.Length(ch.seq));
    for (size_t i = 0; i < ch.tokens.size(); ++i) positions_.push_back(start_.back() + uint32_t(i));
  }
  if (st = RunLayers(chunks, all_logits, gate, logits); !st.ok()) {
    for (const ForwardChunk& ch : chunks) (void)cache_.Truncate(ch.seq, cache_.Length(ch.seq));
    return st;
  }
  for (const ForwardChunk& ch : chunks) RETURN_IF_ERROR(cache_.Commit(ch.seq, uint32_t(ch.tokens.size())));
  return absl::OkStatus();
}

absl::Status Model::RunLayers(absl::Span<const ForwardChunk> chunks, bool all_logits,
                              const LayerGate& gate, std::vector<float>* logits) {
  const ModelConfig& c = w_.config;
  if (device_ != nullptr) {
    // A device pass reads every layer's pages at its own pace: wait for all.
    for (uint32_t l = 0; gate && l < c.num_hidden_layers; ++l) RETURN_IF_ERROR(gate(l));
    return device_->Forward(chunks, start_, all_logits, logits);
  }
  const int hidden = int(c.hidden_size);
  x_.resize(size_t(rows_) * hidden);
  float* x = x_.data();
  for (const ForwardChunk& ch : chunks)
    for (uint32_t t : ch.tokens) {
      std::memcpy(x, w_.embed.data() + size_t(t) * hidden, hidden * sizeof(float));
      x += hidden;
    }
  for (uint32_t l = 0; l < c.num_hidden_layers; ++l) RETURN_IF_ERROR(Layer(l, chunks, gate));
  Logits(chunks, all_logits, logits);
  return absl::OkStatus();
}

absl::Status Model::Layer(uint32_t l, absl::Span<const ForwardChunk> chunks,
                          const LayerGate& gate) {
  const ModelConfig& c = w_.config;
  const LayerWeights& lw = w_.layers[l];
  const int hidden = int(c.hidden_size), qd = int(c.num_attention_heads * c.head_dim),
            kvd = int(c.num_key_value_heads * c.head_dim), ff = int(c.intermediate_size);
  h_.resize(size_t(rows_) * hidden);
  q_.resize(size_t(rows_) * qd);
  k_.resize(size_t(rows_) * kvd);
  v_.resize(size_t(rows_) * kvd);
  ops::RmsNorm(x_.data(), rows_, hidden, lw.input_norm.data(), c.rms_norm_eps, h_.data());
  ops::Linear(h_.data(), rows_, hidden, lw.q_proj.data(), qd, q_.data());
  ops::Linear(h_.data(), rows_, hidden, lw.k_proj.data(), kvd, k_.data());
  ops::Linear(h_.data(), rows_, hidden, lw.v_proj.data(), kvd, v_.data());
  ops::AddBias(q_.data(), rows_, qd, lw.q_bias);  // before RoPE, as HF's q_proj(x)
  ops::AddBias(k_.data(), rows_, kvd, lw.k_bias);
  ops::AddBias(v_.data(), rows_, kvd, lw.v_bias);
  if (l == 0) ops::MakeRopeTable(positions_, int(c.head_dim), c.rope_theta, &rope_cos_, &rope_sin_);
  ops::ApplyRope(q_.data(), rows_, int(c.num_attention_heads), int(c.head_dim), rope_cos_.data(),
                 rope_sin_.data());
  ops::ApplyRope(k_.data(), rows_, int(c.num_key_value_heads), int(c.head_dim), rope_cos_.data(),
                 rope_sin_.data());
  // The projections above need no cache; the scatter below may rewrite a
  // slot of a restored page, so it must follow that page's layer l.
  if (gate) RETURN_IF_ERROR(gate(l));
  RETURN_IF_ERROR(Attention(l, chunks));
  ops::Linear(attn_.data(), rows_, qd, lw.o_proj.data(), hidden, x_.data(), /*beta=*/1.0f);
  ops::AddBias(x_.data(), rows_, hidden, lw.o_bias);

  ops::RmsNorm(x_.data(), rows_, hidden, lw.post_norm.data(), c.rms_norm_eps, h_.data());
  gate_.resize(size_t(rows_) * ff);
  up_.resize(size_t(rows_) * ff);
  ops::Linear(h_.data(), rows_, hidden, lw.gate_proj.data(), ff, gate_.data());
  ops::Linear(h_.data(), rows_, hidden, lw.up_proj.data(), ff, up_.data());
  ops::AddBias(gate_.data(), rows_, ff, lw.gate_bias);
  ops::AddBias(up_.data(), rows_, ff, lw.up_bias);
  ops::SwiGlu(gate_.data(), up_.data(), int64_t(rows_) * ff);
  ops::Linear(gate_.data(), rows_, ff, lw.down_proj.data(), hidden, x_.data(), /*beta=*/1.0f);
  ops::AddBias(x_.data(), rows_, hidden, lw.down_bias);
  return absl::OkStatus();
}

absl::Status Model::Attention(uint32_t l, absl::Span<const ForwardChunk> chunks) {
  const ModelConfig& c = w_.config;
  const int kvd = int(c.num_key_value_heads * c.head_dim);
  kernels::PagedKv kv = cache_.View();
  kv.layer = l;
  size_t row = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::vector<int32_t>& table = cache_.BlockTable(chunks[i].seq);
    const uint32_t n = uint32_t(chunks[i].tokens.size());
    kernels::KvCopyParams p{kv, table.data(), uint32_t(table.size()), start_[i], n,
                            k_.data() + row * kvd, v_.data() + row * kvd};
    RETURN_IF_ERROR(kernels::ScatterKvCpu(p));
    row += n;
  }
  attn_.resize(size_t(rows_) * c.num_attention_heads * c.head_dim);
  if (size_t(rows_) == chunks.size()) return Decode(kv, chunks);
  return Prefill(kv, chunks);
}

absl::Status Model::Decode(const kernels::PagedKv& kv, absl::Span<const ForwardChunk> chunks) {
  const ModelConfig& c = w_.config;
  uint32_t stride = 1, max_len = 1;
  for (const ForwardChunk& ch : chunks)
    stride = std::max(stride, uint32_t(cache_.BlockTable(ch.seq).size()));
  tables_.assign(size_t(stride) * chunks.size(), kNoPage);
  lens_.resize(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::vector<int32_t>& t = cache_.BlockTable(chunks[i].seq);
    std::copy(t.begin(), t.end(), tables_.begin() + i * stride);
    FillFreed(tables_.begin() + i * stride, tables_.begin() + (i + 1) * stride);
    lens_[i] = int32_t(start_[i] + 1);
    max_len = std::max(max_len, start_[i] + 1);
  }
  kernels::DecodeParams p{kv, uint32_t(chunks.size()), c.num_attention_heads,
                          1.0f / std::sqrt(float(c.head_dim)), cache_.sliding_window(),
                          q_.data(), attn_.data(), tables_.data(), stride, lens_.data(), max_len};
  return kernels::PagedDecodeCpu(p, Scratch(kernels::DecodeWorkspaceBytesCpu(p)));
}

absl::Status Model::Prefill(const kernels::PagedKv& kv, absl::Span<const ForwardChunk> chunks) {
  const ModelConfig& c = w_.config;
  const size_t qd = size_t(c.num_attention_heads) * c.head_dim;
  size_t row = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::vector<int32_t>& t = cache_.BlockTable(chunks[i].seq);
    tables_.assign(t.begin(), t.end());
    FillFreed(tables_.begin(), tables_.end());
    const uint32_t n = uint32_t(chunks[i].tokens.size());
    kernels::PrefillParams p{kv, c.num_attention_heads, 1.0f / std::sqrt(float(c.head_dim)),
                             cache_.sliding_window(), q_.data() + row * qd, attn_.data() + row * qd,
                             tables_.data(), uint32_t(t.size()), start_[i], n};
    RETURN_IF_ERROR(kernels::PagedPrefillCpu(p, Scratch(kernels::PrefillWorkspaceBytesCpu(p))));
    row += n;
  }
  return absl::OkStatus();
}

void Model::Logits(absl::Span<const ForwardChunk> chunks, bool all, std::vector<float>* logits) {
  const ModelConfig& c = w_.config;
  const int hidden = int(c.hidden_size);
  int out_rows = all ? rows_ : int(chunks.size());
  h_.resize(size_t(out_rows) * hidden);
  if (all) {
    ops::RmsNorm(x_.data(), rows_, hidden, w_.final_norm.data(), c.rms_norm_eps, h_.data());
  } else {
    size_t row = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      row += chunks[i].tokens.size();
      ops::RmsNorm(x_.data() + (row - 1) * hidden, 1, hidden, w_.final_norm.data(), c.rms_norm_eps,
                   h_.data() + i * hidden);
    }
  }
  logits->resize(size_t(out_rows) * c.vocab_size);
  ops::Linear(h_.data(), out_rows, hidden, w_.LmHead(), int(c.vocab_size), logits->data());
}

}  // namespace kvtier::decoder
