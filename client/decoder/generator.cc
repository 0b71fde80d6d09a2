// Generation with prefix reuse: restore -> prefill the rest -> first token
// (TTFT) -> PUT -> decode, PUTting each page decode completes.
#include "kvtier/decoder/generator.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kvtier/status_macros.h"

namespace kvtier::decoder {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

}  // namespace

void Generator::Publish(SeqId seq, absl::Span<const uint32_t> tokens, GenerateStats* stats) {
  PagedKvCache& cache = model_.cache();
  // The window may free the full pages once this PUT is over (or skipped).
  auto release = [&] { (void)cache.Release(seq, cache.Length(seq) / cache.tokens_per_page()); };
  if (store_ == nullptr || !stats->reuse_note.empty()) return release();
  auto t0 = Clock::now();
  auto put = store_->Publish(seq, tokens);
  stats->put_ms += MsSince(t0);
  release();
  if (!put.ok()) {
    stats->reuse_note = absl::StrCat("PUT failed: ", put.status().ToString());
    return;
  }
  stats->pages_put += put->stored;
  stats->pages_deduplicated += put->deduplicated;
  stats->pages_not_stored += put->not_stored;
}

absl::Status Generator::Prefill(SeqId seq, absl::Span<const uint32_t> prompt, bool layerwise,
                                GenerateStats* stats, std::vector<float>* logits) {
  PagedKvCache& cache = model_.cache();
  // The daemon has no layer-wise GET into GPU buffers: whole pages there.
  if (store_ != nullptr && layerwise && cache.sliding_window() == 0 && !cache.on_gpu())
    return PrefillLayerwise(seq, prompt, stats, logits);
  if (store_ != nullptr) {
    auto start = Clock::now();
    auto restored = store_->Restore(seq, prompt);
    if (restored.ok()) {
      stats->restored_tokens = restored->tokens;
      stats->restored_from = restored->tiers;
    } else {
      stats->reuse_note = absl::StrCat("restore failed: ", restored.status().ToString());
      (void)cache.Truncate(seq, 0);
    }
    stats->restore_ms = MsSince(start);
  }
  stats->computed_tokens = stats->prompt_tokens - stats->restored_tokens;
  return model_.Forward({{seq, prompt.subspan(stats->restored_tokens)}}, logits);
}

absl::Status Generator::PrefillLayerwise(SeqId seq, absl::Span<const uint32_t> prompt,
                                         GenerateStats* stats, std::vector<float>* logits) {
  stats->layerwise = true;
  auto pending = store_->StartRestore(seq, prompt);
  if (!pending.ok()) {
    stats->reuse_note = absl::StrCat("restore failed: ", pending.status().ToString());
    (void)model_.cache().Truncate(seq, 0);
    stats->computed_tokens = stats->prompt_tokens;
    return model_.Forward({{seq, prompt}}, logits);
  }
  PendingRestore& p = **pending;
  const uint32_t planned = p.planned_tokens();
  absl::Status st = model_.Forward({{seq, prompt.subspan(planned)}}, logits, false,
                                   [&p](uint32_t layer) { return p.WaitLayer(layer); });
  auto restored = p.Finish();
  stats->restore_ms = p.get_ms();
  stats->layer_wait_ms = p.wait_ms();
  if (restored.ok()) {
    stats->restored_tokens = restored->tokens;
    stats->restored_from = restored->tiers;
  } else {
    stats->reuse_note = absl::StrCat("restore failed: ", restored.status().ToString());
  }
  stats->computed_tokens = stats->prompt_tokens - stats->restored_tokens;
  if (restored.ok() && restored->tokens == planned) return st;
  // The GET failed or came back short: the pass above read pages that never
  // arrived. Finish truncated the sequence to what did; compute the rest.
  stats->redone_tokens = st.ok() ? stats->prompt_tokens - planned : 0;
  return model_.Forward({{seq, prompt.subspan(stats->restored_tokens)}}, logits);
}

absl::StatusOr<GenerateResult> Generator::Generate(absl::Span<const uint32_t> prompt,
                                                   const GenerateOptions& options) {
  if (prompt.empty()) return absl::InvalidArgumentError("generate: empty prompt");
  PagedKvCache& cache = model_.cache();
  GenerateResult result;
  GenerateStats& stats = result.stats;
  stats.prompt_tokens = uint32_t(prompt.size());
  if (store_ == nullptr) stats.reuse_note = "no daemon: every prompt token is computed";
  const SeqId seq = cache.AddSequence();
  // Pages behind the window are PUT before it frees them (Publish releases).
  if (store_ != nullptr && cache.sliding_window() > 0) (void)cache.HoldForStore(seq);
  std::vector<uint32_t> tokens(prompt.begin(), prompt.end());
  Sampler sampler(options.sampling);
  std::vector<float> logits;
  auto start = Clock::now();
  absl::Status st = Prefill(seq, prompt, options.layerwise_restore, &stats, &logits);
  if (!st.ok()) {
    (void)cache.RemoveSequence(seq);
    if (store_) store_->Forget(seq);
    return st;
  }
  const int32_t eos = model_.config().eos_token_id;
  auto take = [&](const std::vector<float>& l) {
    uint32_t t = sampler.Sample(l);
    result.tokens.push_back(t);
    if (options.keep_logits) result.logits.push_back(l);
    return t;
  };
  uint32_t next = options.max_new_tokens > 0 ? take(logits) : 0;
  stats.ttft_ms = MsSince(start);
  Publish(seq, tokens, &stats);
  const uint32_t tpp = cache.tokens_per_page();
  auto decode_start = Clock::now();
  double put_before = stats.put_ms;
  const uint32_t max_positions = model_.config().max_position_embeddings;
  while (st.ok() && result.tokens.size() < options.max_new_tokens &&
         !(options.stop_at_eos && eos >= 0 && next == uint32_t(eos))) {
    if (cache.Length(seq) >= max_positions) {  // `next` would need position max_positions
      stats.stop_note = absl::StrCat("stopped after ", result.tokens.size(),
                                     " new tokens: the sequence reached max_position_embeddings (",
                                     max_positions, ")");
      break;
    }
    tokens.push_back(next);
    st = model_.Forward({{seq, absl::MakeConstSpan(&tokens.back(), 1)}}, &logits);
    if (!st.ok()) break;
    next = take(logits);
    if (cache.Length(seq) % tpp == 0) Publish(seq, tokens, &stats);
  }
  stats.decode_s = (MsSince(decode_start) - (stats.put_ms - put_before)) / 1000.0;
  stats.new_tokens = uint32_t(result.tokens.size());
  (void)cache.RemoveSequence(seq);
  if (store_) store_->Forget(seq);
  if (!st.ok()) return st;
  return result;
}

std::vector<uint32_t> ByteTokens(absl::string_view text) {
  std::vector<uint32_t> t;
  t.reserve(text.size());
  for (unsigned char c : text) t.push_back(c);
  return t;
}

std::string BytesToText(absl::Span<const uint32_t> tokens) {
  std::string s;
  for (uint32_t t : tokens) {
    if (t >= 256) {
      absl::StrAppend(&s, "<", t, ">");
    } else if (t == '\n' || (t >= 0x20 && t < 0x7f)) {
      s.push_back(char(t));
    } else {
      absl::StrAppend(&s, absl::StrFormat("\\x%02x", t));
    }
  }
  return s;
}

}  // namespace kvtier::decoder
