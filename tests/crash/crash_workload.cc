// Workload and checker of the crash loop. Requests go through the public
// client library only, as an inference engine's would.
#include "tests/crash/crash_workload.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/page_pattern.h"
#include "kvtier.pb.h"

namespace kvtier::crash {
namespace {

constexpr uint64_t kControlBase = 1ull << 62;  // chain ids never PUT
constexpr int kControlChains = 8;

bool DaemonGone(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st);
}

std::string PageFor(const PageKey& key, uint64_t bytes) {
  std::string page(bytes, '\0');
  tools::FillPattern(key, reinterpret_cast<uint8_t*>(page.data()), bytes);
  return page;
}

}  // namespace

Layout CrashLayout() {
  return Layout{.layers = 1, .kv_heads = 1, .head_dim = 128, .tokens_per_page = 256,
                .dtype = Dtype::kFp16};
}

Workload::Workload(WorkloadOptions options)
    : options_(std::move(options)), layout_(CrashLayout()), rng_(options_.seed ^ 0x5eed),
      attempted_log_(options_.dir + "/attempted.log", std::ios::app),
      acked_log_(options_.dir + "/acked.log", std::ios::app) {
  for (int i = 0; i < kControlChains; ++i) controls_.push_back(ChainKeys(kControlBase + i));
}

std::vector<PageKey> Workload::ChainKeys(uint64_t id) const {
  std::vector<uint32_t> tokens(size_t{options_.chain_pages} * layout_.tokens_per_page);
  const uint64_t salt = options_.seed * 0x9E3779B97F4A7C15ull + id * 0xBF58476D1CE4E5B9ull;
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<uint32_t>((salt >> (i % 32)) + i * 7919u);
  return DeriveChain(layout_.Id(), layout_.tokens_per_page, tokens);
}

void Workload::PutUntil(const std::string& endpoint, const std::atomic<bool>& stop) {
  ClientOptions o{endpoint, "default", "", layout_, "crash-writer", std::chrono::milliseconds(300)};
  std::unique_ptr<Client> client;
  while (!stop.load()) {
    if (client == nullptr) {
      auto c = Client::Connect(o);
      if (!c.ok()) continue;  // the daemon is being killed, or slow: retry until told to stop
      client = *std::move(c);
    }
    Chain chain{ChainKeys(next_chain_++), 0, complete_checks_};
    std::vector<std::string> pages;
    std::vector<absl::string_view> views;
    for (const PageKey& k : chain.keys) {
      attempted_log_ << k.ToHex() << '\n';
      pages.push_back(PageFor(k, client->page_bytes()));
    }
    for (const std::string& p : pages) views.push_back(p);
    attempted_ += chain.keys.size();
    auto put = client->PutInline(chain.keys, PageKey::Zero(), views);
    if (put.ok()) {
      chain.acked = std::min<uint32_t>(put->stored + put->deduplicated, chain.keys.size());
      for (uint32_t i = 0; i < chain.acked; ++i) acked_log_ << chain.keys[i].ToHex() << '\n';
      acked_ += chain.acked;
    } else {
      client.reset();  // a fresh session after any error
    }
    chains_.push_back(std::move(chain));
  }
  attempted_log_.flush();
  acked_log_.flush();
}

// Every chain sent since the last complete check, then random older ones up
// to verify_max pages.
std::vector<size_t> Workload::Sample() {
  std::vector<size_t> recent, older;
  for (size_t i = 0; i < chains_.size(); ++i)
    (chains_[i].since == complete_checks_ ? recent : older).push_back(i);
  const size_t per_chain = std::max<size_t>(1, options_.chain_pages);
  const size_t room = options_.verify_max / per_chain;
  if (older.size() + recent.size() > room) {
    std::shuffle(older.begin(), older.end(), rng_);
    older.resize(room > recent.size() ? room - recent.size() : 0);
  }
  recent.insert(recent.end(), older.begin(), older.end());
  return recent;
}

// Not OK when the daemon did not answer (r is then untouched).
absl::Status Workload::CheckChain(Client& client, const std::vector<PageKey>& keys,
                                  uint32_t acked, bool control, CheckResult* r,
                                  uint64_t* acked_present) {
  if (keys.empty()) return absl::OkStatus();
  auto look = client.Lookup(keys);
  if (!look.ok()) return look.status();
  auto got = client.GetInline(keys);
  if (!got.ok()) return got.status();
  r->lookup_hits += look->hits;
  for (size_t i = 0; i < keys.size() && i < got->size(); ++i) {
    const std::string& page = (*got)[i];
    ++r->checked;
    if (page.empty()) continue;
    ++r->present;
    if (i < acked) ++*acked_present;
    const uint64_t bad = page.size() != client.page_bytes()
                             ? 0
                             : tools::CheckPattern(keys[i], reinterpret_cast<const uint8_t*>(page.data()), page.size());
    if (control) {
      ++r->phantom;
      absl::StrAppend(&r->errors, "never-PUT key ", keys[i].ToHex(), " was served; ");
    } else if (page.size() != client.page_bytes() || bad != page.size()) {
      ++r->corrupt;
      absl::StrAppend(&r->errors, "key ", keys[i].ToHex(), " (acked: ", i < acked ? "yes" : "no",
                      ") served ", page.size(), " bytes, wrong from byte ", bad, "; ");
    }
  }
  return absl::OkStatus();
}

