// The crash loop's workload and checker: PUTs prefix chains of pages whose
// bytes are a pure function of their key (tools/common/page_pattern.h), logs
// every key it sends and every key the daemon acknowledged, and after a
// restart checks what the daemon reports present against those logs.
#pragma once

#include <atomic>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kvtier/client.h"
#include "kvtier/layout.h"
#include "kvtier/page_key.h"

namespace kvtier::crash {

// 128 KiB pages: 1 layer x {K,V} x 1 head x 256 tokens x 128 dims x fp16.
Layout CrashLayout();

struct WorkloadOptions {
  uint64_t seed = 1;         // part of every key: runs never share keys
  std::string dir;           // acked.log and attempted.log go here
  uint32_t chain_pages = 8;  // pages per PUT
  size_t verify_max = 3000;  // pages checked per restart (recent ones always)
};

// One check after a restart.
struct CheckResult {
  bool complete = false;       // false: the daemon died mid-check (a kill point)
  uint64_t checked = 0;        // pages asked for (GET)
  uint64_t present = 0;        // of those, served
  uint64_t lookup_hits = 0;    // leading LOOKUP hits over the checked chains
  uint64_t corrupt = 0;        // served with wrong bytes or size: must be 0
  uint64_t phantom = 0;        // served although never PUT: must be 0
  uint64_t pending_acked = 0;  // acknowledged since the last complete check...
  uint64_t pending_survived = 0;  // ...and present now
  // The "nvme" tier of STATS at the end of a complete check.
  uint64_t nvme_pages = 0, checksum_errors = 0, recovered_pages = 0, dropped_records = 0;
  std::string errors;  // non-empty: a check failed (the test fails)
};

class Workload {
 public:
  explicit Workload(WorkloadOptions options);

  // PUTs new chains until `stop` is set; a failed request (the daemon was
  // killed) ends the chain unacknowledged. Reconnects after a spurious error.
  void PutUntil(const std::string& endpoint, const std::atomic<bool>& stop);
  // Reads back a sample of every key ever sent plus never-sent control keys.
  // `alive` tells a daemon that died (a kill point) from one that is slow.
  CheckResult Verify(const std::string& endpoint, const std::function<bool()>& alive);

  uint64_t attempted() const { return attempted_; }
  uint64_t acked() const { return acked_; }

 private:
  struct Chain {
    std::vector<PageKey> keys;  // those sent
    uint32_t acked = 0;         // leading keys the daemon acknowledged
    uint64_t since = 0;         // complete checks done before it was sent
  };
  std::vector<PageKey> ChainKeys(uint64_t id) const;
  std::vector<size_t> Sample();
  absl::Status CheckChain(Client& client, const std::vector<PageKey>& keys, uint32_t acked,
                          bool control, CheckResult* r, uint64_t* acked_present);
  bool WithRetries(const std::string& endpoint, const std::function<bool()>& alive,
                   std::unique_ptr<Client>* client,
                   const std::function<absl::Status(Client&)>& call, CheckResult* r);

  WorkloadOptions options_;
  Layout layout_;
  std::mt19937_64 rng_;
  std::vector<Chain> chains_;
  std::vector<std::vector<PageKey>> controls_;  // never PUT
  uint64_t next_chain_ = 0, attempted_ = 0, acked_ = 0, complete_checks_ = 0;
  std::ofstream attempted_log_, acked_log_;
};

struct RunTotals {
  int kills = 0, restarts = 0;
  uint64_t corrupt = 0, phantom = 0, checksum_errors = 0, recovered_pages = 0,
           dropped_records = 0, checks = 0, incomplete_checks = 0;
  uint64_t acked_before_kill = 0, survivors = 0;
  CheckResult last;  // the last complete check

  void Add(const CheckResult& r);
  void Print(const Workload& w, const std::map<std::string, int>& point_kills, double secs) const;
};

}  // namespace kvtier::crash
