// The random-access floor (memory_floor.h).
#include "tiers/store/bench/memory_floor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "tiers/common/huge_pages.h"

namespace kvtier::tiers::bench {

MemoryFloor::MemoryFloor(uint64_t bytes, uint64_t seed) {
  lines_ = std::max<uint64_t>(bytes / 64, 1);
  bytes_ = lines_ * 64;
  base_ = static_cast<char*>(MapHuge(bytes_));
  if (base_ == nullptr) {
    lines_ = bytes_ = 0;
    return;
  }
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < lines_; ++i) {
    const uint64_t to = (rng() % lines_) * 64;
    std::memcpy(base_ + i * 64, &to, sizeof(to));
  }
}

MemoryFloor::~MemoryFloor() {
  if (base_ != nullptr) UnmapHuge(base_, bytes_);
}

double MemoryFloor::MeasureP50Us(uint32_t keys, uint32_t ops, std::mt19937_64& rng) {
  if (lines_ == 0 || keys == 0 || ops == 0) return 0;
  constexpr uint32_t kAhead = 8;
  std::vector<uint64_t> first(keys);
  std::vector<double> us;
  us.reserve(ops);
  auto named = [this](uint64_t at) {
    uint64_t to;
    std::memcpy(&to, base_ + at, sizeof(to));
    return to;
  };
  volatile uint64_t sink = 0;
  for (uint32_t op = 0; op < ops; ++op) {
    for (uint64_t& f : first) f = (rng() % lines_) * 64;
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t sum = 0;
    for (uint32_t i = 0; i < std::min(keys, kAhead); ++i) __builtin_prefetch(base_ + first[i]);
    for (uint32_t i = 0; i < keys; ++i) {
      if (i + kAhead < keys) __builtin_prefetch(base_ + first[i + kAhead]);
      sum += named(named(first[i]));
    }
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    sink = sink + sum;
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace kvtier::tiers::bench
