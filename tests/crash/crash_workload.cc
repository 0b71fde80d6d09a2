// Workload and checker of the crash loop. Requests go through the public
// client library only, as an inference engine's would.
#include "tests/crash/crash_workload.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/page_pattern.h"
#include "client/wire_calls.h"
#include "kvtier.pb.h"

namespace kvtier::crash {
namespace {

constexpr int kControlChains = 8;
constexpr uint64_t kBatchBytes = 1 << 20;  // bytes per checker GET
constexpr auto kRetireSettle = std::chrono::milliseconds(500);

bool DaemonGone(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st);
}

std::string PageFor(const PageKey& key, uint64_t bytes) {
  std::string page(bytes, '\0');
  tools::FillPattern(key, reinterpret_cast<uint8_t*>(page.data()), bytes);
  return page;
}

}  // namespace

Layout CrashLayout(uint32_t tokens_per_page) {
  return Layout{.layers = 1, .kv_heads = 1, .head_dim = 128, .tokens_per_page = tokens_per_page,
                .dtype = Dtype::kFp16};
}

Workload::Workload(WorkloadOptions options)
    : options_(std::move(options)),
      layout_(CrashLayout(options_.tokens_per_page)),
      planner_(PlanOptions{options_.seed, layout_, options_.chain_pages, options_.sessions,
                           options_.shared, options_.repeat_share}),
      ledger_(options_.dir, options_.sessions),
      rng_(options_.seed ^ 0x5eed),
      next_put_(options_.sessions, 0) {}

void Workload::PutUntil(const std::string& endpoint, const std::atomic<bool>& stop) {
  const uint64_t phase = phase_++;
  std::vector<std::thread> writers;
  for (uint32_t s = 0; s < options_.sessions; ++s)
    writers.emplace_back([&, s] { Writer(s, phase, endpoint, stop); });
  for (std::thread& t : writers) t.join();
}

void Workload::Writer(uint32_t session, uint64_t phase, const std::string& endpoint,
                      const std::atomic<bool>& stop) {
  ClientOptions o{endpoint, "default", "", layout_, absl::StrCat("crash-writer-", session),
                  std::chrono::milliseconds(options_.put_timeout_ms)};
  std::mt19937_64 rng(options_.seed ^ (phase * 0x9E3779B97F4A7C15ull) ^ (session + 1));
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Client> client;
  while (!stop.load()) {
    if (client == nullptr) {
      auto c = Client::Connect(o);
      if (!c.ok()) {  // the daemon is being killed, or slow: retry until told to stop
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      client = *std::move(c);
    }
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - t0).count();
    const uint64_t round = static_cast<uint64_t>(ms) / std::max(1, options_.round_ms);
    const uint64_t put = next_put_[session]++;
    const PlannedPut p = planner_.Next(session, phase, round, put, rng);
    std::vector<std::string> pages;
    for (const PageKey& k : p.keys) pages.push_back(PageFor(k, client->page_bytes()));
    const std::vector<absl::string_view> views(pages.begin(), pages.end());
    ledger_.Sent(session, put, p);
    auto reply = client->PutInline(p.keys, PageKey::Zero(), views);
    if (reply.ok()) {
      ledger_.Replied(session, put, p, *reply);
    } else {
      ledger_.Failed(session, put, reply.status());
      client.reset();  // a fresh session after any error
    }
  }
}

// Every page acknowledged since the last complete check, then random older
// acknowledged ones up to verify_max, and a few sent but never acknowledged
// (those may be present or not, but never wrong). In ledger order, so a
// batch mostly holds chains.
std::vector<uint32_t> Workload::Sample(size_t max) {
  const std::vector<KeyRecord>& recs = ledger_.records();
  std::vector<uint32_t> pending, older, unacked;
  for (uint32_t i = 0; i < recs.size(); ++i) {
    if (!recs[i].acked) unacked.push_back(i);
    else (recs[i].epoch == ledger_.epoch() ? pending : older).push_back(i);
  }
  const size_t room = max > pending.size() ? max - pending.size() : 0;
  std::shuffle(older.begin(), older.end(), rng_);
  older.resize(std::min(older.size(), room));
  std::shuffle(unacked.begin(), unacked.end(), rng_);
  unacked.resize(std::min(unacked.size(), std::max<size_t>(8, options_.verify_max / 16)));
  pending.insert(pending.end(), older.begin(), older.end());
  pending.insert(pending.end(), unacked.begin(), unacked.end());
  std::sort(pending.begin(), pending.end());
  return pending;
}

