// One session's replay of a request: LOOKUP the chain, GET the leading hits
// and check every byte, PUT the misses and the decode pages, timing each call.
#include "tools/stress/session.h"

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kvtier/status_macros.h"
#include "tools/common/page_pattern.h"

namespace kvtier::stress {
namespace {

constexpr size_t kMaxKeys = 4096;  // the daemon's per-request limit

using Clock = std::chrono::steady_clock;
double Micros(Clock::time_point a) {
  return std::chrono::duration<double, std::micro>(Clock::now() - a).count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Session>> Session::Create(const SessionContext& ctx,
                                                         const Layout& layout, int index) {
  const StressOptions& o = *ctx.options;
  std::unique_ptr<Session> s(new Session(ctx));
  for (const std::string& endpoint : o.endpoints) {
    ClientOptions co{.endpoint = endpoint, .tenant = o.tenant, .token = o.token,
                     .layout = layout, .client_name = absl::StrCat("kvtier-stress/", index),
                     .timeout = std::chrono::milliseconds(o.timeout_ms)};
    auto client = Client::Connect(co);
    if (!client.ok())
      return absl::Status(client.status().code(),
                          absl::StrCat(endpoint.empty() ? "(default endpoint)" : endpoint, ": ",
                                       client.status().message()));
    s->endpoints_.push_back({.client = *std::move(client)});
  }
  s->page_bytes_ = s->endpoints_[0].client->page_bytes();
  s->layout_id_ = s->endpoints_[0].client->layout_id();
  // One buffer for every daemon: a request uses one endpoint at a time.
  ASSIGN_OR_RETURN(s->shm_, ShmBuffer::Create(s->page_bytes_ * o.batch_pages));
  // Fault the buffer in now: first touch is far slower than a copy on VMs,
  // and an inference engine's KV arena is long since touched.
  std::memset(s->shm_->data(), 0, s->shm_->size());
  for (Endpoint& e : s->endpoints_) {
    ASSIGN_OR_RETURN(e.buffer, e.client->RegisterBuffer(*s->shm_));
  }
  for (uint32_t i = 0; i < o.batch_pages; ++i) s->offsets_.push_back(i * s->page_bytes_);
  s->slot_key_.assign(o.batch_pages, PageKey::Zero());
  return s;
}

std::vector<PageKey> Session::Keys(absl::Span<const uint64_t> page_ids) const {
  std::vector<PageKey> keys;
  keys.reserve(page_ids.size());
  for (uint64_t id : page_ids) keys.push_back(KeyForPage(layout_id_, ctx_.key_salt, id));
  return keys;
}

absl::Status Session::Replay(const trace::Request& r, size_t ep) {
  ep_ = ep;
  const CounterPair c = sink();
  const std::vector<PageKey> keys = Keys(trace::RequestPages(r, *ctx_.mapping));
  ASSIGN_OR_RETURN(LookupResult found, Lookup(keys));
  ASSIGN_OR_RETURN(uint32_t got, GetAndVerify(r, keys, found.hits));
  for (uint32_t i = 0; i < got; ++i) CountHit(keys[i], found.tiers[i]);
  c.Add(&Counters::pages, keys.size());
  c.Add(&Counters::hit_pages, got);
  c.Add(&Counters::blocks, r.block_ids.size());
  c.Add(&Counters::hit_blocks, got / std::max<uint32_t>(1, ctx_.mapping->pages_per_block));
  c.Add(&Counters::get_races, found.hits - got);
  const auto rest = absl::MakeConstSpan(keys).subspan(got);
  RETURN_IF_ERROR(PutChain(rest, got > 0 ? keys[got - 1] : PageKey::Zero()));
  if (!ctx_.options->decode || keys.empty()) return absl::OkStatus();
  const std::vector<PageKey> decode =
      Keys(trace::DecodePages(r, ctx_.block_tokens, *ctx_.mapping));
  c.Add(&Counters::decode_pages, decode.size());
  return PutChain(decode, keys.back());
}

absl::Status Session::Hint(const trace::Request& r, size_t ep) {
  ep_ = ep;
  const std::vector<PageKey> keys = Keys(trace::RequestPages(r, *ctx_.mapping));
  for (size_t b = 0; b < keys.size(); b += kMaxKeys) {
    const size_t n = std::min(kMaxKeys, keys.size() - b);
    RETURN_IF_ERROR(client().Prefetch(absl::MakeConstSpan(keys).subspan(b, n)).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<LookupResult> Session::Lookup(absl::Span<const PageKey> keys) {
  LookupResult all;
  for (size_t b = 0; b < keys.size(); b += kMaxKeys) {
    const size_t n = std::min(kMaxKeys, keys.size() - b);
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(LookupResult part, client().Lookup(keys.subspan(b, n)));
    lat_.lookup_us.push_back(Micros(t0));
    all.hits += part.hits;
    all.tiers.insert(all.tiers.end(), part.tiers.begin(), part.tiers.end());
    if (part.hits < n) break;
  }
  return all;
}

absl::StatusOr<uint32_t> Session::GetAndVerify(const trace::Request& r,
                                               absl::Span<const PageKey> keys, uint32_t hits) {
  const size_t batch = offsets_.size();
  for (size_t b = 0; b < hits; b += batch) {
    const size_t n = std::min<size_t>(batch, hits - b);
    // A slot that already holds this key's pattern would pass the check even
    // if the daemon copied nothing: clear it first.
    for (size_t i = 0; i < n; ++i)
      if (slot_key_[i] == keys[b + i]) {
        std::memset(shm_->data() + offsets_[i], 0, page_bytes_);
        slot_key_[i] = PageKey::Zero();
      }
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(std::vector<TierKind> tiers,
                     client().Get(keys.subspan(b, n), endpoints_[ep_].buffer,
                                  absl::MakeConstSpan(offsets_).subspan(0, n)));
    lat_.get_us.push_back(Micros(t0));
    size_t leading = n;
    for (size_t i = 0; i < n; ++i) {
      if (tiers[i] == TierKind::kNone) {
        leading = std::min(leading, i);  // evicted since the LOOKUP: a miss from here on
        continue;
      }
      sink().AddTier(&Counters::get_bytes_by_tier, tiers[i], page_bytes_);
      Verify(r, keys[b + i], i, tiers[i]);
    }
    if (leading < n) return static_cast<uint32_t>(b + leading);
  }
  return hits;
}

void Session::CountHit(const PageKey& key, TierKind tier) {
  const CounterPair c = sink();
  c.AddTier(&Counters::hit_pages_by_tier, tier, 1);
  if (tier != TierKind::kRemote || ctx_.owners == nullptr) return;
  const uint8_t owner = ctx_.owners->Owner(key);
  if (owner != PutOwners::kUnknown && owner != ep_) c.Add(&Counters::remote_hits_other_endpoint, 1);
}

void Session::Verify(const trace::Request& r, const PageKey& key, size_t slot, TierKind tier) {
  slot_key_[slot] = key;
  const uint8_t* page = shm_->data() + offsets_[slot];
  const uint64_t bad = tools::CheckFastPattern(key, page, page_bytes_);
  if (bad == page_bytes_) return;
  slot_key_[slot] = PageKey::Zero();
  sink().Add(&Counters::corrupt_pages, 1);
  ctx_.errors->Record(absl::StrCat("corrupt page: trace line ", r.line, ", key ", key.ToHex(),
                                   " served from ", TierKindName(tier), " by endpoint ", ep_,
                                   ": first wrong byte at offset ", bad, " of ", page_bytes_));
  if (ctx_.options->stop_on_error) ctx_.stop->store(true);
}

absl::Status Session::PutChain(absl::Span<const PageKey> keys, const PageKey& parent) {
  const CounterPair c = sink();
  const size_t batch = offsets_.size();
  for (size_t b = 0; b < keys.size(); b += batch) {
    const size_t n = std::min(batch, keys.size() - b);
    for (size_t i = 0; i < n; ++i) {
      tools::FillFastPattern(keys[b + i], shm_->data() + offsets_[i], page_bytes_);
      slot_key_[i] = keys[b + i];
    }
    const auto t0 = Clock::now();
    auto put = client().Put(keys.subspan(b, n), b == 0 ? parent : keys[b - 1],
                            endpoints_[ep_].buffer, absl::MakeConstSpan(offsets_).subspan(0, n));
    lat_.put_us.push_back(Micros(t0));
    // No room even after eviction is an outcome, not a failure: the daemon
    // cut the chain, and a suffix without its prefix is useless.
    if (absl::IsResourceExhausted(put.status())) {
      c.Add(&Counters::put_not_stored, keys.size() - b);
      return absl::OkStatus();
    }
    if (!put.ok()) return put.status();
    c.Add(&Counters::put_stored, put->stored);
    c.Add(&Counters::put_dedup, put->deduplicated);
    // The chain's leading pages are the ones this daemon holds now.
    if (ctx_.owners != nullptr)
      ctx_.owners->Claim(keys.subspan(b, n - std::min<size_t>(n, put->not_stored)),
                         static_cast<uint8_t>(ep_));
    if (put->not_stored > 0) {
      c.Add(&Counters::put_not_stored, put->not_stored + (keys.size() - b - n));
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier::stress
