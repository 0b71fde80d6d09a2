// Unit tests of the tiers' mechanism: the slab arena, the shared-memory
// region and the host tier.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "gtest/gtest.h"
#include "tests/unit/tiers_test_util.h"
#include "tiers/common/slab_arena.h"
#include "tiers/host/shm_region.h"

namespace kvtier::tiers {
namespace {

constexpr uint64_t kSlab = 4096;

std::unique_ptr<SlabArena> Arena(uint64_t slabs) {
  auto a = SlabArena::Create(slabs * kSlab, kSlab);
  EXPECT_TRUE(a.ok()) << a.status();
  return std::move(a).value();
}

TEST(SlabArenaTest, SizesRoundToClassesInSeparateSlabs) {
  auto arena = Arena(4);
  auto a = arena->Allocate(100);
  auto b = arena->Allocate(200);
  auto c = arena->Allocate(100);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->bytes, 100u);
  EXPECT_NE(a->cls, b->cls);
  EXPECT_EQ(a->cls, c->cls);
  EXPECT_EQ(a->offset / kSlab, c->offset / kSlab);  // same slab
  EXPECT_NE(a->offset / kSlab, b->offset / kSlab);
  EXPECT_EQ(c->offset - a->offset, 128u);  // 100 rounds to 128
  EXPECT_EQ(arena->used_bytes(), 128u + 256u + 128u);
  EXPECT_EQ(arena->free_slabs(), 2u);
}

TEST(SlabArenaTest, EmptySlabReturnsToPoolForAnotherClass) {
  auto arena = Arena(1);
  std::vector<Slot> slots;
  for (int i = 0; i < 4; ++i) slots.push_back(*arena->Allocate(1024));
  EXPECT_TRUE(absl::IsResourceExhausted(arena->Allocate(1024).status()));
  EXPECT_TRUE(absl::IsResourceExhausted(arena->Allocate(64).status()));
  arena->Free(slots[1]);
  auto again = arena->Allocate(1024);  // a freed slot is reused
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->offset, slots[1].offset);
  slots[1] = *again;
  for (const Slot& s : slots) arena->Free(s);
  EXPECT_EQ(arena->used_bytes(), 0u);
  EXPECT_EQ(arena->free_slabs(), 1u);
  std::set<uint64_t> offsets;
  for (int i = 0; i < 64; ++i) offsets.insert(arena->Allocate(64)->offset);
  EXPECT_EQ(offsets.size(), 64u);
  EXPECT_EQ(arena->used_bytes(), kSlab);
}

