// The page API end to end against a real kvtierd: PUT/LOOKUP/GET through a
// registered shm buffer and inline (ipc and tcp), dedup, leading-hit LOOKUP,
// DELETE, eviction under pressure and concurrent clients.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "client/wire_calls.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kvtier/shm_buffer.h"
#include "tests/integration/daemon_fixture.h"
#include "tools/common/page_pattern.h"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;

absl::StatusOr<PutResult> PutInline(Client& c, absl::Span<const PageKey> keys,
                                    const PageKey& parent = PageKey::Zero()) {
  std::vector<std::string> pages;
  for (const PageKey& k : keys) pages.push_back(PatternPage(k, kPage));
  std::vector<absl::string_view> views(pages.begin(), pages.end());
  return c.PutInline(keys, parent, views);
}

// Every page of `keys` comes back byte-exact through GetInline.
void ExpectInlineIntact(Client& c, absl::Span<const PageKey> keys) {
  auto pages = c.GetInline(keys);
  ASSERT_TRUE(pages.ok()) << pages.status();
  ASSERT_EQ(pages->size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ((*pages)[i].size(), kPage) << "page " << i << " missing";
    EXPECT_EQ(tools::CheckPattern(keys[i], reinterpret_cast<const uint8_t*>((*pages)[i].data()),
                                  kPage),
              kPage)
        << "page " << i << " corrupted";
  }
}

// PUTs `n` chains of `len` small pages (seeds seed, seed+1, ...) through one
// registered buffer, each fully stored; returns the chains.
std::vector<std::vector<PageKey>> PutChains(Client& c, const ShmBuffer& buf, BufferId id,
                                            uint64_t seed, size_t n, size_t len) {
  std::vector<std::vector<PageKey>> chains;
  for (size_t ch = 0; ch < n; ++ch) {
    chains.push_back(MakeChain(SmallLayout(), seed + ch, len));
    for (size_t i = 0; i < len; ++i)
      tools::FillPattern(chains.back()[i], buf.data() + i * kPage, kPage);
    auto put = c.Put(chains.back(), PageKey::Zero(), id, Offsets(len));
    EXPECT_TRUE(put.ok()) << "chain " << ch << ": " << put.status();
    if (!put.ok()) continue;
    EXPECT_EQ(put->stored, len) << "chain " << ch;
    EXPECT_EQ(put->not_stored, 0u) << "chain " << ch;
  }
  return chains;
}

const wire::NamespaceStats* FindNs(const wire::StatsReply& s, const std::string& name) {
  for (const auto& n : s.namespaces())
    if (n.name() == name) return &n;
  return nullptr;
}

using DataPathTest = DaemonTest;

TEST_F(DataPathTest, PutLookupGetThroughShmBufferIsByteExact) {
  auto c = Connect();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->page_bytes(), kPage);
  const size_t n = 8;
  auto keys = MakeChain(SmallLayout(), 1, n);
  auto buf = ShmBuffer::Create(2 * n * kPage);
  ASSERT_TRUE(buf.ok()) << buf.status();
  auto id = c->RegisterBuffer((*buf)->name(), (*buf)->size());
  ASSERT_TRUE(id.ok()) << id.status();
  for (size_t i = 0; i < n; ++i) tools::FillPattern(keys[i], (*buf)->data() + i * kPage, kPage);

  auto put = c->Put(keys, PageKey::Zero(), *id, Offsets(n));
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->stored, n);
  EXPECT_EQ(put->deduplicated, 0u);
  EXPECT_EQ(put->not_stored, 0u);

  auto look = c->Lookup(keys);
  ASSERT_TRUE(look.ok()) << look.status();
  EXPECT_EQ(look->hits, n);
  ASSERT_EQ(look->tiers.size(), n);
  for (TierKind t : look->tiers) EXPECT_EQ(t, TierKind::kHost);

  // Into the second half of the buffer, in reverse order.
  std::memset((*buf)->data() + n * kPage, 0, n * kPage);
  std::vector<uint64_t> offsets(n);
  for (size_t i = 0; i < n; ++i) offsets[i] = (2 * n - 1 - i) * kPage;
  auto got = c->Get(keys, *id, offsets);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ((*got)[i], TierKind::kHost);
    EXPECT_EQ(tools::CheckPattern(keys[i], (*buf)->data() + offsets[i], kPage), kPage)
        << "page " << i;
  }
  // A miss leaves its destination untouched.
  auto other = MakeChain(SmallLayout(), 2, 1);
  std::memset((*buf)->data(), 0xAB, kPage);
  auto miss = c->Get(other, *id, Offsets(1));
  ASSERT_TRUE(miss.ok()) << miss.status();
  EXPECT_EQ((*miss)[0], TierKind::kNone);
  EXPECT_EQ((*buf)->data()[0], 0xAB);
  EXPECT_EQ((*buf)->data()[kPage - 1], 0xAB);
  EXPECT_TRUE(c->UnregisterBuffer(*id).ok());
  EXPECT_FALSE(c->Get(keys, *id, Offsets(n)).ok());  // unregistered now
}

