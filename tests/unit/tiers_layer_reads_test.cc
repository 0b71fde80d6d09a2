// TierManager::ReadLayers (tiers/store/layer_reads.cc), the read of a layer-wise
// GET, over the NVMe tier on a memory device behind the fault injector:
// layers come in order and byte-exact for aligned and unaligned layer
// sizes, layer 0 is handed over while later layers are still being read, a
// corrupt chunk fails its page after only the verified layers before it,
// pages recorded without chunk sums are read whole, the sums survive a
// restart, a layer's bytes are valid during the sink's call only (an
// asynchronous sink copies them); and the verification chunks and their
// index records themselves.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/unit/nvme_test_fixture.h"
#include "tiers/common/verify_chunks.h"
#include "tiers/nvme/nvme_index.h"

namespace kvtier::tiers {
namespace {

constexpr uint64_t kBigSlab = 2 << 20;

// Counts the async reads that completed (under the fault injector).
class CountingDevice final : public ForwardingDevice {
 public:
  using ForwardingDevice::ForwardingDevice;
  std::atomic<uint64_t> completed{0};

 protected:
  void ReadAsyncImpl(uint64_t offset, void* buf, uint64_t n, nvme::IoCallback cb) override {
    inner().ReadAsync(offset, buf, n, [this, cb = std::move(cb)](absl::Status st) {
      completed.fetch_add(1);
      cb(std::move(st));
    });
  }
};

// Records what ReadLayers hands over, and checks the order as it comes.
class RecordingSink final : public LayerSink {
 public:
  RecordingSink(size_t pages, uint64_t layer_bytes, uint32_t layers)
      : layer_bytes_(layer_bytes), got(pages, std::vector<uint8_t>(layer_bytes * layers)),
        seen(pages, std::vector<bool>(layers, false)), failed(pages) {}
  void Layer(size_t i, uint32_t l, const uint8_t* bytes) override {
    EXPECT_EQ(l, done) << "layer " << l << " of page " << i << " before layer " << done << " ended";
    EXPECT_FALSE(seen[i][l]) << "layer " << l << " of page " << i << " twice";
    seen[i][l] = true;
    std::memcpy(got[i].data() + l * layer_bytes_, bytes, layer_bytes_);
  }
  void LayerDone(uint32_t l) override {
    EXPECT_EQ(l, done);
    done = l + 1;
    if (l == 0 && on_first) on_first();
  }
  void PageFailed(size_t i, absl::Status why) override {
    EXPECT_TRUE(failed[i].ok()) << "page " << i << " failed twice";
    failed[i] = std::move(why);
    failed_at_layer[i] = done;
  }

  const uint64_t layer_bytes_;
  std::vector<std::vector<uint8_t>> got;
  std::vector<std::vector<bool>> seen;
  std::vector<absl::Status> failed;
  std::map<size_t, uint32_t> failed_at_layer;
  uint32_t done = 0;
  std::function<void()> on_first;
};

struct Geometry {
  uint64_t layer_bytes;
  uint32_t layers;
  uint64_t page() const { return layer_bytes * layers; }
};

// Pages of up to 2 MiB; dir_, mgr_ and ns_ come from NvmeTierTest.
class LayerReadsTest : public NvmeTierTest {
 protected:
  NvmeTierConfig LayerConfig() const {
    NvmeTierConfig c = NvmeConfig();
    c.capacity_bytes = 32 * kBigSlab;
    c.slab_bytes = kBigSlab;
    c.queue_depth = queue_depth_;
    return c;
  }