TEST(SlabArenaTest, OddSizesAndLimits) {
  auto arena = Arena(8);
  for (uint64_t n : {1ull, 63ull, 64ull, 65ull, 4095ull, 4096ull}) {
    auto s = arena->Allocate(n);
    ASSERT_TRUE(s.ok()) << n << ": " << s.status();
    EXPECT_EQ(s->offset % SlabArena::kSlotAlign, 0u);
    EXPECT_EQ(s->bytes, n);
  }
  EXPECT_TRUE(absl::IsInvalidArgument(arena->Allocate(0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(arena->Allocate(kSlab + 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SlabArena::Create(100, 4096).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(SlabArena::Create(8192, 100).status()));
  // Capacity is rounded down to whole slabs.
  EXPECT_EQ((*SlabArena::Create(3 * kSlab + 17, kSlab))->capacity(), 3 * kSlab);
}

TEST(SlabArenaTest, ForeignSlotIsIgnored) {
  auto arena = Arena(2);
  auto s = *arena->Allocate(512);
  arena->Free(Slot{kSlab * 7, 512, s.cls});
  arena->Free(Slot{s.offset + 1, 512, s.cls});
  EXPECT_EQ(arena->bad_frees(), 2u);
  EXPECT_EQ(arena->used_bytes(), 512u);
}

bool ShmExists(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

// The daemon's arena is never mapped by anyone else, so its name is unlinked
// as soon as it is mapped: no client can open it, and a killed daemon leaves
// nothing behind in /dev/shm.
TEST(ShmRegionTest, DefaultNameIsUnlinkedOnceMapped) {
  auto r = ShmRegion::Create("", 1 << 20, HugepageMode::kOff);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string name = (*r)->name();
  EXPECT_EQ(name.rfind("/kvtier-host-" + std::to_string(getpid()), 0), 0u) << name;
  EXPECT_NE((*r)->backing().find("shm " + name), std::string::npos) << (*r)->backing();
  EXPECT_FALSE((*r)->hugetlb());
  EXPECT_FALSE(ShmExists(name));
  (*r)->base()[12345] = 0xab;  // still our memory
  EXPECT_EQ((*r)->base()[12345], 0xab);
}

TEST(ShmRegionTest, NamesCollideCleanly) {
  const std::string name = "/kvtier-test-" + std::to_string(getpid());
  auto a = ShmRegion::Create(name, 4096, HugepageMode::kOff);
  ASSERT_TRUE(a.ok()) << a.status();
  // The name was released once mapped, so it can be reused.
  auto b = ShmRegion::Create(name, 4096, HugepageMode::kOff);
  EXPECT_TRUE(b.ok()) << b.status();
  EXPECT_NE((*a)->base(), (*b)->base());
  EXPECT_TRUE(
      absl::IsInvalidArgument(ShmRegion::Create("no-slash", 4096, HugepageMode::kOff).status()));
  auto c = ShmRegion::Create("", 4096, HugepageMode::kOff);
  ASSERT_TRUE(c.ok());
  auto d = ShmRegion::Create("", 4096, HugepageMode::kOff);
  ASSERT_TRUE(d.ok()) << d.status();  // default names are unique per region
  EXPECT_NE((*c)->name(), (*d)->name());
}

TEST(ShmRegionTest, HugepagesAutoFallsBackAndOnFailsClearly) {
  auto a = ShmRegion::Create("", 4 << 20, HugepageMode::kAuto);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GE((*a)->size(), 4u << 20);
  if ((*a)->hugetlb()) {
    EXPECT_EQ((*a)->backing(), "memfd hugetlb (2 MiB pages)");
  } else {
    EXPECT_EQ((*a)->backing().rfind("shm /kvtier-host-", 0), 0u) << (*a)->backing();
  }
  auto on = ShmRegion::Create("", 4 << 20, HugepageMode::kOn);
  if (on.ok()) {
    EXPECT_TRUE((*on)->hugetlb());
  } else {
    EXPECT_TRUE(absl::IsFailedPrecondition(on.status())) << on.status();
    EXPECT_NE(on.status().message().find("hugetlb"), std::string::npos);
  }
}

TEST(HostTierTest, ReadWriteAreBoundsChecked) {
  auto tier = testing::HostTier(64 << 10, 16 << 10);
  EXPECT_EQ(tier->kind(), TierKind::kHost);
  EXPECT_EQ(tier->capacity_bytes(), 64u << 10);
  EXPECT_EQ(tier->max_slot_bytes(), 16u << 10);
  auto slot = tier->Allocate(1000);
  ASSERT_TRUE(slot.ok());
  auto data = testing::Bytes(1000, 7);
  ASSERT_TRUE(tier->Write(*slot, 0, data.data(), 1000).ok());
  std::vector<uint8_t> back(1000);
  ASSERT_TRUE(tier->Read(*slot, 0, back.data(), 1000).ok());
  EXPECT_EQ(back, data);
  EXPECT_EQ(std::memcmp(tier->Address(*slot), data.data(), 1000), 0);
  EXPECT_TRUE(absl::IsOutOfRange(tier->Write(*slot, 1, data.data(), 1000)));
  EXPECT_TRUE(absl::IsOutOfRange(tier->Read(*slot, UINT64_MAX, back.data(), 2)));
  EXPECT_EQ(tier->io_counters().bytes_written, 1000u);
  EXPECT_EQ(tier->io_counters().bytes_read, 1000u);
  EXPECT_EQ(tier->used_bytes(), 1024u);
  tier->Free(*slot);
  EXPECT_EQ(tier->used_bytes(), 0u);
}

TEST(HostTierTest, ConfigIsValidated) {
  HostTierConfig c;
  c.capacity_bytes = 1 << 20;
  c.slab_bytes = 2 << 20;
  EXPECT_TRUE(absl::IsInvalidArgument(CreateHostTier(c).status()));
  c.slab_bytes = 1000;
  EXPECT_TRUE(absl::IsInvalidArgument(c.Validate()));
  EXPECT_EQ(TierName(TierKind::kNvme), "nvme");
}

}  // namespace
}  // namespace kvtier::tiers
