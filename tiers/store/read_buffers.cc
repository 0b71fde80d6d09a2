// Bounce buffers of the store's read operations; see read_buffers.h.
#include "tiers/store/internal/read_buffers.h"

#include <vector>

namespace kvtier::tiers::internal {
namespace {

// Bounce bytes a thread keeps for its next read.
constexpr uint64_t kKeepBounceBytes = 64ull << 20;

thread_local std::vector<Bounce> t_bounce;  // this thread's spare buffers

}  // namespace

Bounce TakeBounce(uint64_t room) {
  for (size_t k = t_bounce.size(); k-- > 0;) {
    if (t_bounce[k].room < room) continue;
    Bounce b = std::move(t_bounce[k]);
    t_bounce.erase(t_bounce.begin() + static_cast<ptrdiff_t>(k));
    return b;
  }
  return Bounce{std::unique_ptr<uint8_t, FreeBytes>(
                    static_cast<uint8_t*>(std::aligned_alloc(kReadAlign, room))),
                room};
}

void GiveBounce(Bounce b) {
  if (b.bytes == nullptr) return;
  uint64_t kept = b.room;
  for (const Bounce& o : t_bounce) kept += o.room;
  if (kept <= kKeepBounceBytes) t_bounce.push_back(std::move(b));
}

}  // namespace kvtier::tiers::internal
