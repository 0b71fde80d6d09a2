// Layer-wise prefix restore: the daemon's layer-wise GET runs on a helper
// thread and counts delivered layers in the arena header; the decoder's
// forward pass waits per layer (WaitLayer) instead of for the whole GET.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kvtier/decoder/prefix_store.h"
#include "kvtier/status_macros.h"

namespace kvtier::decoder {
namespace {

using Clock = std::chrono::steady_clock;

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PendingRestore>> PrefixStore::StartRestore(
    SeqId seq, absl::Span<const uint32_t> prompt) {
  if (cache_.sliding_window() != 0)
    return absl::FailedPreconditionError(
        "layer-wise restore: not with a sliding window (pages behind it are freed at once)");
  if (cache_.on_gpu())  // the daemon answers FAILED_PRECONDITION (docs/PROTOCOL.md)
    return absl::FailedPreconditionError("layer-wise restore: not available for GPU buffers yet");
  const auto start = Clock::now();
  ASSIGN_OR_RETURN(RestorePlan plan, Plan(seq, prompt));
  const uint32_t tpp = cache_.tokens_per_page();
  const uint32_t hit_tokens = uint32_t(plan.keys.size()) * tpp;
  const uint32_t planned = std::min<uint32_t>(hit_tokens, uint32_t(prompt.size()) - 1);
  // Record the hits now so the forward pass appends after them; the K/V of
  // a hit's layer l may be read only after WaitLayer(l).
  if (hit_tokens > 0) {
    absl::Status st = cache_.Commit(seq, hit_tokens);
    if (st.ok()) st = cache_.Truncate(seq, planned);
    if (!st.ok()) {
      (void)cache_.Truncate(seq, 0);
      return st;
    }
  }
  std::unique_ptr<PendingRestore> p(
      new PendingRestore(this, seq, uint32_t(prompt.size()), planned, std::move(plan), start));
  if (!p->plan_.keys.empty()) p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

PendingRestore::PendingRestore(PrefixStore* store, SeqId seq, uint32_t prompt_tokens,
                               uint32_t planned, RestorePlan plan, Clock::time_point start)
    : store_(*store),
      seq_(seq),
      prompt_tokens_(prompt_tokens),
      planned_(planned),
      plan_(std::move(plan)),
      start_(start),
      tiers_(std::vector<TierKind>()) {}

PendingRestore::~PendingRestore() {
  if (!finished_) (void)Finish();
}

void PendingRestore::Run() {
  PagedKvCache& cache = store_.cache_;
  absl::Span<uint8_t> mapping(cache.arena().data(), cache.arena().size());
  auto tiers = store_.client_->GetLayers(
      plan_.keys, store_.buffer_, plan_.offsets, mapping, PagedKvCache::kProgressOffset,
      [this](uint32_t layer) {
        absl::MutexLock lock(&mu_);
        layers_ = layer + 1;
        cv_.SignalAll();
      });
  absl::MutexLock lock(&mu_);
  tiers_ = std::move(tiers);
  done_ = true;
  get_ms_ = MsBetween(start_, Clock::now());
  cv_.SignalAll();
}

absl::Status PendingRestore::WaitLayer(uint32_t layer) {
  if (plan_.keys.empty()) return absl::OkStatus();
  const auto t0 = Clock::now();
  absl::MutexLock lock(&mu_);
  while (layers_ <= layer && !done_) cv_.Wait(&mu_);
  wait_ms_ += MsBetween(t0, Clock::now());
  if (layers_ > layer) return absl::OkStatus();
  if (!tiers_.ok())
    return absl::AbortedError(absl::StrCat("layer-wise GET failed: ", tiers_.status().message()));
  return absl::AbortedError(absl::StrCat("layer-wise GET ended after ", layers_,
                                         " layers, before layer ", layer));
}

double PendingRestore::get_ms() const {
  absl::MutexLock lock(&mu_);
  return get_ms_;
}

absl::StatusOr<RestoreResult> PendingRestore::Finish() {
  if (thread_.joinable()) thread_.join();
  if (finished_) return absl::FailedPreconditionError("layer-wise restore: Finish called twice");
  finished_ = true;
  if (plan_.keys.empty()) return RestoreResult{.pages_looked_up = plan_.pages_looked_up};
  absl::StatusOr<std::vector<TierKind>> tiers;
  {
    absl::MutexLock lock(&mu_);
    tiers = std::move(tiers_);
  }
  if (!tiers.ok()) {
    (void)store_.cache_.Truncate(seq_, 0);
    return tiers.status();
  }
  return store_.Settle(seq_, prompt_tokens_, plan_, *tiers, /*committed=*/true);
}

}  // namespace kvtier::decoder
