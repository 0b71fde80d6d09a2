// The crash loop's record of what was sent and what the daemon acknowledged,
// kept in memory (what the checker reads) and in one log per writer session
// (for a post-mortem of a kept work directory). A key counts as acknowledged
// from the first PUT reply that covered it — stored or deduplicated, from any
// session: in write-through mode both promise a durable page. Pages a reply
// calls not_stored (the chain's tail: docs/PROTOCOL.md cuts a chain there),
// and every page of a PUT that got no reply, are not.
#pragma once

#include <atomic>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kvtier/client.h"
#include "tests/crash/crash_plan.h"

namespace kvtier::crash {

struct KeyRecord {
  PageKey key;
  KeyClass cls = KeyClass::kPrivate;
  bool acked = false;       // acknowledged (and not retired since): must be present
  bool ever_acked = false;
  bool retired = false;     // DELETEd by the checker to bound the store
  uint64_t epoch = 0;       // complete checks done before it was (re)acknowledged
  bool lost = false;        // found missing by a check although acknowledged
};

class Ledger {
 public:
  Ledger(std::string dir, uint32_t sessions);

  // Writer side, thread-safe. Each call has written and flushed its log line
  // and updated the record before it returns, so the next request can only
  // start after the record of this one's ack exists.
  void Sent(uint32_t session, uint64_t put, const PlannedPut& p);
  // Returns the number of pages the reply acknowledged (its leading
  // stored + deduplicated keys). A reply whose counts do not add up to the
  // keys sent is logged and counted (bad_replies).
  uint32_t Replied(uint32_t session, uint64_t put, const PlannedPut& p, const PutResult& r);
  void Failed(uint32_t session, uint64_t put, const absl::Status& st);

  // Checker side: call only while no writer runs.
  std::vector<KeyRecord>& records() { return records_; }
  const std::vector<KeyRecord>& records() const { return records_; }
  uint64_t epoch() const { return epoch_; }
  void NextEpoch() { ++epoch_; }

  uint64_t pages_sent() const { return pages_sent_.load(); }
  uint64_t pages_acked() const { return pages_acked_.load(); }  // summed over replies
  uint64_t puts_refused() const { return puts_refused_.load(); }  // error replies (not timeouts)
  uint64_t bad_replies() const { return bad_replies_.load(); }
  std::string first_bad_reply() const;
  uint64_t unique_acked() const;  // distinct keys ever acknowledged

 private:
  uint32_t Index(const PageKey& key, KeyClass cls) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<PageKey, uint32_t> index_ ABSL_GUARDED_BY(mu_);
  std::vector<KeyRecord> records_;  // appended under mu_; read by the checker alone
  uint64_t epoch_ = 0;
  std::string first_bad_reply_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<std::ofstream>> logs_;  // one per session, its thread only
  std::atomic<uint64_t> pages_sent_{0}, pages_acked_{0}, puts_refused_{0}, bad_replies_{0};
};

}  // namespace kvtier::crash