// Not OK when the daemon did not answer (r and the ledger are then untouched).
absl::Status Workload::CheckBatch(Client& client, const std::vector<uint32_t>& batch,
                                  CheckResult* r) {
  std::vector<KeyRecord>& recs = ledger_.records();
  std::vector<PageKey> keys;
  for (uint32_t i : batch) keys.push_back(recs[i].key);
  auto look = client.Lookup(keys);
  if (!look.ok()) return look.status();
  auto got = client.GetInline(keys);
  if (!got.ok()) return got.status();
  r->lookup_hits += look->hits;
  for (size_t j = 0; j < keys.size() && j < got->size(); ++j) {
    KeyRecord& rec = recs[batch[j]];
    const bool pending = rec.acked && rec.epoch == ledger_.epoch();
    const std::string& page = (*got)[j];
    ++r->checked;
    r->acked_checked += rec.acked;
    r->pending_acked += pending;
    if (page.empty()) {
      if (!rec.acked) continue;
      ++r->missing_by_class[static_cast<int>(rec.cls)];
      if (r->missing_example.empty())
        r->missing_example = absl::StrCat(rec.key.ToHex(), " (", KeyClassName(rec.cls), ")");
      if (!rec.lost) ++r->newly_lost;
      rec.lost = true;
      continue;
    }
    ++r->present;
    rec.retired = false;  // back after a DELETE (a kill beat its record deletion): retire again
    r->acked_present += rec.acked;
    r->pending_survived += pending;
    const auto* bytes = reinterpret_cast<const uint8_t*>(page.data());
    const uint64_t bad =
        page.size() != client.page_bytes() ? 0 : tools::CheckPattern(rec.key, bytes, page.size());
    if (page.size() != client.page_bytes() || bad != page.size()) {
      ++r->corrupt;
      absl::StrAppend(&r->errors, "key ", rec.key.ToHex(), " (", KeyClassName(rec.cls),
                      ", acked: ", rec.acked ? "yes" : "no", ") served ", page.size(),
                      " bytes, wrong from byte ", bad, "; ");
    }
  }
  return absl::OkStatus();
}

absl::Status Workload::CheckControls(Client& client, CheckResult* r) {
  for (int i = 0; i < kControlChains; ++i) {
    const std::vector<PageKey> keys = planner_.Control(i);
    auto got = client.GetInline(keys);
    if (!got.ok()) return got.status();
    for (size_t j = 0; j < got->size(); ++j) {
      ++r->checked;
      if ((*got)[j].empty()) continue;
      ++r->present;
      ++r->phantom;
      absl::StrAppend(&r->errors, "never-PUT key ", keys[j].ToHex(), " was served; ");
    }
  }
  return absl::OkStatus();
}

// Runs `call` on a session, reconnecting after a timeout while the daemon
// lives (it may be busy with fsyncs). False when the daemon died.
bool Workload::WithRetries(const std::string& endpoint, const std::function<bool()>& alive,
                           std::unique_ptr<Client>* client,
                           const std::function<absl::Status(Client&)>& call, CheckResult* r) {
  ClientOptions o{endpoint, "default", "", layout_, "crash-checker",
                  std::chrono::milliseconds(500)};
  absl::Status last;
  for (int attempt = 0; attempt < 40; ++attempt) {
    if (*client == nullptr) {
      auto c = Client::Connect(o);
      if (!c.ok()) {
        last = c.status();
        if (!DaemonGone(last)) break;
        if (!alive()) return false;
        continue;
      }
      *client = *std::move(c);
    }
    last = call(**client);
    if (last.ok()) return true;
    client->reset();
    if (!DaemonGone(last)) break;
    if (!alive()) return false;
  }
  absl::StrAppend(&r->errors, "kvtierd is running but does not answer: ", last.ToString(), "; ");
  return false;
}

