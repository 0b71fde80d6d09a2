// Fixtures for tests of the NVMe tier under the TierManager: a host tier over
// an NVMe tier on a real file (real RocksDB) that can be reopened (a restart),
// and the same over a fault-injecting device.
#pragma once

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "tests/unit/tiers_test_util.h"
#include "tiers/nvme/device.h"
#include "tiers/nvme/nvme_tier.h"

namespace kvtier::tiers {

using testing::AddNs;
using testing::Bytes;
using testing::HostTier;
using testing::Key;
using testing::NoThreadConfig;
using testing::Put;

// A device that hands every I/O to `inner`; tests override what they watch.
class ForwardingDevice : public nvme::Device {
 public:
  explicit ForwardingDevice(std::unique_ptr<nvme::Device> inner)
      : Device(inner->size()), inner_(std::move(inner)) {}
  std::string Describe() const override { return "forward(" + inner_->Describe() + ")"; }

 protected:
  nvme::Device& inner() { return *inner_; }
  absl::Status ReadImpl(uint64_t offset, void* buf, uint64_t n) override {
    return inner_->Read(offset, buf, n);
  }
  absl::Status WriteImpl(uint64_t offset, const void* buf, uint64_t n) override {
    return inner_->Write(offset, buf, n);
  }
  void ReadAsyncImpl(uint64_t offset, void* buf, uint64_t n, nvme::IoCallback cb) override {
    inner_->ReadAsync(offset, buf, n, std::move(cb));
  }
  void WriteAsyncImpl(uint64_t offset, const void* buf, uint64_t n, nvme::IoCallback cb) override {
    inner_->WriteAsync(offset, buf, n, std::move(cb));
  }
  absl::Status FlushImpl() override { return inner_->Flush(); }

 private:
  std::unique_ptr<nvme::Device> inner_;
};

constexpr uint64_t kPage = 64 << 10;  // 64 KiB pages
constexpr uint64_t kSlab = 1 << 20;

class NvmeTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvtier-nvme-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    mgr_.reset();
    std::filesystem::remove_all(dir_);
  }

  NvmeTierConfig NvmeConfig() const {
    NvmeTierConfig c;
    c.dir = dir_.string();
    c.capacity_bytes = 16 * kSlab;
    c.slab_bytes = kSlab;
    return c;
  }

  // A host tier of `host_pages` pages over an NVMe tier in dir_; file device.
  void Open(uint64_t host_pages, std::vector<std::string> tenants = {"a"},
            TierManagerConfig config = NoThreadConfig()) {
    mgr_.reset();
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(HostTier(host_pages * kPage, kPage));
    auto nvme = CreateNvmeTier(NvmeConfig());
    if (!nvme.ok() && absl::IsFailedPrecondition(nvme.status())) GTEST_SKIP() << nvme.status();
    ASSERT_TRUE(nvme.ok()) << nvme.status();
    tiers.push_back(*std::move(nvme));
    config.write_through = write_through_;
    auto m = TierManager::Create(config, std::move(tiers));
    ASSERT_TRUE(m.ok()) << m.status();
    mgr_ = *std::move(m);
    for (const auto& t : tenants) ns_[t] = AddNs(*mgr_, t);
    ASSERT_TRUE(mgr_->RecoverPersistent().ok());
  }
  bool write_through_ = false;

  // Puts a chain of pages 0..n-1 (bytes a function of the key).
  void PutChain(const std::string& tenant, uint64_t first, uint64_t n) {
    for (uint64_t i = first; i < first + n; ++i) {
      PageKey parent = i == first ? PageKey::Zero() : Key(i - 1);
      ASSERT_TRUE(Put(*mgr_, ns_[tenant], Key(i), parent, Bytes(kPage, i)).ok());
    }
  }

  // GET as the daemon does it: pin, promote if on NVMe, copy out.
  absl::StatusOr<TierKind> Get(const std::string& tenant, uint64_t i, std::vector<uint8_t>* out) {
    auto pin = mgr_->PinForRead(ns_[tenant], Key(i));
    if (!pin) return absl::NotFoundError("miss");
    TierKind served = pin->tier();
    out->resize(pin->bytes());
    if (pin->data() == nullptr) mgr_->Promote(*pin);
    if (pin->data() != nullptr) {
      std::memcpy(out->data(), pin->data(), pin->bytes());
    } else if (auto st = pin->CopyTo(out->data()); !st.ok()) {
      return st;
    }
    return served;
  }

  TierSnapshot Snap(size_t t) { return mgr_->Snapshot().tiers[t]; }

  // Read pins of tenant "a"'s pages 0..n-1 (all must be present).
  std::vector<PagePin> PinAll(uint64_t n) {
    std::vector<PagePin> pins(n);
    for (uint64_t i = 0; i < n; ++i) {
      auto pin = mgr_->PinForRead(ns_["a"], Key(i));
      EXPECT_TRUE(pin.has_value()) << i;
      if (pin) pins[i] = *std::move(pin);
    }
    return pins;
  }

  std::filesystem::path dir_;
  std::unique_ptr<TierManager> mgr_;
  std::map<std::string, NamespaceId> ns_;
};

class NvmeFaultTest : public NvmeTierTest {
 protected:
  // A host tier of `host_pages` over an NVMe tier whose device is `inner`
  // behind the fault injector (a memory device unless given), managed
  // under `config` (write_through_ applies on top).
  void OpenFaulty(uint64_t host_pages, std::unique_ptr<nvme::Device> inner = nullptr,
                  TierManagerConfig config = NoThreadConfig()) {
    mgr_.reset();
    if (inner == nullptr) inner = nvme::CreateMemoryDevice(NvmeConfig().capacity_bytes);
    std::vector<std::unique_ptr<Tier>> tiers;
    tiers.push_back(HostTier(host_pages * kPage, kPage));
    auto nvme = CreateNvmeTier(NvmeConfig(),
                               nvme::CreateFaultInjectingDevice(std::move(inner), faults_));
    ASSERT_TRUE(nvme.ok()) << nvme.status();
    tiers.push_back(*std::move(nvme));
    config.write_through = write_through_;
    auto m = TierManager::Create(config, std::move(tiers));
    ASSERT_TRUE(m.ok()) << m.status();
    mgr_ = *std::move(m);
    ns_["a"] = AddNs(*mgr_, "a");
    ASSERT_TRUE(mgr_->RecoverPersistent().ok());
  }

  // The data file behind the fault injector, for cases that restart.
  absl::StatusOr<std::unique_ptr<nvme::Device>> FileDevice() {
    std::filesystem::create_directories(dir_);
    nvme::FileDeviceConfig fc;
    fc.path = NvmeConfig().DataPath();
    fc.size = NvmeConfig().capacity_bytes;
    return nvme::CreateFileDevice(fc);
  }

  // GETs pages [first, first + n): counts hits, and fails on wrong bytes.
  uint64_t CountGood(uint64_t first, uint64_t n) {
    uint64_t good = 0;
    std::vector<uint8_t> got;
    for (uint64_t i = first; i < first + n; ++i) {
      if (!Get("a", i, &got).ok()) continue;
      EXPECT_EQ(got, Bytes(kPage, i)) << "page " << i << " came back with wrong bytes";
      good += got == Bytes(kPage, i);
    }
    return good;
  }

  std::shared_ptr<nvme::FaultControl> faults_ = std::make_shared<nvme::FaultControl>();
};

}  // namespace kvtier::tiers
