// Batched LOOKUP (Lookup.chain_lengths, docs/PROTOCOL.md "Batched LOOKUP")
// spoken raw from the wire: a second tenant batching alice's keys, with and
// without a lease, sees none of them, holds none and promotes none; malformed
// chain lengths are refused by name and the daemon keeps serving.
#include "tests/security/security_fixture.h"

namespace kvtier::security {
namespace {

// A batched LOOKUP as the protocol describes it: the chains' keys one after
// another in `keys`, one chain_lengths entry per chain.
wire::Request BatchReq(const std::vector<std::vector<PageKey>>& chains, uint32_t lease_ms = 0) {
  wire::Request r;
  auto* l = r.mutable_lookup();
  for (const auto& chain : chains) {
    l->mutable_keys()->append(PackKeys(chain));
    l->add_chain_lengths(static_cast<uint32_t>(chain.size()));
  }
  l->set_lease_ms(lease_ms);
  return r;
}

// `n` keys of distinct bytes (packed), for requests that must be refused.
std::string RawKeys(size_t n) { return std::string(n * kPageKeyBytes, 'k'); }

class BatchedLookupAttacks : public SecurityTest {
 protected:
  bool Nvme() const override { return true; }  // lookahead on (the default)

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(SecurityTest::SetUp());
    if (IsSkipped()) return;
    on_nvme_ = itest::MakeChain(itest::SmallLayout(), 1401, 6);
    in_ram_ = itest::MakeChain(itest::SmallLayout(), 1402, 6);
    auto alice = Alice();
    ASSERT_TRUE(alice);
    ASSERT_NO_FATAL_FAILURE(PlantAlice(*alice, on_nvme_));
    ASSERT_TRUE(alice->Evict("", TierKind::kHost, 0).ok());
    ASSERT_NO_FATAL_FAILURE(PlantAlice(*alice, in_ram_));
  }
  void TearDown() override {
    if (daemon_ && daemon_->Alive() && !IsSkipped()) {
      std::vector<PageKey> all = in_ram_;
      all.insert(all.end(), on_nvme_.begin(), on_nvme_.end());
      ExpectAliceIntact(all);
    }
    SecurityTest::TearDown();
  }
  // Mallory's batched LOOKUP; must be refused with INVALID_ARGUMENT naming `what`.
  void ExpectRefused(WirePeer& m, const wire::Request& req, const std::string& what) {
    auto r = m.Call(req);
    EXPECT_WIRE_CODE(r, INVALID_ARGUMENT);
    EXPECT_TRUE(absl::StrContains(r->response.message(), what))
        << "message '" << r->response.message() << "' does not say '" << what << "'";
  }