TEST_F(DataPathTest, InlinePutGetOverIpc) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto keys = MakeChain(SmallLayout(), 3, 5);
  auto put = PutInline(*c, keys);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->stored, 5u);
  ExpectInlineIntact(*c, keys);
  // A buffer-less reader sees pages written by a buffer-less writer.
  auto c2 = Connect();
  ASSERT_TRUE(c2);
  ExpectInlineIntact(*c2, keys);
}

// A chain stored through a shm buffer by a local client is readable by a remote one.
class TcpTest : public DaemonTest {
 protected:
  DaemonOptions DaemonOpts() const override { return {.tcp = true}; }
};

TEST_F(TcpTest, InlinePutGetOverTcp) {
  ASSERT_FALSE(daemon_->tcp_endpoint().empty());
  auto remote = ConnectTo(daemon_->tcp_endpoint());
  ASSERT_TRUE(remote);
  auto keys = MakeChain(SmallLayout(), 4, 6);
  auto put = PutInline(*remote, keys);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->stored, 6u);
  ExpectInlineIntact(*remote, keys);
  auto look = remote->Lookup(keys);
  ASSERT_TRUE(look.ok());
  EXPECT_EQ(look->hits, 6u);

  // Local (ipc, shm buffer) and remote (tcp, inline) see the same store.
  auto local = ConnectTo(daemon_->ipc_endpoint());
  ASSERT_TRUE(local);
  auto buf = ShmBuffer::Create(6 * kPage);
  ASSERT_TRUE(buf.ok());
  auto id = local->RegisterBuffer((*buf)->name(), (*buf)->size());
  ASSERT_TRUE(id.ok()) << id.status();
  auto got = local->Get(keys, *id, Offsets(6));
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < 6; ++i)
    EXPECT_EQ(tools::CheckPattern(keys[i], (*buf)->data() + i * kPage, kPage), kPage);
}

TEST_F(DataPathTest, SecondPutIsDeduplicated) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto keys = MakeChain(SmallLayout(), 5, 4);
  auto first = PutInline(*c, keys);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->stored, 4u);
  auto second = PutInline(*c, keys);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->stored, 0u);
  EXPECT_EQ(second->deduplicated, 4u);
  // A longer chain sharing the prefix stores only its new tail.
  auto longer = MakeChain(SmallLayout(), 5, 6);
  auto third = PutInline(*c, longer);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->stored, 2u);
  EXPECT_EQ(third->deduplicated, 4u);
  auto stats = WireStats(*c);
  ASSERT_TRUE(stats.ok()) << stats.status();
  const auto* ns = FindNs(*stats, "default");
  ASSERT_NE(ns, nullptr);
  EXPECT_EQ(ns->pages(), 6u);
  EXPECT_EQ(ns->puts(), 6u);
  EXPECT_EQ(ns->dedup_puts(), 8u);
  ExpectInlineIntact(*c, longer);
}

TEST_F(DataPathTest, LookupCountsOnlyLeadingHits) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto keys = MakeChain(SmallLayout(), 6, 6);
  ASSERT_TRUE(PutInline(*c, keys).ok());
  // Punch a hole at index 2: keys 3..5 are present but not reachable.
  auto del = c->Delete({keys[2]});
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_EQ(*del, 1u);
  auto look = c->Lookup(keys);
  ASSERT_TRUE(look.ok()) << look.status();
  EXPECT_EQ(look->hits, 2u);
  EXPECT_EQ(look->tiers.size(), 2u);
  // The pages past the hole are still there for a GET.
  auto pages = c->GetInline(keys);
  ASSERT_TRUE(pages.ok());
  EXPECT_EQ((*pages)[2].size(), 0u);
  EXPECT_EQ((*pages)[3].size(), kPage);
  // A chain whose first key misses has no hits at all.
  auto tail = std::vector<PageKey>(keys.begin() + 2, keys.end());
  auto look2 = c->Lookup(tail);
  ASSERT_TRUE(look2.ok());
  EXPECT_EQ(look2->hits, 0u);
  // Filling the hole makes the whole chain hit again.
  ASSERT_TRUE(PutInline(*c, {keys[2]}, keys[1]).ok());
  auto look3 = c->Lookup(keys);
  ASSERT_TRUE(look3.ok());
  EXPECT_EQ(look3->hits, 6u);
}

