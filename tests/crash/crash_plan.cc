// Key plans of the crash loop's writer sessions (see crash_plan.h).
#include "tests/crash/crash_plan.h"

#include <algorithm>

namespace kvtier::crash {
namespace {

// Domain tags: keys of different kinds never coincide.
enum Tag : uint64_t { kPrivateChain = 1, kSystem, kPair, kTail, kRepeatPrivate, kRepeatShared,
                      kControl };

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t Mix(std::initializer_list<uint64_t> values) {
  uint64_t h = 0x243F6A8885A308D3ull;
  for (uint64_t v : values) h = SplitMix(h ^ SplitMix(v));
  return h;
}

}  // namespace

const char* KeyClassName(KeyClass c) {
  switch (c) {
    case KeyClass::kPrivate: return "private";
    case KeyClass::kPair: return "pair";
    case KeyClass::kSystem: return "system";
    case KeyClass::kRepeat: return "repeat";
  }
  return "?";
}

Planner::Planner(PlanOptions options)
    : options_(std::move(options)), layout_id_(options_.layout.Id()) {}

std::vector<PageKey> Planner::Segment(const PageKey& parent, std::initializer_list<uint64_t> tags,
                                      uint32_t pages) const {
  const uint64_t salt = Mix(tags) ^ SplitMix(options_.seed);
  std::vector<uint32_t> tokens(size_t{pages} * options_.layout.tokens_per_page);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<uint32_t>(SplitMix(salt + i) % 32000);
  return DeriveChain(layout_id_, options_.layout.tokens_per_page, tokens, parent);
}

std::vector<PageKey> Planner::Control(uint64_t i) const {
  return Segment(PageKey::Zero(), {kControl, i}, options_.chain_pages);
}

PlannedPut Planner::Next(uint32_t session, uint64_t phase, uint64_t round, uint64_t n,
                         std::mt19937_64& rng) const {
  if (options_.shared) return Shared(session, phase, round, n, rng);
  PlannedPut p;
  p.keys = Segment(PageKey::Zero(), {kPrivateChain, session, n}, options_.chain_pages);
  p.classes.assign(p.keys.size(), KeyClass::kPrivate);
  return p;
}

PlannedPut Planner::Shared(uint32_t session, uint64_t phase, uint64_t round, uint64_t n,
                           std::mt19937_64& rng) const {
  PlannedPut p;
  auto add = [&p](const std::vector<PageKey>& keys, KeyClass c) {
    p.keys.insert(p.keys.end(), keys.begin(), keys.end());
    p.classes.insert(p.classes.end(), keys.size(), c);
  };
  if (std::uniform_real_distribution<double>(0, 1)(rng) < options_.repeat_share) {
    // [A, A]: A new, either this session's own or the round's (which other
    // sessions repeat at the same moment).
    const PageKey a = rng() % 2 ? Segment(PageKey::Zero(), {kRepeatShared, phase, round}, 1)[0]
                                : Segment(PageKey::Zero(), {kRepeatPrivate, session, n}, 1)[0];
    add({a, a}, KeyClass::kRepeat);
    return p;
  }
  const uint32_t sys_pages = std::max(1u, options_.chain_pages / 4);
  const uint32_t pair_pages = std::max(1u, options_.chain_pages / 4);
  const uint32_t head = sys_pages + pair_pages;
  const uint32_t tail_max = options_.chain_pages > head ? options_.chain_pages - head : 0;
  // Every session agrees on the round's prompt: mostly a new one (raced by
  // all), sometimes one of four long-lived ones (deduplicated against pages
  // made durable in earlier runs).
  const uint64_t h = Mix({options_.seed, phase, round});
  add(h % 4 == 0 ? Segment(PageKey::Zero(), {kSystem, 0, (h >> 8) % 4}, sys_pages)
                 : Segment(PageKey::Zero(), {kSystem, 1, phase, round}, sys_pages),
      KeyClass::kSystem);
  if (options_.sessions > 1 && rng() % 5 != 0) {
    const uint32_t partner =
        (session + 1 + static_cast<uint32_t>(rng() % (options_.sessions - 1))) % options_.sessions;
    const uint64_t lo = std::min(session, partner), hi = std::max(session, partner);
    add(Segment(p.keys.back(), {kPair, lo, hi, phase, round, rng() % 2}, pair_pages),
        KeyClass::kPair);
  }
  const uint32_t tail = static_cast<uint32_t>(rng() % (tail_max + 1));
  if (tail > 0) add(Segment(p.keys.back(), {kTail, session, n}, tail), KeyClass::kPrivate);
  return p;
}

}  // namespace kvtier::crash