  // Host RAM for `host_pages` pages over NVMe on `device` (a counting
  // memory device unless given) behind the fault injector; then `n` pages
  // of geometry g PUT and flushed to NVMe (RAM left empty).
  void Open(Geometry g, uint64_t host_pages, uint64_t n, bool promote,
            std::unique_ptr<nvme::Device> device = nullptr) {
    g_ = g;
    mgr_.reset();
    if (device == nullptr) {
      auto memory = nvme::CreateMemoryDevice(LayerConfig().capacity_bytes);
      memory_ = memory.get();
      auto counting = std::make_unique<CountingDevice>(std::move(memory));
      counting_ = counting.get();
      device = std::move(counting);
    }
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(HostTier(host_pages * kBigSlab, kBigSlab));
    auto nvme = CreateNvmeTier(LayerConfig(),
                               nvme::CreateFaultInjectingDevice(std::move(device), faults_));
    ASSERT_TRUE(nvme.ok()) << nvme.status();
    tiers.push_back(*std::move(nvme));
    TierManagerConfig config = NoThreadConfig();
    config.promote_on_get = promote;
    auto m = TierManager::Create(config, std::move(tiers));
    ASSERT_TRUE(m.ok()) << m.status();
    mgr_ = *std::move(m);
    ns_["a"] = AddNs(*mgr_, "a");
    ASSERT_TRUE(mgr_->RecoverPersistent().ok());
    for (uint64_t i = 0; i < n; ++i) {
      PageKey parent = i == 0 ? PageKey::Zero() : Key(i - 1);
      ASSERT_TRUE(Put(*mgr_, ns_["a"], Key(i), parent, Bytes(g.page(), i)).ok());
    }
    ASSERT_TRUE(mgr_->FlushToPersistent().ok());
    ASSERT_EQ(mgr_->Snapshot().tiers[1].pages, n);
    ASSERT_EQ(mgr_->Snapshot().tiers[0].pages, 0u);
  }

  LayerReadStats Read(std::vector<PagePin>& pins, RecordingSink& sink) {
    return mgr_->ReadLayers(absl::MakeSpan(pins), g_.layer_bytes, g_.layers, ReadOptions{}, sink);
  }

  // Overwrites 4 KiB of page i's bytes on the device, at `offset` in it.
  void Corrupt(uint64_t i, uint64_t offset) {
    auto pin = mgr_->PinForRead(ns_["a"], Key(i));
    ASSERT_TRUE(pin.has_value());
    std::unique_ptr<uint8_t, decltype(&std::free)> junk(
        static_cast<uint8_t*>(std::aligned_alloc(nvme::kBlockSize, nvme::kBlockSize)), &std::free);
    std::memset(junk.get(), 0xAB, nvme::kBlockSize);
    ASSERT_TRUE(memory_->Write(pin->slot().offset + offset, junk.get(), nvme::kBlockSize).ok());
  }

