// lookup_async: LOOKUPs for schedulers that must never block a step on the
// daemon. They run on a worker thread over a second session of their own (the
// C++ Client is one session per thread), and hand back a LookupFuture.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "client.h"

namespace kvtier::py {

// One pending or finished LOOKUP (one chain, or a batch of chains). Shared
// by the worker and the future.
struct LookupJob {
  std::vector<PageKey> keys;  // batch: every chain, one after another
  bool batch = false;
  ParsedChains chains;        // batch only
  LookupOptions options;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  // One result per chain (one for a single-chain LOOKUP).
  absl::StatusOr<std::vector<LookupResult>> result = absl::UnknownError("not run");
};

class AsyncLookups {
 public:
  explicit AsyncLookups(ClientOptions options);
  // Fails pending jobs with Cancelled and joins the worker. Call without the GIL.
  ~AsyncLookups();
  void Submit(std::shared_ptr<LookupJob> job);

 private:
  void Run();
  ClientOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<LookupJob>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

void BindAsyncMethods(py::module_& m, py::class_<PyClient>& c);

}  // namespace kvtier::py
