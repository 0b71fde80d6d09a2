// Generator: prompt in, tokens out, with prefix reuse through kvtierd when a
// PrefixStore is given: restore the cached prefix, prefill the rest, PUT
// completed pages after prefill and as decode completes them. Reports TTFT,
// tokens restored vs computed and decode speed. Also byte-level text
// tokens for prompts given as text without a tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kvtier/decoder/model.h"
#include "kvtier/decoder/prefix_store.h"
#include "kvtier/decoder/sampler.h"

namespace kvtier::decoder {

struct GenerateOptions {
  uint32_t max_new_tokens = 32;
  SamplingOptions sampling;
  bool stop_at_eos = true;   // when the config names an eos token
  bool keep_logits = false;  // return the logits behind every new token
  // Restore the prefix with the daemon's layer-wise GET, so the prefill of
  // the remaining tokens computes layer l while later layers are still being
  // copied (same output either way). Off by default, though measured with
  // kvtier-decoder-bench --mode=layerwise (124m, 8,192 tokens, 2-core CPU)
  // it now wins from NVMe (TTFT 0.36x whole-page: the daemon reads and
  // verifies layer by layer) and from host RAM (1.39x better at one load,
  // 0.93x at another: it depends on how the copy compares with the compute
  // it overlaps; docs/BENCHMARKS.md).
  // Ignored with a sliding window and with a KV arena on the GPU (the
  // daemon has no layer-wise GET into GPU buffers yet).
  bool layerwise_restore = false;
};

struct GenerateStats {
  uint32_t prompt_tokens = 0;
  uint32_t restored_tokens = 0;  // K/V copied in from kvtierd
  uint32_t computed_tokens = 0;  // prompt tokens prefilled here
  uint32_t new_tokens = 0;
  uint32_t pages_put = 0, pages_deduplicated = 0, pages_not_stored = 0;
  std::vector<TierKind> restored_from;  // tier of each restored page
  bool layerwise = false;       // the restore was layer-wise
  double layer_wait_ms = 0;     // layer-wise: prefill time blocked waiting for layers
  uint32_t redone_tokens = 0;   // layer-wise: prompt tokens computed again after a short GET
  double restore_ms = 0;  // LOOKUP + GET (layer-wise: until the GET's reply)
  double ttft_ms = 0;     // start to first token (restore + prefill + sample)
  double put_ms = 0;      // PUT calls, after the first token
  double decode_s = 0;    // the tokens after the first
  std::string reuse_note; // why reuse was off or degraded; empty when it worked
  // Why generation stopped before max_new_tokens other than at EOS (the
  // sequence reached max_position_embeddings); empty otherwise.
  std::string stop_note;
  double DecodeTokensPerS() const {
    return decode_s > 0 && new_tokens > 1 ? (new_tokens - 1) / decode_s : 0;
  }
};

struct GenerateResult {
  std::vector<uint32_t> tokens;             // new tokens only
  std::vector<std::vector<float>> logits;   // with keep_logits: one row per new token
  GenerateStats stats;
};

class Generator {
 public:
  // `model` and `store` are borrowed; `store` may be null (no reuse).
  Generator(Model* model, PrefixStore* store) : model_(*model), store_(store) {}

  // Runs one prompt in a fresh sequence of the model's cache and removes the
  // sequence at the end. Store failures never fail generation: they turn
  // reuse off for this call and are described in stats.reuse_note. Reaching
  // max_position_embeddings ends generation like EOS does: the tokens so far
  // are returned and stats.stop_note says so (a prompt too long to prefill
  // is an error).
  absl::StatusOr<GenerateResult> Generate(absl::Span<const uint32_t> prompt,
                                          const GenerateOptions& options);

 private:
  void Publish(SeqId seq, absl::Span<const uint32_t> tokens, GenerateStats* stats);
  // Restores what the daemon has of `prompt` and prefills the rest into
  // `logits`; fills the restore fields of `stats`.
  absl::Status Prefill(SeqId seq, absl::Span<const uint32_t> prompt, bool layerwise,
                       GenerateStats* stats, std::vector<float>* logits);
  absl::Status PrefillLayerwise(SeqId seq, absl::Span<const uint32_t> prompt,
                                GenerateStats* stats, std::vector<float>* logits);
  Model& model_;
  PrefixStore* store_;
};

// Byte-level tokens: each byte of `text` is one token id (needs vocab >= 256).
std::vector<uint32_t> ByteTokens(absl::string_view text);
// Token ids back to text: bytes for ids < 256 (non-printable ones escaped),
// "<id>" for the rest.
std::string BytesToText(absl::Span<const uint32_t> tokens);

}  // namespace kvtier::decoder
