// PagePlacement: see page_placement.h.
#include "daemon/page_placement.h"

#include <time.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvtier::daemon {

PagePlacement::PagePlacement(std::vector<uint64_t> offsets,
                             const google::protobuf::RepeatedPtrField<wire::PageRun>& runs)
    : offsets_(std::move(offsets)) {
  runs_.reserve(runs.size());
  uint64_t at = 0;
  for (const wire::PageRun& r : runs) {
    runs_.push_back(Run{at, r.length(), r.buffer_offset()});
    at += r.length();  // the decoder bounds count and length: no overflow
    // Unchecked here (Check refuses runs outside the buffer); saturates.
    const uint64_t end = r.buffer_offset() + r.length();
    extent_ = std::max(extent_, end < r.length() ? UINT64_MAX : end);
  }
  auto by_offset = [](const Run& a, const Run& b) { return a.buffer_offset < b.buffer_offset; };
  if (!std::is_sorted(runs_.begin(), runs_.end(), by_offset)) {
    by_buffer_ = runs_;
    std::sort(by_buffer_.begin(), by_buffer_.end(), by_offset);
  }
}

namespace {

// Calls piece(buffer_offset, done, len) for each run-sized piece of page
// bytes [at, at + n), in page order (`done`: bytes before it); stops at the
// first piece it refuses.
template <typename Piece>
bool EachPiece(absl::Span<const PagePlacement::Run> runs, uint64_t at, uint64_t n, Piece piece) {
  auto it = std::upper_bound(runs.begin(), runs.end(), at, [](uint64_t v, const auto& r) {
    return v < r.page_offset + r.length;
  });
  for (uint64_t done = 0; done < n && it != runs.end(); ++it) {
    const uint64_t skip = at + done - it->page_offset;
    const uint64_t len = std::min(n - done, it->length - skip);
    if (!piece(it->buffer_offset + skip, done, len)) return false;
    done += len;
  }
  return true;
}

}  // namespace

uint64_t PagePlacement::MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

absl::Status PagePlacement::CheckDeadline(absl::string_view op) const {
  if (!Expired()) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(
      op, ": the request's deadline_ns (", deadline_ns_, ", CLOCK_MONOTONIC) passed ",
      (MonotonicNs() - deadline_ns_) / 1000000, " ms ago; nothing more was copied (a client in "
      "another time namespace than kvtierd must not send deadlines)"));
}

absl::Status PagePlacement::Check(absl::string_view op, const ClientBuffer& buffer,
                                  uint64_t page_bytes) const {
  if (runs_.empty()) {
    for (size_t i = 0; i < offsets_.size(); ++i) {
      absl::Status st = buffer.CheckRange(offsets_[i], page_bytes);
      if (!st.ok())
        return absl::OutOfRangeError(
            absl::StrCat(op, ": page ", i, " at offset ", offsets_[i], ": ", st.message()));
    }
    return absl::OkStatus();
  }
  const uint64_t covered = runs_.back().page_offset + runs_.back().length;
  if (covered != page_bytes)
    return absl::InvalidArgumentError(absl::StrCat(op, ": page_runs cover ", covered,
                                                   " bytes; the session's pages are ", page_bytes,
                                                   " bytes"));
  // Every run of every key inside the buffer: each run is checked once for
  // its own overflow, then each key only for the runs' extent around it.
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t j = 0; j < runs_.size(); ++j) {
    const Run& r = runs_[j];
    if (r.buffer_offset > buffer.size() || r.length > buffer.size() - r.buffer_offset)
      return absl::OutOfRangeError(absl::StrCat(op, ": page run ", j, " [", r.buffer_offset,
                                                " + ", r.length, ") lies outside buffer '",
                                                buffer.name(), "' of ", buffer.size(), " bytes"));
    lo = std::min(lo, r.buffer_offset);
    hi = std::max(hi, r.buffer_offset + r.length);
  }
  for (size_t i = 0; i < offsets_.size(); ++i) {
    const uint64_t o = offsets_[i];
    if (o > buffer.size() || hi > buffer.size() - o)
      return absl::OutOfRangeError(absl::StrCat(
          op, ": page ", i, " at offset ", o, ": its runs reach [", o + lo, ", ", o + hi,
          ") (unsigned), outside buffer '", buffer.name(), "' of ", buffer.size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::Status PagePlacement::CheckDisjoint(absl::string_view op, uint64_t at, uint64_t n,
                                          uint64_t page_bytes) const {
  auto overlaps = [&](uint64_t a, uint64_t len) { return a < at + n && at < a + len; };
  for (size_t i = 0; i < offsets_.size(); ++i) {
    if (runs_.empty()) {
      if (overlaps(offsets_[i], page_bytes))
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": [", at, ", ", at + n, ") overlaps page ", i, " at offset ",
                         offsets_[i]));
      continue;
    }
    for (size_t j = 0; j < runs_.size(); ++j)
      if (overlaps(offsets_[i] + runs_[j].buffer_offset, runs_[j].length))
        return absl::InvalidArgumentError(absl::StrCat(op, ": [", at, ", ", at + n,
                                                       ") overlaps run ", j, " of page ", i));
  }
  return absl::OkStatus();
}

bool PagePlacement::Write(ClientBuffer& buffer, size_t key, uint64_t at, const uint8_t* src,
                          uint64_t n) const {
  const uint64_t base = offsets_[key];
  if (runs_.empty()) return buffer.Write(base + at, src, n);
  if (buffer.MappedWrites(base + extent_)) {
    // Warm memory: every run through the mapping under one guard.
    return GuardedRun([&] { CopyRuns(buffer.data() + base, at, src, n); });
  }
  return EachPiece(runs_, at, n, [&](uint64_t off, uint64_t done, uint64_t len) {
    return buffer.Write(base + off, src + done, len);
  });
}

void PagePlacement::CopyRuns(uint8_t* key_base, uint64_t at, const uint8_t* src,
                             uint64_t n) const {
  if (at == 0 && n == runs_.back().page_offset + runs_.back().length) {  // the whole page
    for (const Run& r : BufferOrder())
      std::memcpy(key_base + r.buffer_offset, src + r.page_offset, r.length);
    return;
  }
  EachPiece(runs_, at, n, [&](uint64_t off, uint64_t done, uint64_t len) {
    std::memcpy(key_base + off, src + done, len);
    return true;
  });
}

const uint8_t* PagePlacement::Contiguous(const ClientBuffer& buffer, size_t key) const {
  return runs_.empty() ? buffer.data() + offsets_[key] : nullptr;
}

void PagePlacement::Gather(const ClientBuffer& buffer, size_t key, uint8_t* dst,
                           uint64_t page_bytes) const {
  const uint8_t* base = buffer.data() + offsets_[key];
  if (runs_.empty()) {
    std::memcpy(dst, base, page_bytes);
    return;
  }
  for (const Run& r : BufferOrder()) std::memcpy(dst + r.page_offset, base + r.buffer_offset, r.length);
}

}  // namespace kvtier::daemon
