// GoogleTest fixture: one real kvtierd per test, started in SetUp on a
// private socket and stopped with SIGTERM in TearDown, which also checks that
// it exits 0. Subclasses override DaemonOpts() to change flags or tenants.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "kvtier.pb.h"
#include "kvtier/client.h"
#include "tests/integration/daemon_process.h"

namespace kvtier::itest {

// A connected client, or null with the failure recorded (for tests that
// start their daemons themselves; DaemonTest::ConnectTo is the same).
inline std::unique_ptr<Client> ConnectClient(const std::string& endpoint,
                                             const std::string& tenant = "default",
                                             const std::string& token = "",
                                             bool with_layout = true) {
  auto c = Client::Connect(Options(endpoint, tenant, token, with_layout));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

class DaemonTest : public ::testing::Test {
 protected:
  virtual DaemonOptions DaemonOpts() const { return {}; }
  // Tenant and token the readiness probe authenticates as.
  virtual std::string ProbeTenant() const { return "default"; }
  virtual std::string ProbeToken() const { return ""; }

  // A test that needs an NVMe tier skips where /tmp refuses O_DIRECT.
  void SetUp() override {
    const DaemonOptions opts = DaemonOpts();
    auto d = DaemonProcess::Start(opts, ProbeTenant(), ProbeToken());
    if (!d.ok() && opts.nvme && absl::StrContains(d.status().message(), "O_DIRECT"))
      GTEST_SKIP() << "no O_DIRECT under /tmp: " << d.status();
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
  }

  void TearDown() override {
    if (!daemon_) return;
    auto code = daemon_->Stop();
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << "kvtierd did not exit cleanly; log:\n" << daemon_->Log();
    if (HasFailure()) {
      std::string log = daemon_->Log();
      if (log.size() > 4000) log = "..." + log.substr(log.size() - 4000);
      std::cerr << "---- kvtierd log (tail) ----\n" << log << "\n----\n";
    }
  }

  std::unique_ptr<Client> Connect(const std::string& tenant = "default",
                                  const std::string& token = "", bool with_layout = true) {
    return ConnectTo(daemon_->endpoint(), tenant, token, with_layout);
  }

  static std::unique_ptr<Client> ConnectTo(const std::string& endpoint,
                                           const std::string& tenant = "default",
                                           const std::string& token = "",
                                           bool with_layout = true) {
    return ConnectClient(endpoint, tenant, token, with_layout);
  }

  std::unique_ptr<DaemonProcess> daemon_;
};

// The tier called `name` in a STATS reply, or null.
inline const wire::TierStats* FindTier(const wire::StatsReply& s, absl::string_view name) {
  for (const auto& t : s.tiers())
    if (t.name() == name) return &t;
  return nullptr;
}

}  // namespace kvtier::itest
