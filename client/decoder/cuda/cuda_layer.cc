// One decoder layer, the paged attention and the logits on the GPU: the
// same steps as Model::Layer / Attention / Logits on the CPU (model.cc), so
// the two paths differ only in rounding (and, with fp16/bf16 weights, in the
// rounding of GEMM inputs).
#include <cmath>

#include "cuda/cuda_forward.h"
#include "kvtier/kernels/cuda.h"
#include "kvtier/status_macros.h"

namespace kvtier::decoder::cuda {

absl::Status CudaForward::Layer(uint32_t l, absl::Span<const ForwardChunk> chunks,
                                absl::Span<const uint32_t> start) {
  const DeviceLayer& L = w_->layer(l);
  const int hidden = int(c_.hidden_size), qd = int(c_.num_attention_heads * c_.head_dim),
            kvd = int(c_.num_key_value_heads * c_.head_dim), ff = int(c_.intermediate_size);
  const int64_t rows = rows_;
  float *x = x_.get<float>(), *h = h_.get<float>(), *q = q_.get<float>(), *k = k_.get<float>(),
        *v = v_.get<float>(), *gate = gate_.get<float>(), *up = up_.get<float>();
  const int32_t* positions = Ints(positions_at_);
  KVTIER_CUDA_OK(RmsNorm(x, nullptr, rows_, hidden, L.input_norm, c_.rms_norm_eps, h, stream_));
  ASSIGN_OR_RETURN(const void* in, GemmInput(h, rows * hidden));
  RETURN_IF_ERROR(Gemm(in, rows_, hidden, L.q, qd, q, 0.f));
  RETURN_IF_ERROR(Gemm(in, rows_, hidden, L.k, kvd, k, 0.f));
  RETURN_IF_ERROR(Gemm(in, rows_, hidden, L.v, kvd, v, 0.f));
  KVTIER_CUDA_OK(AddBias(q, rows_, qd, L.q_bias, stream_));  // before RoPE, as HF's q_proj(x)
  KVTIER_CUDA_OK(AddBias(k, rows_, kvd, L.k_bias, stream_));
  KVTIER_CUDA_OK(AddBias(v, rows_, kvd, L.v_bias, stream_));
  KVTIER_CUDA_OK(Rope(q, positions, rows_, int(c_.num_attention_heads), int(c_.head_dim), c_.rope_theta, stream_));
  KVTIER_CUDA_OK(Rope(k, positions, rows_, int(c_.num_key_value_heads), int(c_.head_dim), c_.rope_theta, stream_));
  RETURN_IF_ERROR(Attention(l, chunks, start));
  ASSIGN_OR_RETURN(in, GemmInput(attn_.get<float>(), rows * qd));
  RETURN_IF_ERROR(Gemm(in, rows_, qd, L.o, hidden, x, 1.f));
  KVTIER_CUDA_OK(AddBias(x, rows_, hidden, L.o_bias, stream_));

  KVTIER_CUDA_OK(RmsNorm(x, nullptr, rows_, hidden, L.post_norm, c_.rms_norm_eps, h, stream_));
  ASSIGN_OR_RETURN(in, GemmInput(h, rows * hidden));
  RETURN_IF_ERROR(Gemm(in, rows_, hidden, L.gate, ff, gate, 0.f));
  RETURN_IF_ERROR(Gemm(in, rows_, hidden, L.up, ff, up, 0.f));
  KVTIER_CUDA_OK(AddBias(gate, rows_, ff, L.gate_bias, stream_));
  KVTIER_CUDA_OK(AddBias(up, rows_, ff, L.up_bias, stream_));
  KVTIER_CUDA_OK(SwiGlu(gate, up, rows * ff, stream_));
  ASSIGN_OR_RETURN(in, GemmInput(gate, rows * ff));
  RETURN_IF_ERROR(Gemm(in, rows_, ff, L.down, hidden, x, 1.f));
  KVTIER_CUDA_OK(AddBias(x, rows_, hidden, L.down_bias, stream_));
  return absl::OkStatus();
}

absl::Status CudaForward::Attention(uint32_t l, absl::Span<const ForwardChunk> chunks,
                                    absl::Span<const uint32_t> start) {
  using namespace kernels;  // NOLINT: the kernels' parameter structs
  PagedKv kv = cache_.View();
  kv.layer = l;
  const uint32_t heads = c_.num_attention_heads;
  const float scale = 1.0f / std::sqrt(float(c_.head_dim));
  const uint32_t window = cache_.sliding_window();
  const size_t qd = size_t(heads) * c_.head_dim, kvd = size_t(c_.num_key_value_heads) * c_.head_dim;
  float *q = q_.get<float>(), *k = k_.get<float>(), *v = v_.get<float>(), *out = attn_.get<float>();
  if (decode_) {  // one token per sequence: one scatter, one split-K decode
    const int32_t* tables = Ints(table_at_[0]);
    KvBatchWriteParams w{kv, uint32_t(chunks.size()), tables, stride_, Ints(positions_at_), k, v};
    KVTIER_CUDA_OK(ScatterKvBatchCuda(w, stream_));
    DecodeParams p{kv, uint32_t(chunks.size()), heads, scale, window, q, out,
                   tables, stride_, Ints(lens_at_), max_len_};
    RETURN_IF_ERROR(ws_.Reserve(std::max<size_t>(DecodeWorkspaceBytesCuda(p), 1)));
    KVTIER_CUDA_OK(PagedDecodeCuda(p, Workspace{ws_.get(), ws_.bytes()}, stream_));
    return absl::OkStatus();
  }
  size_t row = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const uint32_t n = uint32_t(chunks[i].tokens.size());
    const int32_t* table = Ints(table_at_[i]);
    KvCopyParams c{kv, table, table_len_[i], start[i], n, k + row * kvd, v + row * kvd};
    KVTIER_CUDA_OK(ScatterKvCuda(c, stream_));
    PrefillParams p{kv, heads, scale, window, q + row * qd, out + row * qd, table, table_len_[i], start[i], n};
    KVTIER_CUDA_OK(PagedPrefillCuda(p, stream_));
    row += n;
  }
  return absl::OkStatus();
}

absl::Status CudaForward::Logits(absl::Span<const ForwardChunk> chunks, bool all,
                                 std::vector<float>* logits) {
  const int hidden = int(c_.hidden_size), vocab = int(c_.vocab_size);
  const int out_rows = all ? rows_ : int(chunks.size());
  float* h = h_.get<float>();
  KVTIER_CUDA_OK(RmsNorm(x_.get<float>(), all ? nullptr : Ints(out_rows_at_), out_rows, hidden,
                         w_->final_norm(), c_.rms_norm_eps, h, stream_));
  ASSIGN_OR_RETURN(const void* in, GemmInput(h, int64_t(out_rows) * hidden));
  RETURN_IF_ERROR(logits_.Reserve(size_t(out_rows) * vocab * sizeof(float)));
  RETURN_IF_ERROR(Gemm(in, out_rows, hidden, w_->lm_head(), vocab, logits_.get<float>(), 0.f));
  const size_t at = logits->size();
  logits->resize(at + size_t(out_rows) * vocab);
  KVTIER_CUDA_OK(cudaMemcpyAsync(logits->data() + at, logits_.get(), size_t(out_rows) * vocab * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream_));
  return absl::OkStatus();
}

}  // namespace kvtier::decoder::cuda