TEST_F(DataPathTest, DeleteRemovesPages) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto keys = MakeChain(SmallLayout(), 7, 4);
  ASSERT_TRUE(PutInline(*c, keys).ok());
  auto del = c->Delete(keys);
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_EQ(*del, 4u);
  auto again = c->Delete(keys);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u);
  auto look = c->Lookup(keys);
  ASSERT_TRUE(look.ok());
  EXPECT_EQ(look->hits, 0u);
  auto pages = c->GetInline(keys);
  ASSERT_TRUE(pages.ok());
  for (const auto& p : *pages) EXPECT_TRUE(p.empty());
  // Re-PUT after DELETE stores afresh (no stale dedup).
  auto put = PutInline(*c, keys);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(put->stored, 4u);
  ExpectInlineIntact(*c, keys);
}

// 8 MiB host tier, 1 MiB slabs, 64 KiB pages: room for 128 pages.
class EvictionTest : public DaemonTest {
 protected:
  DaemonOptions DaemonOpts() const override {
    return {.flags = {"--host_bytes=8MiB", "--host_slab_bytes=1MiB", "--high_watermark=0.9",
                      "--low_watermark=0.8"}};
  }
};

TEST_F(EvictionTest, NewestChainSurvivesPressureOldestIsGone) {
  auto c = Connect();
  ASSERT_TRUE(c);
  const size_t kChains = 40, kLen = 8;  // 320 pages = 20 MiB into 8 MiB
  auto buf = ShmBuffer::Create(kLen * kPage);
  ASSERT_TRUE(buf.ok());
  auto id = c->RegisterBuffer((*buf)->name(), (*buf)->size());
  ASSERT_TRUE(id.ok()) << id.status();
  auto chains = PutChains(*c, **buf, *id, 1000, kChains, kLen);
  ASSERT_FALSE(HasFailure());
  auto newest = c->Lookup(chains.back());
  ASSERT_TRUE(newest.ok());
  EXPECT_EQ(newest->hits, kLen);
  ExpectInlineIntact(*c, chains.back());
  auto oldest = c->Lookup(chains.front());
  ASSERT_TRUE(oldest.ok());
  EXPECT_EQ(oldest->hits, 0u);

  // Leaf-first eviction: what remains of any chain is a prefix of it.
  size_t present_total = 0;
  for (size_t ch = 0; ch < kChains; ++ch) {
    auto pages = c->GetInline(chains[ch]);
    ASSERT_TRUE(pages.ok()) << pages.status();
    size_t present = 0;
    bool hole = false;
    for (size_t i = 0; i < kLen; ++i) {
      if ((*pages)[i].empty()) {
        hole = true;
        continue;
      }
      EXPECT_FALSE(hole) << "chain " << ch << " keeps page " << i << " after a missing ancestor";
      EXPECT_EQ(tools::CheckPattern(chains[ch][i],
                                    reinterpret_cast<const uint8_t*>((*pages)[i].data()), kPage),
                kPage);
      ++present;
    }
    present_total += present;
  }
  EXPECT_LE(present_total, 128u);
  EXPECT_GE(present_total, kLen);

  auto stats = WireStats(*c);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_GE(stats->tiers_size(), 1);
  const auto& host = stats->tiers(0);
  EXPECT_EQ(host.name(), "host");
  EXPECT_GT(host.evictions(), 0u);
  EXPECT_LE(host.used_bytes(), host.capacity_bytes());
  EXPECT_EQ(host.capacity_bytes(), 8u << 20);
  EXPECT_EQ(stats->daemon().request_errors(), 0u);
}

// 4 MiB host tier over a 64 MiB NVMe tier: host evictions demote, GET of a
// demoted page reads it back byte-exact (and promotes it to host). Lookahead
// is off so the GET itself reads NVMe (tests/prefetch covers lookahead).
class NvmeDemotionTest : public DaemonTest {
 protected:
  DaemonOptions DaemonOpts() const override {
    return {.flags = {"--host_bytes=4MiB", "--host_slab_bytes=1MiB", "--prefetch_lookahead=false"},
            .nvme = true};
  }
};

