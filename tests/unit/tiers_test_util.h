// Helpers shared by the tiers_test sources: small host tiers, keys from
// integers, and one-call PUTs.
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tiers/host/host_tier.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers::testing {

inline PageKey Key(uint64_t i) {
  PageKey k;
  std::memcpy(k.bytes.data(), &i, sizeof(i));
  k.bytes[15] = 0x5a;  // never the zero key
  return k;
}

inline std::unique_ptr<Tier> HostTier(uint64_t capacity, uint64_t slab) {
  HostTierConfig c;
  c.capacity_bytes = capacity;
  c.slab_bytes = slab;
  c.hugepages = HugepageMode::kOff;
  auto t = CreateHostTier(c);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(t).value();
}

// The eviction policy NoThreadConfig gives the host tier: a suite
// parameterized by policy (PolicyTest) sets it around each test, so the same
// assertions run under every policy.
inline EvictionPolicy& TestEviction() {
  static EvictionPolicy policy = EvictionPolicy::kLru;
  return policy;
}

inline TierManagerConfig NoThreadConfig() {
  TierManagerConfig c;
  c.start_evictor_thread = false;
  c.index_shards = 4;
  if (TestEviction() != EvictionPolicy::kLru) c.eviction[TierKind::kHost] = TestEviction();
  return c;
}

// A fixture whose tests run once per eviction policy:
//   class FooTest : public testing::PolicyTest {};
//   TEST_P(FooTest, ...) {...}
//   KVTIER_EVERY_POLICY(FooTest);
class PolicyTest : public ::testing::TestWithParam<EvictionPolicy> {
 protected:
  void SetUp() override { TestEviction() = GetParam(); }
  void TearDown() override { TestEviction() = EvictionPolicy::kLru; }
};
#define KVTIER_EVERY_POLICY(suite)                                                       \
  INSTANTIATE_TEST_SUITE_P(                                                              \
      Policies, suite,                                                                   \
      ::testing::Values(EvictionPolicy::kLru, EvictionPolicy::k2q, EvictionPolicy::kArc, \
                        EvictionPolicy::kS3Fifo, EvictionPolicy::kPrefix),               \
      [](const ::testing::TestParamInfo<EvictionPolicy>& i) {                            \
        return std::string(EvictionPolicyName(i.param));                                 \
      })

// A manager over host tiers of `pages_per_tier[i]` pages of `page` bytes.
inline std::unique_ptr<TierManager> MakeManager(std::vector<uint64_t> pages_per_tier, uint64_t page,
                                                TierManagerConfig config = NoThreadConfig()) {
  std::vector<std::unique_ptr<Tier>> tiers;
  for (uint64_t n : pages_per_tier) tiers.push_back(HostTier(n * page, page));
  auto m = TierManager::Create(config, std::move(tiers));
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(m).value();
}

inline std::vector<uint8_t> Bytes(uint64_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

// Reserve + Fill + Commit. Returns the status of Reserve (OK when deduped).
inline absl::Status Put(TierManager& m, NamespaceId ns, const PageKey& key, const PageKey& parent,
                        const std::vector<uint8_t>& data) {
  auto r = m.Reserve(ns, key, parent, data.size());
  if (!r.ok()) return r.status();
  if (r->outcome == PutOutcome::kDeduplicated) return absl::OkStatus();
  if (auto s = r->reservation.Fill(data.data()); !s.ok()) return s;
  r->reservation.Commit();
  return absl::OkStatus();
}

inline absl::Status Put(TierManager& m, NamespaceId ns, uint64_t key, uint64_t page) {
  return Put(m, ns, Key(key), PageKey::Zero(), Bytes(page, key));
}

inline bool Has(TierManager& m, NamespaceId ns, uint64_t key) {
  PageKey k = Key(key);
  return m.Lookup(ns, absl::MakeConstSpan(&k, 1)).hits == 1;
}

inline NamespaceId AddNs(TierManager& m, const std::string& name,
                         absl::flat_hash_map<TierKind, uint64_t> quota = {}) {
  NamespaceConfig c;
  c.name = name;
  c.quota_bytes = std::move(quota);
  auto id = m.AddNamespace(c);
  EXPECT_TRUE(id.ok()) << id.status();
  return *id;
}

}  // namespace kvtier::tiers::testing
