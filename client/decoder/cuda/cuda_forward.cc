// CudaForward: setup (device, stream, cuBLAS, weights, the arena cleared),
// chunked prefill, and the per-layer sequence of GEMMs and kernels, which
// mirrors Model::Layer on the CPU step for step.
#include "cuda/cuda_forward.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "kvtier/kernels/cuda.h"
#include "kvtier/status_macros.h"

namespace kvtier::decoder {

bool CudaDecoderBuilt() { return true; }

absl::StatusOr<std::unique_ptr<DeviceForward>> CreateCudaForward(const ModelWeights& weights,
                                                                 PagedKvCache& cache,
                                                                 const CudaForwardOptions& options) {
  ASSIGN_OR_RETURN(auto f, cuda::CudaForward::Create(weights, cache, options));
  return std::unique_ptr<DeviceForward>(std::move(f));
}

namespace cuda {
namespace {

cudaDataType_t BlasType(Elem e) {
  return e == Elem::kF32 ? CUDA_R_32F : e == Elem::kF16 ? CUDA_R_16F : CUDA_R_16BF;
}

Elem ToElem(TensorDtype d) {
  return d == TensorDtype::kF32 ? Elem::kF32 : d == TensorDtype::kF16 ? Elem::kF16 : Elem::kBF16;
}

absl::Status Kernel(cudaError_t e, const char* what) { return CudaStatus(e, what); }

}  // namespace

absl::StatusOr<std::unique_ptr<CudaForward>> CudaForward::Create(const ModelWeights& weights,
                                                                 PagedKvCache& cache,
                                                                 const CudaForwardOptions& o) {
  RETURN_IF_ERROR(weights.config.Validate());
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=cuda: no usable CUDA device (",
        e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount reports 0 devices", ")"));
  if (o.device < 0 || o.device >= count)
    return absl::FailedPreconditionError(absl::StrCat("--device=cuda: no CUDA device ", o.device, " (",
                                                      count, " visible)"));
  if (!cache.on_gpu())
    return absl::InvalidArgumentError("CUDA decoder: the KV cache must be in GPU memory (on_gpu)");
  std::unique_ptr<CudaForward> f(new CudaForward(weights.config, cache, o));
  RETURN_IF_ERROR(f->Init(weights));
  return f;
}

absl::Status CudaForward::Init(const ModelWeights& weights) {
  KVTIER_CUDA_OK(cudaSetDevice(options_.device));
  KVTIER_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  KVTIER_CUBLAS_OK(cublasCreate(&blas_));
  KVTIER_CUBLAS_OK(cublasSetStream(blas_, stream_));
  // fp32 weights must be the CPU path's arithmetic: no TF32.
  KVTIER_CUBLAS_OK(cublasSetMathMode(blas_, options_.weights == TensorDtype::kF32
                                                ? CUBLAS_PEDANTIC_MATH
                                                : CUBLAS_DEFAULT_MATH));
  const Elem type = ToElem(options_.weights);
  if (options_.random_on_device) {
    ASSIGN_OR_RETURN(w_, DeviceWeights::Random(c_, type, options_.seed, options_.init_std, stream_));
  } else {
    ASSIGN_OR_RETURN(w_, DeviceWeights::Upload(weights, type, stream_));
  }
  GpuArena& arena = *cache_.gpu_arena();
  KVTIER_CUDA_OK(cudaMemsetAsync(arena.data(), 0, arena.size(), stream_));
  KVTIER_CUDA_OK(cudaStreamSynchronize(stream_));
  cudaDeviceProp prop{};
  KVTIER_CUDA_OK(cudaGetDeviceProperties(&prop, options_.device));
  describe_ = absl::StrFormat("cuda:%d %s, weights %s on the device (%.2f GiB%s), cuBLAS",
                              options_.device, prop.name, TensorDtypeName(options_.weights),
                              w_->bytes() / double(1ull << 30),
                              options_.random_on_device ? ", random from a seed" : "");
  return absl::OkStatus();
}

CudaForward::~CudaForward() {
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaForward::Forward(absl::Span<const ForwardChunk> chunks,
                                  absl::Span<const uint32_t> start, bool all_logits,
                                  std::vector<float>* logits) {
  KVTIER_CUDA_OK(cudaSetDevice(options_.device));
  logits->clear();
  const uint32_t max_rows = std::max(1u, options_.max_rows_per_pass);
  if (chunks.size() != 1 || chunks[0].tokens.size() <= max_rows)
    return Pass(chunks, start, true, all_logits, logits);
  // Chunked prefill: pieces of one sequence in order, each a full pass that
  // attends to the pieces before it through the pages.
  const ForwardChunk& ch = chunks[0];
  for (size_t a = 0; a < ch.tokens.size(); a += max_rows) {
    const size_t n = std::min<size_t>(max_rows, ch.tokens.size() - a);
    const ForwardChunk piece{ch.seq, ch.tokens.subspan(a, n)};
    const uint32_t piece_start = start[0] + uint32_t(a);
    const bool last = a + n == ch.tokens.size();
    RETURN_IF_ERROR(Pass({&piece, 1}, {&piece_start, 1}, all_logits || last, all_logits, logits));
  }
  return absl::OkStatus();
}

absl::Status CudaForward::Reserve(int rows) {
  const size_t r = size_t(rows), f = sizeof(float);
  const size_t hidden = c_.hidden_size, qd = size_t(c_.num_attention_heads) * c_.head_dim,
               kvd = size_t(c_.num_key_value_heads) * c_.head_dim, ff = c_.intermediate_size;
  RETURN_IF_ERROR(x_.Reserve(r * hidden * f));
  RETURN_IF_ERROR(h_.Reserve(r * hidden * f));
  RETURN_IF_ERROR(q_.Reserve(r * qd * f));
  RETURN_IF_ERROR(k_.Reserve(r * kvd * f));
  RETURN_IF_ERROR(v_.Reserve(r * kvd * f));
  RETURN_IF_ERROR(attn_.Reserve(r * qd * f));
  RETURN_IF_ERROR(gate_.Reserve(r * ff * f));
  RETURN_IF_ERROR(up_.Reserve(r * ff * f));
  if (w_->type() != Elem::kF32) RETURN_IF_ERROR(conv_.Reserve(r * std::max({hidden, qd, ff}) * 2));
  return absl::OkStatus();
}

absl::Status CudaForward::UploadIndices(absl::Span<const ForwardChunk> chunks,
                                        absl::Span<const uint32_t> start) {
  std::vector<int32_t>& h = host_ints_;
  h.clear();
  tokens_at_ = 0;
  for (const ForwardChunk& ch : chunks) h.insert(h.end(), ch.tokens.begin(), ch.tokens.end());
  positions_at_ = h.size();
  for (size_t i = 0; i < chunks.size(); ++i)
    for (uint32_t j = 0; j < chunks[i].tokens.size(); ++j) h.push_back(int32_t(start[i] + j));
  out_rows_at_ = h.size();
  int32_t row = 0;
  for (const ForwardChunk& ch : chunks) {  // each chunk's last row
    row += int32_t(ch.tokens.size());
    h.push_back(row - 1);
  }
  tables_at_ = h.size();
  stride_ = 1;
  max_len_ = 1;
  for (const ForwardChunk& ch : chunks) stride_ = std::max(stride_, uint32_t(cache_.BlockTable(ch.seq).size()));
  table_at_.clear();
  table_len_.clear();
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::vector<int32_t>& t = cache_.BlockTable(chunks[i].seq);
    table_at_.push_back(h.size());
    table_len_.push_back(uint32_t(t.size()));
    // Entries the window freed (and a batch's padding) point at page 0, which
    // passes the kernels' range check and is never read (as on the CPU).
    for (int32_t p : t) h.push_back(p == kNoPage ? 0 : p);
    if (decode_) h.resize(table_at_.back() + stride_, 0);
  }
  lens_at_ = h.size();
  for (size_t i = 0; i < chunks.size(); ++i) {
    h.push_back(int32_t(start[i] + chunks[i].tokens.size()));
    max_len_ = std::max<uint32_t>(max_len_, h.back());
  }
  RETURN_IF_ERROR(ints_.Reserve(h.size() * sizeof(int32_t)));
  KVTIER_CUDA_OK(cudaMemcpyAsync(ints_.get(), h.data(), h.size() * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

absl::Status CudaForward::Pass(absl::Span<const ForwardChunk> chunks, absl::Span<const uint32_t> start,
                               bool want_logits, bool all_logits, std::vector<float>* logits) {
  rows_ = 0;
  for (const ForwardChunk& ch : chunks) rows_ += int(ch.tokens.size());
  decode_ = size_t(rows_) == chunks.size();
  RETURN_IF_ERROR(Reserve(rows_));
  RETURN_IF_ERROR(UploadIndices(chunks, start));
  RETURN_IF_ERROR(Kernel(EmbedRows(w_->embed(), w_->type(), Ints(tokens_at_), rows_, int(c_.hidden_size),
                                   x_.get<float>(), stream_), "embedding rows"));
  for (uint32_t l = 0; l < c_.num_hidden_layers; ++l) RETURN_IF_ERROR(Layer(l, chunks, start));
  if (want_logits) RETURN_IF_ERROR(Logits(chunks, all_logits, logits));
  // host_ints_ is reused by the next pass; the arena must be final for a PUT.
  KVTIER_CUDA_OK(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::StatusOr<const void*> CudaForward::GemmInput(const float* x, int64_t n) {
  if (w_->type() == Elem::kF32) return static_cast<const void*>(x);
  RETURN_IF_ERROR(Kernel(ConvertF32(x, conv_.get(), w_->type(), n, stream_), "activation conversion"));
  return static_cast<const void*>(conv_.get());
}

absl::Status CudaForward::Gemm(const void* in, int rows, int k, const void* w, int out, float* y,
                               float beta) {
  // cuBLAS is column-major: row-major y[rows][out] is y^T (out x rows), and
  // y^T = w * in^T where row-major w[out][k] reads as a k x out matrix (op T)
  // and in[rows][k] as k x rows (op N). No transposed copy of w is needed.
  const float alpha = 1.0f;
  const cudaDataType_t t = BlasType(w_->type());
  KVTIER_CUBLAS_OK(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, k, &alpha, w, t, k, in, t, k,
                                &beta, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace kvtier::decoder
