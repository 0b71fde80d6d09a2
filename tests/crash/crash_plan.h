// What each writer session of the crash loop PUTs next. Private mode: chains
// no other session ever sends. Shared mode: chains that overlap the way an
// inference fleet's do — a system prompt every session sends, then pages
// shared by a pair of sessions, then a private tail — plus the odd PUT that
// repeats a key inside itself ([A, A]). Keys are real prefix keys (each page's
// key hashes its parent's), so equal keys mean equal prefixes, and page bytes
// are a function of the key (tools/common/page_pattern.h): every session's
// copy of a shared page is byte-identical.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kvtier/layout.h"
#include "kvtier/page_key.h"

namespace kvtier::crash {

// Who may send a key: the loss of each class is reported apart.
enum class KeyClass : uint8_t { kPrivate = 0, kPair = 1, kSystem = 2, kRepeat = 3 };
inline constexpr int kKeyClasses = 4;
const char* KeyClassName(KeyClass c);

struct PlannedPut {
  std::vector<PageKey> keys;      // PUT order; keys[0]'s parent is zero
  std::vector<KeyClass> classes;  // one per key
};

struct PlanOptions {
  uint64_t seed = 1;          // part of every key: runs with other seeds share none
  Layout layout;
  uint32_t chain_pages = 8;   // longest PUT
  uint32_t sessions = 1;
  bool shared = false;        // overlapping chains (else private ones)
  double repeat_share = 0.05; // shared mode: share of PUTs that are [A, A]
};

// Thread-safe (const); each session brings its own random generator.
class Planner {
 public:
  explicit Planner(PlanOptions options);

  // The n-th PUT of `session` (n counts over the whole run). `phase` counts
  // the driver's runs and `round` the time slices inside one (every session
  // sees the same slice at the same moment): the system prompt and the pair
  // pages of a round are new keys that several sessions send at about the
  // same time, which is when two reservations of one key can race.
  PlannedPut Next(uint32_t session, uint64_t phase, uint64_t round, uint64_t n,
                  std::mt19937_64& rng) const;
  // A chain no session ever PUTs (the checker's phantom probe).
  std::vector<PageKey> Control(uint64_t i) const;

  const Layout& layout() const { return options_.layout; }

 private:
  // `pages` chained keys after `parent`, their tokens a function of the tags.
  std::vector<PageKey> Segment(const PageKey& parent, std::initializer_list<uint64_t> tags,
                               uint32_t pages) const;
  PlannedPut Shared(uint32_t session, uint64_t phase, uint64_t round, uint64_t n,
                    std::mt19937_64& rng) const;

  PlanOptions options_;
  uint64_t layout_id_;
};

}  // namespace kvtier::crash
