// The crash loop's workload and checker: writer sessions (each a kvtier::Client
// on its own thread) PUT chains planned by crash_plan.h — private ones, or
// chains that overlap across sessions — and the ledger (crash_ledger.h) keeps
// what each sent and what the daemon acknowledged. After a restart the checker
// GETs the recently acknowledged pages and a sample of older ones and checks
// them byte for byte, and probes keys never PUT.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvtier/client.h"
#include "kvtier/layout.h"
#include "kvtier/page_key.h"
#include "tests/crash/crash_ledger.h"
#include "tests/crash/crash_plan.h"

namespace kvtier::crash {

// 1 layer x {K,V} x 1 head x tokens_per_page x 128 dims x fp16: 128 KiB pages
// at 256 tokens, 8 KiB at 16 (many more pages, more slot reuse, a smaller disk).
Layout CrashLayout(uint32_t tokens_per_page = 256);

struct WorkloadOptions {
  uint64_t seed = 1;            // part of every key: runs never share keys
  std::string dir;              // the per-session logs go here
  uint32_t chain_pages = 8;     // longest PUT
  size_t verify_max = 3000;     // pages checked per restart (recent acks always)
  uint32_t sessions = 1;        // concurrent writer sessions
  bool shared = false;          // chains overlap across sessions (crash_plan.h)
  double repeat_share = 0.05;   // shared: share of PUTs that repeat a key ([A, A])
  uint32_t tokens_per_page = 256;
  int round_ms = 50;            // shared: how long the sessions' shared keys stay the same
  int put_timeout_ms = 300;     // a PUT unanswered this long is unacknowledged
};

// One check after a restart.
struct CheckResult {
  bool complete = false;        // false: the daemon died mid-check (a kill point)
  uint64_t checked = 0;         // pages asked for (GET)
  uint64_t present = 0;         // of those, served
  uint64_t lookup_hits = 0;     // leading LOOKUP hits over the checked batches
  uint64_t corrupt = 0;         // served with wrong bytes or size: must be 0
  uint64_t phantom = 0;         // served although never PUT: must be 0
  uint64_t acked_checked = 0;   // acknowledged pages asked for...
  uint64_t acked_present = 0;   // ...and served
  uint64_t pending_acked = 0;   // acknowledged since the last complete check...
  uint64_t pending_survived = 0;  // ...and present now
  uint64_t newly_lost = 0;      // acknowledged, missing, and never found missing before
  uint64_t missing_by_class[kKeyClasses] = {};  // acknowledged and missing, per class
  // The "nvme" tier of STATS at the end of a complete check.
  uint64_t nvme_pages = 0, nvme_used = 0, nvme_capacity = 0, checksum_errors = 0,
           recovered_pages = 0, dropped_records = 0;
  std::string errors;           // non-empty: a check failed (the test fails)
  std::string missing_example;  // one acknowledged key found missing
};

class Workload {
 public:
  explicit Workload(WorkloadOptions options);

  // Runs the writer sessions until `stop` is set; a request that fails (the
  // daemon was killed) leaves its pages unacknowledged. Each session
  // reconnects after an error. Returns when every session has stopped.
  void PutUntil(const std::string& endpoint, const std::atomic<bool>& stop);
  // Reads back every page acknowledged since the last complete check, a
  // sample of older ones (up to verify_max in all), a few pages sent but not
  // acknowledged, and never-sent control keys; with `all`, every page ever
  // acknowledged. `alive` tells a daemon that died (a kill point) from one
  // that is slow.
  CheckResult Verify(const std::string& endpoint, const std::function<bool()>& alive,
                     bool all = false);

  // Bounds the store of a long loop: when more than `max_live` pages were
  // sent and not retired, DELETEs the oldest down to three quarters of it.
  // They stop being expected first, so a kill during the DELETE costs
  // nothing; present or not, their bytes must still be right. Then waits
  // for the daemon to delete their NVMe records. Call between a complete
  // check and the next run. Returns the pages retired.
  uint64_t Retire(const std::string& endpoint, size_t max_live);

  const Ledger& ledger() const { return ledger_; }
  uint64_t retired() const { return retired_; }
  uint64_t pages_ever_lost(uint64_t by_class[kKeyClasses]) const;

 private:
  void Writer(uint32_t session, uint64_t phase, const std::string& endpoint,
              const std::atomic<bool>& stop);
  std::vector<uint32_t> Sample(size_t max);
  absl::Status CheckBatch(Client& client, const std::vector<uint32_t>& batch, CheckResult* r);
  absl::Status CheckControls(Client& client, CheckResult* r);
  bool WithRetries(const std::string& endpoint, const std::function<bool()>& alive,
                   std::unique_ptr<Client>* client,
                   const std::function<absl::Status(Client&)>& call, CheckResult* r);

  WorkloadOptions options_;
  Layout layout_;
  Planner planner_;
  Ledger ledger_;
  std::mt19937_64 rng_;
  std::vector<uint64_t> next_put_;  // per session, over the whole run
  uint64_t phase_ = 0;              // PutUntil calls so far
  uint64_t retired_ = 0;
};

struct RunTotals {
  int kills = 0, restarts = 0;
  uint64_t corrupt = 0, phantom = 0, checksum_errors = 0, recovered_pages = 0,
           dropped_records = 0, checks = 0, incomplete_checks = 0;
  uint64_t acked_before_kill = 0, survivors = 0;  // acknowledged since the check before
  uint64_t acked_checked = 0, acked_present = 0;  // every acknowledged page checked
  uint64_t checks_with_loss = 0, max_nvme_used = 0, nvme_capacity = 0;
  uint64_t full_checks = 0;  // complete checks that read every acknowledged page
  CheckResult last;  // the last complete check

  void Add(const CheckResult& r);
  void Print(const Workload& w, const std::map<std::string, int>& point_kills, double secs) const;
};

}  // namespace kvtier::crash