  uint32_t queue_depth_ = 64;
  Geometry g_{};
  nvme::Device* memory_ = nullptr;
  CountingDevice* counting_ = nullptr;
  std::shared_ptr<nvme::FaultControl> faults_ = std::make_shared<nvme::FaultControl>();
};

TEST(VerifyChunks, GeometryAndChecks) {
  EXPECT_EQ(ChunkBytesFor(64 << 10), 0u);  // small pages are read whole
  EXPECT_EQ(ChunkBytesFor(1 << 20), 16u << 10);
  EXPECT_EQ(ChunkBytesFor(9 << 20), 256u << 10);   // 12 layers x 768 KiB (124m, fp16)
  EXPECT_EQ(ChunkBytesFor(32 << 20), 512u << 10);  // 32 layers x 1 MiB (8B, bf16)
  const std::vector<uint8_t> page = Bytes(1'000'000, 7);
  ChunkSums sums = ComputeChunkSums(page.data(), page.size());
  ASSERT_EQ(sums.chunk_bytes, 16u << 10);
  ASSERT_EQ(sums.sums.size(), 62u);  // the last chunk is 576 bytes
  const uint64_t c = sums.chunk_bytes;
  EXPECT_TRUE(VerifyChunks(sums, page.size(), 0, page.size(), page.data()));
  EXPECT_TRUE(VerifyChunks(sums, page.size(), 3 * c, 7 * c, page.data() + 3 * c));
  EXPECT_TRUE(VerifyChunks(sums, page.size(), 61 * c, page.size(), page.data() + 61 * c));
  EXPECT_FALSE(VerifyChunks(sums, page.size(), 3 * c, 7 * c - 1, page.data() + 3 * c))
      << "a chunk cut short cannot be verified";
  EXPECT_FALSE(VerifyChunks(sums, page.size(), 100, 2 * c, page.data() + 100)) << "unaligned start";
  std::vector<uint8_t> bad(page.begin() + 3 * c, page.begin() + 7 * c);
  bad[2 * c + 5] ^= 1;
  EXPECT_FALSE(VerifyChunks(sums, page.size(), 3 * c, 7 * c, bad.data()));
}

TEST(VerifyChunks, IndexRecordsCarryThemAndOldRecordsStillDecode) {
  nvme::IndexRecord r{"tenant", Key(3), Key(2), 1 << 20, 1'000'000, 42, 9, 16 << 10, {}};
  for (int k = 0; k < 62; ++k) r.chunk_sums.push_back(1000 + k);
  const std::string key = nvme::NvmeIndex::EncodeKey(r.ns, r.key);
  const std::string v2 = nvme::NvmeIndex::EncodeValue(r);
  nvme::IndexRecord out;
  ASSERT_TRUE(nvme::NvmeIndex::Decode(key, v2, &out));
  EXPECT_EQ(out.chunk_bytes, r.chunk_bytes);
  EXPECT_EQ(out.chunk_sums, r.chunk_sums);
  EXPECT_EQ(out.checksum, 42u);
  // A count that does not match the page size, or a torn value: rejected.
  nvme::IndexRecord wrong = r;
  wrong.chunk_sums.pop_back();
  EXPECT_FALSE(nvme::NvmeIndex::Decode(key, nvme::NvmeIndex::EncodeValue(wrong), &out));
  EXPECT_FALSE(nvme::NvmeIndex::Decode(key, v2.substr(0, v2.size() - 3), &out));
  // A version-1 record (no chunks) decodes with none.
  nvme::IndexRecord v1 = r;
  v1.chunk_bytes = 0;
  v1.chunk_sums.clear();
  const std::string old = nvme::NvmeIndex::EncodeValue(v1);
  EXPECT_EQ(old[0], 1);
  ASSERT_TRUE(nvme::NvmeIndex::Decode(key, old, &out));
  EXPECT_EQ(out.chunk_bytes, 0u);
  EXPECT_TRUE(out.chunk_sums.empty());
}

TEST_F(LayerReadsTest, LayersComeInOrderAndByteExact) {
  // Block-aligned layers; layers that straddle chunks; layers that are not
  // whole blocks (the page ends inside one).
  for (Geometry g : {Geometry{128 << 10, 8}, Geometry{86016, 12}, Geometry{100000, 10}}) {
    for (bool promote : {false, true}) {
      SCOPED_TRACE(absl::StrCat(g.layers, " x ", g.layer_bytes, promote ? ", promote" : ""));
      ASSERT_NO_FATAL_FAILURE(Open(g, 16, 6, promote));
      std::vector<PagePin> pins = PinAll(6);
      RecordingSink sink(6, g.layer_bytes, g.layers);
      LayerReadStats stats = Read(pins, sink);
      EXPECT_EQ(stats.chunked_pages, 6u);
      EXPECT_EQ(stats.whole_pages, 0u);
      EXPECT_EQ(stats.promoted_pages, promote ? 6u : 0u);
      EXPECT_EQ(sink.done, g.layers);
      for (uint64_t i = 0; i < 6; ++i) {
        EXPECT_TRUE(sink.failed[i].ok()) << sink.failed[i];
        EXPECT_EQ(sink.got[i], Bytes(g.page(), i)) << "page " << i;
      }
      EXPECT_EQ(mgr_->Snapshot().tiers[0].pages, promote ? 6u : 0u);
      EXPECT_EQ(mgr_->Snapshot().tiers[1].checksum_errors, 0u);
      pins.clear();
      mgr_.reset();
      std::filesystem::remove_all(dir_);
    }
  }
}

TEST_F(LayerReadsTest, LayerZeroIsHandedOverWhileLaterLayersAreStillRead) {
  queue_depth_ = 4;  // a shallow device: most reads wait for the first ones
  const Geometry g{128 << 10, 8};
  ASSERT_NO_FATAL_FAILURE(Open(g, 16, 4, /*promote=*/false));
  std::vector<PagePin> pins = PinAll(4);
  RecordingSink sink(4, g.layer_bytes, g.layers);
  const uint64_t before = counting_->completed.load();
  uint64_t at_first = 0;
  sink.on_first = [&] { at_first = counting_->completed.load() - before; };
  Read(pins, sink);
  const uint64_t total = counting_->completed.load() - before;
  EXPECT_EQ(total, 4u * 8u) << "one read per page per layer";
  EXPECT_GE(at_first, 4u) << "layer 0 of every page was read";
  EXPECT_LT(at_first, total) << "layer 0 waited for the whole pages";
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(sink.got[i], Bytes(g.page(), i));
}

// LayerSink's contract: a layer's bytes are valid during Layer() only. A
// sink that works asynchronously (as a device copy would) copies them in the
// call and finishes on another thread; the read reuses the memory it handed
// over for later layers, so a sink that kept the pointers would read other
// layers' bytes.
TEST_F(LayerReadsTest, AnAsynchronousSinkCopiesInTheCallBecauseBytesAreReused) {
  queue_depth_ = 4;  // few units ahead of the layer handed over: bounce units come back
  const Geometry g{128 << 10, 8};
  ASSERT_NO_FATAL_FAILURE(Open(g, 16, 4, /*promote=*/false));
  std::vector<PagePin> pins = PinAll(4);

  class AsyncSink final : public LayerSink {
   public:
    explicit AsyncSink(const Geometry& g) : g_(g), got(4, std::vector<uint8_t>(g.page())) {}
    void Layer(size_t i, uint32_t l, const uint8_t* bytes) override {
      handed.emplace_back(bytes, std::make_pair(i, l));
      auto copy = std::make_shared<std::vector<uint8_t>>(bytes, bytes + g_.layer_bytes);
      work.emplace_back([this, i, l, copy] {
        std::memcpy(got[i].data() + l * g_.layer_bytes, copy->data(), copy->size());
      });
    }
    void LayerDone(uint32_t) override {}
    void PageFailed(size_t i, absl::Status why) override { ADD_FAILURE() << i << ": " << why; }
    Geometry g_;
    std::vector<std::vector<uint8_t>> got;
    std::vector<std::pair<const uint8_t*, std::pair<size_t, uint32_t>>> handed;
    std::vector<std::thread> work;
  } sink(g);
  mgr_->ReadLayers(absl::MakeSpan(pins), g.layer_bytes, g.layers, ReadOptions{}, sink);
  for (std::thread& t : sink.work) t.join();
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(sink.got[i], Bytes(g.page(), i)) << "page " << i;
  std::map<const uint8_t*, int> uses;
  for (const auto& h : sink.handed) ++uses[h.first];
  const bool reused = std::any_of(uses.begin(), uses.end(), [](auto& u) { return u.second > 1; });
  EXPECT_TRUE(reused) << "no memory handed over twice: the contract would be looser than it says";
}

TEST_F(LayerReadsTest, CorruptChunkFailsItsPageAfterOnlyTheLayersBeforeIt) {
  const Geometry g{128 << 10, 8};
  for (bool promote : {false, true}) {
    SCOPED_TRACE(promote ? "promote" : "bounce");
    ASSERT_NO_FATAL_FAILURE(Open(g, 16, 4, promote));
    Corrupt(2, 5 * g.layer_bytes + 8192);  // inside layer 5 of page 2
    std::vector<PagePin> pins = PinAll(4);
    RecordingSink sink(4, g.layer_bytes, g.layers);
    Read(pins, sink);
    EXPECT_TRUE(absl::IsDataLoss(sink.failed[2])) << sink.failed[2];
    EXPECT_FALSE(pins[2].valid()) << "a corrupt page's pin is reset (a miss)";
    // The layers handed over are a prefix of the good ones (the page fails
    // as soon as its bad part is read, maybe before layers 1-4 were handed
    // over), each byte-exact; none from layer 5 on.
    const std::vector<uint8_t> want = Bytes(g.page(), 2);
    bool prefix = true;
    for (uint32_t l = 0; l < g.layers; ++l) {
      if (!sink.seen[2][l]) {
        prefix = false;
        continue;
      }
      EXPECT_TRUE(prefix && l < 5) << "layer " << l << " of the corrupt page";
      EXPECT_TRUE(std::equal(want.begin() + l * g.layer_bytes,
                             want.begin() + (l + 1) * g.layer_bytes,
                             sink.got[2].begin() + l * g.layer_bytes))
          << "layer " << l;
    }
    for (uint64_t i : {0, 1, 3}) EXPECT_EQ(sink.got[i], Bytes(g.page(), i)) << "page " << i;
    EXPECT_EQ(sink.done, g.layers);
    EXPECT_EQ(mgr_->Snapshot().tiers[1].checksum_errors, 1u);
    PageKey k = Key(2);
    EXPECT_EQ(mgr_->Lookup(ns_["a"], absl::MakeConstSpan(&k, 1)).hits, 0u) << "dropped";
    EXPECT_EQ(mgr_->Snapshot().tiers[0].pages, promote ? 3u : 0u);
    pins.clear();
    mgr_.reset();
    std::filesystem::remove_all(dir_);
  }
}

TEST_F(LayerReadsTest, IoErrorFailsOnlyItsPage) {
  const Geometry g{128 << 10, 8};
  ASSERT_NO_FATAL_FAILURE(Open(g, 16, 4, /*promote=*/true));
  faults_->Set(nvme::FaultSpec{.fail_read_n = 7, .read_fault = nvme::FaultKind::kEnospc});
  std::vector<PagePin> pins = PinAll(4);
  RecordingSink sink(4, g.layer_bytes, g.layers);
  Read(pins, sink);
  int failed = 0;
  for (uint64_t i = 0; i < 4; ++i) {
    if (sink.failed[i].ok()) {
      EXPECT_EQ(sink.got[i], Bytes(g.page(), i)) << "page " << i;
      continue;
    }
    ++failed;
    EXPECT_TRUE(absl::IsResourceExhausted(sink.failed[i])) << sink.failed[i];
    EXPECT_TRUE(pins[i].valid()) << "the page is still stored";
  }
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(mgr_->Snapshot().tiers[1].checksum_errors, 0u);
}

TEST_F(LayerReadsTest, SmallPagesAreReadWholeAndRamPagesServedAsTheyAre) {
  const Geometry g{16 << 10, 4};  // 64 KiB pages: no chunks
  ASSERT_NO_FATAL_FAILURE(Open(g, 16, 5, /*promote=*/true));
  std::vector<PagePin> pins = PinAll(5);
  RecordingSink sink(5, g.layer_bytes, g.layers);
  LayerReadStats stats = Read(pins, sink);
  EXPECT_EQ(stats.whole_pages, 5u);
  EXPECT_EQ(stats.chunked_pages, 0u);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(sink.got[i], Bytes(g.page(), i));
  // Promoted by that read: now all in RAM.
  std::vector<PagePin> again = PinAll(5);
  RecordingSink ram(5, g.layer_bytes, g.layers);
  stats = Read(again, ram);
  EXPECT_EQ(stats.ram_pages, 5u);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(ram.got[i], Bytes(g.page(), i));
}

TEST_F(LayerReadsTest, PagesOfAnotherGeometryFail) {
  const Geometry g{128 << 10, 8};
  ASSERT_NO_FATAL_FAILURE(Open(g, 16, 2, /*promote=*/false));
  std::vector<PagePin> pins = PinAll(2);
  RecordingSink sink(2, 64 << 10, 8);
  mgr_->ReadLayers(absl::MakeSpan(pins), 64 << 10, 8, ReadOptions{}, sink);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(absl::IsInvalidArgument(sink.failed[i])) << sink.failed[i];
  EXPECT_TRUE(pins[0].valid());
}

TEST_F(LayerReadsTest, ChunkSumsSurviveARestart) {
  const Geometry g{128 << 10, 8};
  std::filesystem::create_directories(dir_);
  auto file = [&] {
    nvme::FileDeviceConfig fc;
    fc.path = LayerConfig().DataPath();
    fc.size = LayerConfig().capacity_bytes;
    return nvme::CreateFileDevice(fc);
  };
  auto first = file();
  if (!first.ok()) GTEST_SKIP() << first.status();  // no O_DIRECT here
  ASSERT_NO_FATAL_FAILURE(Open(g, 16, 3, /*promote=*/false, *std::move(first)));
  mgr_.reset();
  auto second = file();
  ASSERT_TRUE(second.ok()) << second.status();
  g_ = g;
  std::vector<std::unique_ptr<Tier>> tiers;
  tiers.push_back(HostTier(16 * kBigSlab, kBigSlab));
  auto nvme = CreateNvmeTier(LayerConfig(), *std::move(second));
  ASSERT_TRUE(nvme.ok()) << nvme.status();
  tiers.push_back(*std::move(nvme));
  auto m = TierManager::Create(NoThreadConfig(), std::move(tiers));
  ASSERT_TRUE(m.ok()) << m.status();
  mgr_ = *std::move(m);
  ns_["a"] = AddNs(*mgr_, "a");
  ASSERT_TRUE(mgr_->RecoverPersistent().ok());
  std::vector<PagePin> pins = PinAll(3);
  RecordingSink sink(3, g.layer_bytes, g.layers);
  EXPECT_EQ(Read(pins, sink).chunked_pages, 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(sink.got[i], Bytes(g.page(), i));
}

}  // namespace
}  // namespace kvtier::tiers
