// GetTimer: the stages of one GET (daemon/latency.h GetStages), stamped from
// the threads it runs on: received by the frontend, copy parts submitted
// (after any wait for promotions), first part running, reply built.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "daemon/copy_engine.h"
#include "daemon/latency.h"

namespace kvtier::daemon {

class GetTimer {
 public:
  GetTimer() : received_(MonotonicNanos()) {}
  // The GET's copy parts go to the engine now (once, on the submitting thread).
  void Submitted() { submitted_.store(MonotonicNanos(), std::memory_order_relaxed); }
  // Wraps each part so that the first one to run stamps the start of the copy.
  void Wrap(std::vector<CopyEngine::Part>& parts, std::shared_ptr<GetTimer> self) {
    for (CopyEngine::Part& p : parts)
      p = [self, p = std::move(p)] {
        int64_t none = 0;
        self->first_part_.compare_exchange_strong(none, MonotonicNanos(), std::memory_order_relaxed);
        p();
      };
  }
  // The reply is built: records the GET into `stages`.
  void Finish(GetStages& stages) const {
    const int64_t now = MonotonicNanos();
    int64_t sub = submitted_.load(std::memory_order_relaxed);
    int64_t first = first_part_.load(std::memory_order_relaxed);
    if (sub == 0) sub = received_;
    if (first == 0) first = sub;
    auto span = [](int64_t a, int64_t b) { return uint64_t(std::max<int64_t>(0, b - a)); };
    stages.Record(span(received_, now),
                  {span(received_, sub), span(sub, first), span(first, now)});
  }

 private:
  const int64_t received_;
  std::atomic<int64_t> submitted_{0};
  std::atomic<int64_t> first_part_{0};
};

}  // namespace kvtier::daemon
