// Hole 4 with the registration warm-up on (daemon/buffer_warmer.h): a tenant
// that registers its own dense memory again and again makes the daemon warm
// gigabytes. That work runs off the frontend, one chunk per tenant in turn,
// so the victim's PINGs keep their latency and the victim's own registration
// is warmed while the attacker's queue is still long; UNREGISTER ends it.
#include <cstring>

#include "client/wire_calls.h"
#include "kvtier/shm_buffer.h"
#include "tests/security/security_fixture.h"

namespace kvtier::security {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

wire::BufferWarmup WarmupOf(const wire::StatsReply& st, const std::string& ns) {
  for (const auto& n : st.namespaces())
    if (n.name() == ns) return n.warmup();
  ADD_FAILURE() << "no namespace " << ns << " in STATS";
  return {};
}

class Hole04_WarmUpStorm : public SecurityTest {};

TEST_F(Hole04_WarmUpStorm, DenseRegistrationsNeitherStallNorStarveTheVictim) {
  auto dense = ShmBuffer::Create(256 * kMiB);  // mallory's own memory, all of it written
  ASSERT_TRUE(dense.ok()) << dense.status();
  std::memset((*dense)->data(), 0x6d, (*dense)->size());
  VictimProbe victim(daemon_->endpoint(), kAlice, kAliceToken);
  ASSERT_TRUE(victim.connected());
  auto mallory = Mallory();
  std::vector<uint32_t> ids;
  for (int i = 0; i < 16; ++i) {  // 4 GiB of warm-up work queued
    auto r = mallory->Call(RegisterShmReq((*dense)->name(), (*dense)->size()), {}, 30000);
    EXPECT_WIRE_CODE(r, OK);
    ids.push_back(r->response.register_buffer().buffer_id());
  }
  // Alice registers her arena during the storm: it is warmed in turns with
  // mallory's chunks, not after all of them.
  auto alice = Alice();
  ASSERT_TRUE(alice);
  auto arena = ShmBuffer::Create(8 * kMiB);
  ASSERT_TRUE(arena.ok());
  std::memset((*arena)->data(), 1, (*arena)->size());
  ASSERT_TRUE(alice->RegisterBuffer((*arena)->name(), (*arena)->size()).ok());
  wire::BufferWarmup mine;
  for (int i = 0; i < 6000; ++i) {
    auto st = WireStats(*alice);
    ASSERT_TRUE(st.ok()) << st.status();
    mine = WarmupOf(*st, kAlice);
    if (mine.pending_bytes() == 0) break;
    usleep(10000);
  }
  EXPECT_EQ(mine.buffers(), 1u);
  EXPECT_GT(WarmupOf(AdminStats(), kMallory).pending_bytes(), 0u)
      << "alice's warm-up waited until mallory's whole queue was done";
  // Keep the victim probing while mallory's warm-ups run (bounded wait).
  for (int i = 0; i < 3000 && WarmupOf(AdminStats(), kMallory).warmed_bytes() < 256 * kMiB; ++i)
    usleep(10000);
  LatencySummary ping = victim.Stop("dense_warmup_storm");
  EXPECT_LE(ping.p99_ms, 20.0) << "the victim's PINGs stalled behind mallory's warm-ups";
  EXPECT_EQ(ping.errors, 0u);
  for (uint32_t id : ids) EXPECT_WIRE_CODE(mallory->Call(UnregisterReq(id), {}, 30000), OK);
  const wire::BufferWarmup theirs = WarmupOf(AdminStats(), kMallory);
  EXPECT_EQ(theirs.pending_bytes(), 0u) << "UNREGISTER left warm-up work queued";
  EXPECT_GE(theirs.cancelled(), 1u);
  std::printf("SECURITY_WARMUP attack=dense_warmup_storm mallory_warmed_mib=%.1f cancelled=%lu\n",
              theirs.warmed_bytes() / 1048576.0, static_cast<unsigned long>(theirs.cancelled()));
}

}  // namespace
}  // namespace kvtier::security
