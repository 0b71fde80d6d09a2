// Copy engine worker pool; see copy_engine.h.
#include "daemon/copy_engine.h"

#include <algorithm>

#include "spdlog/spdlog.h"

namespace kvtier::daemon {

absl::StatusOr<std::unique_ptr<CopyEngine>> CopyEngine::Create(zmq::context_t& ctx,
                                                               std::string completion_endpoint,
                                                               int threads, Order order) {
  if (threads < 1 || threads > 256)
    return absl::InvalidArgumentError("copy engine threads must be in [1, 256]");
  std::unique_ptr<CopyEngine> engine(new CopyEngine(ctx, std::move(completion_endpoint), order));
  for (int i = 0; i < threads; ++i) engine->workers_.emplace_back([e = engine.get()] { e->WorkerLoop(); });
  return engine;
}

CopyEngine::~CopyEngine() { Shutdown(); }

void CopyEngine::Submit(std::vector<Part> parts, Finish finish) {
  auto job = std::make_shared<Job>();
  job->parts = std::move(parts);
  job->finish = std::move(finish);
  job->remaining.store(std::max<size_t>(job->parts.size(), 1));
  absl::MutexLock lock(&mu_);
  if (job->parts.empty()) {
    queue_.push_back(Task{job, SIZE_MAX});
    return;
  }
  for (size_t i = 0; i < job->parts.size(); ++i) queue_.push_back(Task{job, i});
}

void CopyEngine::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
  }
  for (auto& t : workers_)
    if (t.joinable()) t.join();
  workers_.clear();
}

void CopyEngine::WorkerLoop() {
  zmq::socket_t push(ctx_, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 1000);
  push.connect(endpoint_);
  for (;;) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping and drained
      if (order_ == Order::kFifo) {
        task = std::move(queue_.front());
        queue_.pop_front();
      } else {
        task = std::move(queue_.back());
        queue_.pop_back();
      }
    }
    if (task.part != SIZE_MAX) task.job->parts[task.part]();
    if (task.job->remaining.fetch_sub(1) == 1) Complete(*task.job, push);
  }
}

void CopyEngine::Complete(Job& job, zmq::socket_t& push) {
  std::vector<zmq::message_t> frames = job.finish();
  job.parts.clear();  // release pins/buffers held by parts before the reply leaves
  for (size_t i = 0; i < frames.size(); ++i) {
    auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    if (!push.send(frames[i], flags)) spdlog::error("copy engine: completion send failed");
  }
}

std::vector<std::pair<size_t, size_t>> SplitRanges(size_t n, uint64_t item_bytes, int max_parts,
                                                   uint64_t min_part_bytes) {
  std::vector<std::pair<size_t, size_t>> out;
  if (n == 0) return out;
  uint64_t total = n * item_bytes;
  size_t parts = std::max<uint64_t>(1, std::min<uint64_t>(max_parts, total / std::max<uint64_t>(min_part_bytes, 1)));
  parts = std::min(parts, n);
  size_t per = n / parts, extra = n % parts, begin = 0;
  for (size_t p = 0; p < parts; ++p) {
    size_t len = per + (p < extra ? 1 : 0);
    out.emplace_back(begin, begin + len);
    begin += len;
  }
  return out;
}

}  // namespace kvtier::daemon
