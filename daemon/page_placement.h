// Where the pages of a GET or PUT lie in a registered buffer: each page
// whole at its key's offset, or cut into runs that every key shares (an
// engine whose KV blocks are not page-contiguous: docs/PROTOCOL.md,
// "Scattered pages"). The one place transfers turn (key, byte of a page)
// into a byte of the buffer, so every GET path and PUT checks and copies
// through the same rules.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/client_buffer.h"
#include "kvtier.pb.h"

namespace kvtier::daemon {

class PagePlacement {
 public:
  struct Run {
    uint64_t page_offset;  // where the run starts in the page
    uint64_t length;
    uint64_t buffer_offset;  // from the key's offset
  };

  PagePlacement() = default;
  // Contiguous pages at `offsets` (one per key).
  PagePlacement(std::vector<uint64_t> offsets) : offsets_(std::move(offsets)) {}  // NOLINT
  // `runs` empty: contiguous pages. The request decoder checked the shape
  // (count, non-empty runs); Check does the rest.
  PagePlacement(std::vector<uint64_t> offsets,
                const google::protobuf::RepeatedPtrField<wire::PageRun>& runs);
  // What a buffer GET or PUT (wire::Get, wire::Put) names: its offsets,
  // page_runs and deadline_ns.
  template <typename Msg>
  static PagePlacement Of(const Msg& m) {
    PagePlacement p(std::vector<uint64_t>(m.offsets().begin(), m.offsets().end()),
                    m.page_runs());
    p.deadline_ns_ = m.deadline_ns();
    return p;
  }

  // The runs cover exactly `page_bytes`, and every byte of every key lies
  // inside `buffer` (OutOfRange naming the key, run and range otherwise;
  // InvalidArgument for runs that do not add up to a page). O(keys + runs).
  absl::Status Check(absl::string_view op, const ClientBuffer& buffer, uint64_t page_bytes) const;
  // OutOfRange/InvalidArgument when any byte of any page overlaps [at, at + n).
  absl::Status CheckDisjoint(absl::string_view op, uint64_t at, uint64_t n,
                             uint64_t page_bytes) const;

  // The client's deadline (Get/Put.deadline_ns: the host's CLOCK_MONOTONIC
  // in ns, 0 none): past it, nothing more is copied into or out of the
  // buffer, so a client that gave up on the call knows its memory is its
  // own again. Checked before each page's copy.
  bool Expired() const { return deadline_ns_ != 0 && MonotonicNs() > deadline_ns_; }
  // DeadlineExceeded naming `op` when Expired().
  absl::Status CheckDeadline(absl::string_view op) const;
  static uint64_t MonotonicNs();

  size_t keys() const { return offsets_.size(); }
  bool scattered() const { return !runs_.empty(); }
  absl::Span<const uint64_t> offsets() const { return offsets_; }

  // Copies bytes [at, at + n) of page `key` from `src` into the buffer
  // (ClientBuffer::Write per run touched); false when the buffer faulted.
  bool Write(ClientBuffer& buffer, size_t key, uint64_t at, const uint8_t* src, uint64_t n) const;
  // The page's bytes in the buffer when contiguous; nullptr when scattered.
  const uint8_t* Contiguous(const ClientBuffer& buffer, size_t key) const;
  // Copies page `key` (page_bytes) out of the buffer into `dst`. Not
  // guarded: run it under GuardedRun.
  void Gather(const ClientBuffer& buffer, size_t key, uint8_t* dst, uint64_t page_bytes) const;

 private:
  // Bytes [at, at + n) of a page whose runs start at key_base (unguarded).
  void CopyRuns(uint8_t* key_base, uint64_t at, const uint8_t* src, uint64_t n) const;
  absl::Span<const Run> BufferOrder() const { return by_buffer_.empty() ? runs_ : by_buffer_; }

  std::vector<uint64_t> offsets_;
  std::vector<Run> runs_;  // in page order, tiling the page
  uint64_t extent_ = 0;    // bytes from a key's offset its runs reach
  // The runs in buffer order: a whole page is copied in that order, so the
  // client's memory is written (or read) front to back. Empty when runs_
  // already are.
  std::vector<Run> by_buffer_;
  uint64_t deadline_ns_ = 0;
};

}  // namespace kvtier::daemon