  std::vector<PageKey> on_nvme_, in_ram_;
};

TEST_F(BatchedLookupAttacks, AnotherTenantsBatchSeesHoldsAndPromotesNothing) {
  auto m = Mallory();
  // Alice's chains whole, cut up, one key each, and mixed with mallory's own.
  std::vector<std::vector<PageKey>> chains{in_ram_, on_nvme_};
  for (const PageKey& k : in_ram_) chains.push_back({k});
  for (const PageKey& k : on_nvme_) chains.push_back({k});
  chains.push_back({in_ram_.begin() + 2, in_ram_.end()});
  for (uint32_t lease_ms : {0u, 30000u}) {
    auto r = m->Call(BatchReq(chains, lease_ms));
    EXPECT_WIRE_CODE(r, OK);
    const wire::LookupReply& lr = r->response.lookup();
    ASSERT_EQ(lr.chain_hits_size(), static_cast<int>(chains.size()));
    for (int i = 0; i < lr.chain_hits_size(); ++i)
      EXPECT_EQ(lr.chain_hits(i), 0u) << "mallory sees alice's chain " << i;
    EXPECT_EQ(lr.hits(), 0u);
    EXPECT_TRUE(lr.tiers().empty());
    EXPECT_EQ(lr.leased(), 0u);
    EXPECT_EQ(lr.prefetching(), 0u);
  }
  wire::StatsReply admin = AdminStats();
  EXPECT_EQ(admin.prefetch().lookup_leased(), 0u) << "mallory's batch holds pages";
  EXPECT_EQ(admin.prefetch().leased_pages(), 0u);
  EXPECT_EQ(admin.prefetch().issued(), 0u) << "mallory's batch promoted alice's pages";
  // Nothing of alice's is held: her own eviction moves every RAM page down,
  // and her NVMe pages are still where she left them.
  auto alice = Alice();
  ASSERT_TRUE(alice);
  ASSERT_TRUE(alice->Evict("", TierKind::kHost, 0).ok());
  auto after = alice->LookupBatch(std::vector<std::vector<PageKey>>{in_ram_, on_nvme_});
  ASSERT_TRUE(after.ok()) << after.status();
  for (const LookupResult& r : *after) {
    ASSERT_EQ(r.hits, in_ram_.size());
    for (TierKind t : r.tiers) EXPECT_EQ(t, TierKind::kNvme) << "a page of alice's stayed held";
  }
}

TEST_F(BatchedLookupAttacks, MalformedChainLengthsAreRefusedByName) {
  auto m = Mallory();
  auto batch = [](std::string keys, std::vector<uint32_t> lengths) {
    wire::Request r;
    r.mutable_lookup()->set_keys(std::move(keys));
    for (uint32_t n : lengths) r.mutable_lookup()->add_chain_lengths(n);
    r.mutable_lookup()->set_lease_ms(30000);
    return r;
  };
  ExpectRefused(*m, batch(RawKeys(4), {2, 0, 2}), "chain 1 has no keys");
  ExpectRefused(*m, batch(RawKeys(4), {0}), "chain 0 has no keys");
  ExpectRefused(*m, batch(RawKeys(4), {1, 2}), "chain_lengths add up to 3 keys, but keys holds 4");
  ExpectRefused(*m, batch(RawKeys(4), {3, 3}), "add up to 6 keys, but keys holds 4");
  // Lengths whose 32-bit sum wraps around to the key count.
  ExpectRefused(*m, batch(RawKeys(4), {0xffffffffu, 5}), "chain 0 has 4294967295 keys");
  ExpectRefused(*m, batch(RawKeys(4097), {4097}), "chain 0 has 4097 keys, at most 4096 per chain");
  ExpectRefused(*m, batch(RawKeys(4097), std::vector<uint32_t>(4097, 1)),
                "4097 chains, at most 4096");
  // 100,000 one-byte lengths: refused on the count, before any key is read.
  ExpectRefused(*m, batch(RawKeys(1), std::vector<uint32_t>(100000, 1)),
                "100000 chains, at most 4096");
  ExpectRefused(*m, batch(RawKeys(9 * 4000), std::vector<uint32_t>(9, 4000)),
                "36000 keys, at most 32768");
  ExpectRefused(*m, batch("", {1}), "no keys");
  ExpectRefused(*m, batch(RawKeys(2) + "x", {1, 1}), "multiple of 16");
  // Within every limit: served. The largest batch the limits allow, too.
  auto ok = m->Call(batch(RawKeys(4), {1, 3}));
  EXPECT_WIRE_CODE(ok, OK);
  EXPECT_EQ(ok->response.lookup().chain_hits_size(), 2);
  std::vector<uint32_t> widest(4096, 8);
  auto wide = m->Call(batch(RawKeys(32768), widest));
  EXPECT_WIRE_CODE(wide, OK);
  EXPECT_EQ(wide->response.lookup().chain_hits_size(), 4096);
  EXPECT_WIRE_CODE(m->Call(PingReq()), OK);  // the session survived all that
  ASSERT_TRUE(daemon_->Alive());
}

}  // namespace
}  // namespace kvtier::security