// Runs `call` on a session, reconnecting after a timeout while the daemon
// lives (it may be busy with fsyncs). False when the daemon died.
bool Workload::WithRetries(const std::string& endpoint, const std::function<bool()>& alive,
                           std::unique_ptr<Client>* client,
                           const std::function<absl::Status(Client&)>& call, CheckResult* r) {
  ClientOptions o{endpoint, "default", "", layout_, "crash-checker", std::chrono::milliseconds(500)};
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

CheckResult Workload::Verify(const std::string& endpoint, const std::function<bool()>& alive) {
  CheckResult r;
  std::unique_ptr<Client> client;
  uint64_t unused = 0;
  for (const auto& keys : controls_) {
    auto call = [&](Client& c) { return CheckChain(c, keys, 0, /*control=*/true, &r, &unused); };
    if (!WithRetries(endpoint, alive, &client, call, &r)) return r;
  }
  uint64_t pending_acked = 0, pending_survived = 0;
  for (size_t i : Sample()) {
    const Chain& c = chains_[i];
    uint64_t survived = 0;
    auto call = [&](Client& cl) {
      return CheckChain(cl, c.keys, c.acked, /*control=*/false, &r, &survived);
    };
    if (!WithRetries(endpoint, alive, &client, call, &r)) return r;
    if (c.since != complete_checks_) continue;
    pending_acked += c.acked;
    pending_survived += survived;
  }
  auto read_stats = [&](Client& cl) -> absl::Status {
    auto stats = cl.Stats();
    if (!stats.ok()) return stats.status();
    for (const auto& t : stats->tiers()) {
      if (t.name() != "nvme") continue;
      r.nvme_pages = t.pages();
      r.checksum_errors = t.checksum_errors();
      r.recovered_pages = t.recovered_pages();
      r.dropped_records = t.dropped_records();
    }
    return absl::OkStatus();
  };
  if (!WithRetries(endpoint, alive, &client, read_stats, &r)) return r;
  r.pending_acked = pending_acked;
  r.pending_survived = pending_survived;
  r.complete = true;
  ++complete_checks_;
  return r;
}

void RunTotals::Add(const CheckResult& r) {
  corrupt += r.corrupt;
  phantom += r.phantom;
  ++checks;
  if (!r.complete) {
    ++incomplete_checks;
    return;
  }
  checksum_errors += r.checksum_errors;
  recovered_pages += r.recovered_pages;
  dropped_records += r.dropped_records;
  acked_before_kill += r.pending_acked;
  survivors += r.pending_survived;
  last = r;
}

void RunTotals::Print(const Workload& w, const std::map<std::string, int>& point_kills,
                      double secs) const {
  std::printf("crash-driver summary (%.1f s)\n", secs);
  std::printf("  kills                 %d (by kill point:", kills);
  for (const auto& [name, n] : point_kills) std::printf(" %s=%d", name.c_str(), n);
  std::printf(")\n  restarts              %d (checks %llu, cut short by a kill point %llu)\n",
              restarts, static_cast<unsigned long long>(checks),
              static_cast<unsigned long long>(incomplete_checks));
  std::printf("  pages sent / acked    %llu / %llu\n", static_cast<unsigned long long>(w.attempted()),
              static_cast<unsigned long long>(w.acked()));
  std::printf("  acked, then killed    %llu; present after the restart %llu (%.1f%%)\n",
              static_cast<unsigned long long>(acked_before_kill),
              static_cast<unsigned long long>(survivors),
              acked_before_kill ? 100.0 * survivors / acked_before_kill : 0.0);
  std::printf("  last check            %llu of %llu sampled pages present, nvme pages %llu\n",
              static_cast<unsigned long long>(last.present),
              static_cast<unsigned long long>(last.checked),
              static_cast<unsigned long long>(last.nvme_pages));
  std::printf("  corrupt reads         %llu (must be 0)\n", static_cast<unsigned long long>(corrupt));
  std::printf("  never-PUT pages hit   %llu (must be 0)\n", static_cast<unsigned long long>(phantom));
  std::printf("  nvme checksum_errors  %llu, recovered_pages %llu, dropped_records %llu (sums over restarts)\n",
              static_cast<unsigned long long>(checksum_errors),
              static_cast<unsigned long long>(recovered_pages),
              static_cast<unsigned long long>(dropped_records));
  std::fflush(stdout);
}

}  // namespace kvtier::crash
