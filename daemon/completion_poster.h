// Replies that threads outside the copy engine produce (the shared cache's
// lookup and reader threads) reach the frontend the way copy jobs' do: as
// frames on the inproc completion socket. One PUSH socket, used under a
// mutex (a ZeroMQ socket may change threads only with a barrier between).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "zmq.hpp"

namespace kvtier::daemon {

// The second frame of a completion that is not a reply but a GET to
// dispatch again (its shared-cache fetches are in the store): [routing id,
// marker, the keys stored from the cache (packed PageKeys), the request's
// frames]. Only the daemon writes to the completion
// socket, and no serialized Response starts with 0xff 0xff.
inline constexpr std::string_view kRedispatchMarker{"\xff\xffkvtier-redispatch"};

inline bool IsRedispatch(const std::vector<zmq::message_t>& frames) {
  return frames.size() >= 4 && frames[1].size() == kRedispatchMarker.size() &&
         std::string_view(static_cast<const char*>(frames[1].data()), frames[1].size()) ==
             kRedispatchMarker;
}

class CompletionPoster {
 public:
  // Connects to `endpoint`, which the frontend has bound with PULL.
  CompletionPoster(zmq::context_t& ctx, const std::string& endpoint)
      : push_(ctx, zmq::socket_type::push) {
    push_.set(zmq::sockopt::linger, 0);
    push_.connect(endpoint);
  }

  // Sends `frames` (routing id first) as one message. After Close, or once
  // the context is shutting down, drops them: the peer is gone anyway.
  // Thread-safe.
  void Post(std::vector<zmq::message_t> frames) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    try {
      for (size_t i = 0; i < frames.size(); ++i)
        push_.send(frames[i], i + 1 < frames.size() ? zmq::send_flags::sndmore
                                                    : zmq::send_flags::none);
    } catch (const zmq::error_t&) {
      closed_ = true;  // ETERM: the daemon is stopping
    }
  }

  // Closes the socket (before the context is closed). Thread-safe.
  void Close() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    push_.close();
  }

 private:
  absl::Mutex mu_;
  zmq::socket_t push_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvtier::daemon