TEST_F(NvmeDemotionTest, EvictedPagesComeBackFromNvme) {
  auto c = Connect();
  ASSERT_TRUE(c);
  const size_t kChains = 20, kLen = 8;  // 160 pages = 10 MiB over a 4 MiB host tier
  auto buf = ShmBuffer::Create(kLen * kPage);
  ASSERT_TRUE(buf.ok());
  auto id = c->RegisterBuffer((*buf)->name(), (*buf)->size());
  ASSERT_TRUE(id.ok()) << id.status();
  auto chains = PutChains(*c, **buf, *id, 2000, kChains, kLen);
  ASSERT_FALSE(HasFailure());
  auto oldest = c->Lookup(chains.front());
  ASSERT_TRUE(oldest.ok()) << oldest.status();
  ASSERT_EQ(oldest->hits, kLen) << "demoted pages were dropped";
  for (TierKind t : oldest->tiers) EXPECT_EQ(t, TierKind::kNvme);
  std::memset((*buf)->data(), 0, kLen * kPage);
  auto got = c->Get(chains.front(), *id, Offsets(kLen));
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t i = 0; i < kLen; ++i) {
    EXPECT_EQ((*got)[i], TierKind::kNvme) << "page " << i;
    EXPECT_EQ(tools::CheckPattern(chains.front()[i], (*buf)->data() + i * kPage, kPage), kPage)
        << "page " << i;
  }
  // Inline (remote) GET of NVMe pages works too.
  ExpectInlineIntact(*c, chains[1]);
  auto stats = WireStats(*c);
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->tiers_size(), 2);
  EXPECT_EQ(stats->tiers(1).name(), "nvme");
  EXPECT_GT(stats->tiers(0).evictions(), 0u);
  EXPECT_GT(stats->tiers(1).pages(), 0u);
  EXPECT_EQ(stats->daemon().request_errors(), 0u);
}

TEST_F(DataPathTest, ConcurrentClientsOnDistinctAndSharedKeys) {
  const int kThreads = 4, kRounds = 12, kLen = 4;
  auto shared = MakeChain(SmallLayout(), 77, kLen);
  std::atomic<uint32_t> shared_stored{0};
  std::atomic<int> failures{0};
  std::string endpoint = daemon_->endpoint();
  auto worker = [&](int t) {
    auto fail = [&](const std::string& what) {
      ADD_FAILURE() << "thread " << t << ": " << what;
      ++failures;
    };
    auto c = Client::Connect(Options(endpoint));
    if (!c.ok()) return fail(c.status().ToString());
    auto buf = ShmBuffer::Create(2 * kLen * kPage);
    if (!buf.ok()) return fail(buf.status().ToString());
    auto id = (*c)->RegisterBuffer((*buf)->name(), (*buf)->size());
    if (!id.ok()) return fail(id.status().ToString());
    for (int r = 0; r < kRounds; ++r) {
      auto mine = MakeChain(SmallLayout(), 10000 + t * 100 + r, kLen);
      for (int i = 0; i < kLen; ++i)
        tools::FillPattern(mine[i], (*buf)->data() + i * kPage, kPage);
      auto put = (*c)->Put(mine, PageKey::Zero(), *id, Offsets(kLen));
      if (!put.ok() || put->stored != kLen) return fail("put of own chain");
      if (r == t) {  // everyone PUTs the shared chain once, at different times
        for (int i = 0; i < kLen; ++i)
          tools::FillPattern(shared[i], (*buf)->data() + i * kPage, kPage);
        auto sp = (*c)->Put(shared, PageKey::Zero(), *id, Offsets(kLen));
        if (!sp.ok() || sp->stored + sp->deduplicated != kLen) return fail("put of shared chain");
        shared_stored += sp->stored;
      }
      std::memset((*buf)->data() + kLen * kPage, 0, kLen * kPage);
      auto got = (*c)->Get(mine, *id, Offsets(kLen, kPage, kLen * kPage));
      if (!got.ok()) return fail(got.status().ToString());
      for (int i = 0; i < kLen; ++i)
        if (tools::CheckPattern(mine[i], (*buf)->data() + (kLen + i) * kPage, kPage) != kPage)
          return fail(absl::StrCat("round ", r, " page ", i, " corrupted"));
      auto sp = (*c)->GetInline(shared);
      if (!sp.ok()) return fail(sp.status().ToString());
      for (int i = 0; i < kLen; ++i) {
        const std::string& p = (*sp)[i];
        if (!p.empty() && tools::CheckPattern(shared[i], reinterpret_cast<const uint8_t*>(p.data()),
                                              kPage) != kPage)
          return fail("shared page corrupted");
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  // Each shared page was stored exactly once; every other PUT deduplicated.
  EXPECT_EQ(shared_stored.load(), static_cast<uint32_t>(kLen));
  auto c = Connect();
  ASSERT_TRUE(c);
  ExpectInlineIntact(*c, shared);
  auto stats = WireStats(*c);
  ASSERT_TRUE(stats.ok());
  const auto* ns = FindNs(*stats, "default");
  ASSERT_NE(ns, nullptr);
  EXPECT_EQ(ns->pages(), static_cast<uint64_t>(kThreads * kRounds * kLen + kLen));
  EXPECT_EQ(stats->daemon().request_errors(), 0u);
}

}  // namespace
}  // namespace kvtier::itest