CheckResult Workload::Verify(const std::string& endpoint, const std::function<bool()>& alive,
                             bool all) {
  CheckResult r;
  std::unique_ptr<Client> client;
  auto controls = [&](Client& c) { return CheckControls(c, &r); };
  if (!WithRetries(endpoint, alive, &client, controls, &r)) return r;
  const std::vector<uint32_t> sample = Sample(all ? SIZE_MAX : options_.verify_max);
  const size_t per_batch =
      std::clamp<uint64_t>(kBatchBytes / std::max<uint64_t>(1, layout_.PageBytes()), 8, 128);
  for (size_t from = 0; from < sample.size(); from += per_batch) {
    const std::vector<uint32_t> batch(
        sample.begin() + from, sample.begin() + std::min(sample.size(), from + per_batch));
    auto call = [&](Client& c) { return CheckBatch(c, batch, &r); };
    if (!WithRetries(endpoint, alive, &client, call, &r)) return r;
  }
  auto read_stats = [&](Client& cl) -> absl::Status {
    auto stats = WireStats(cl);
    if (!stats.ok()) return stats.status();
    for (const auto& t : stats->tiers()) {
      if (t.name() != "nvme") continue;
      r.nvme_pages = t.pages();
      r.nvme_used = t.used_bytes();
      r.nvme_capacity = t.capacity_bytes();
      r.checksum_errors = t.checksum_errors();
      r.recovered_pages = t.recovered_pages();
      r.dropped_records = t.dropped_records();
    }
    return absl::OkStatus();
  };
  if (!WithRetries(endpoint, alive, &client, read_stats, &r)) return r;
  r.complete = true;
  ledger_.NextEpoch();
  return r;
}

uint64_t Workload::Retire(const std::string& endpoint, size_t max_live) {
  std::vector<KeyRecord>& recs = ledger_.records();
  std::vector<uint32_t> live;  // sent (acknowledged or not) since created or retired
  for (uint32_t i = 0; i < recs.size(); ++i)
    if (!recs[i].retired) live.push_back(i);
  if (max_live == 0 || live.size() <= max_live) return 0;
  live.resize(live.size() - max_live * 3 / 4);  // the oldest (ledger order)
  std::vector<PageKey> keys;
  for (uint32_t i : live) {
    recs[i].acked = false;
    recs[i].retired = true;
    keys.push_back(recs[i].key);
  }
  ClientOptions o{endpoint, "default", "", layout_, "crash-retirer",
                  std::chrono::milliseconds(2000)};
  if (auto c = Client::Connect(o); c.ok()) {
    for (size_t from = 0; from < keys.size(); from += 1024) {
      const size_t n = std::min<size_t>(1024, keys.size() - from);
      if (!(*c)->Delete(absl::MakeConstSpan(keys.data() + from, n)).ok()) break;
    }
  }
  // The evictor deletes NVMe records within ~100 ms of a DELETE; a kill
  // before that brings the pages back (docs/OPERATIONS.md), and the store
  // would grow run after run. Give it time (a retire is rare: every few
  // thousand pages).
  std::this_thread::sleep_for(kRetireSettle);
  retired_ += live.size();
  return live.size();
}

uint64_t Workload::pages_ever_lost(uint64_t by_class[kKeyClasses]) const {
  uint64_t n = 0;
  for (int c = 0; c < kKeyClasses; ++c) by_class[c] = 0;
  for (const KeyRecord& rec : ledger_.records()) {
    if (!rec.lost) continue;
    ++n;
    ++by_class[static_cast<int>(rec.cls)];
  }
  return n;
}

}  // namespace kvtier::crash
