// kvtier-stress as a user runs it: the first 300 requests of the Mooncake
// trace against a real kvtierd with tiny host and NVMe tiers (so pages are
// demoted, read back from NVMe and promoted), checked through its JSON
// report; and proof that its byte check catches a page with wrong bytes.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "kvtier/shm_buffer.h"
#include "nlohmann/json.hpp"
#include "tests/integration/daemon_process.h"
#include "tools/stress/stress_options.h"
#include "tools/trace/trace.h"

namespace kvtier::itest {
namespace {

const std::string kTrace = std::string(KVTIER_TEST_DATA_DIR) + "/synthetic_trace.jsonl";

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
}

std::unique_ptr<DaemonProcess> StartTinyDaemon() {
  // 16 MiB of RAM and 64 MiB of NVMe (under /tmp, a real disk) hold 1,280
  // of the 7,352 distinct 64 KiB pages the replay writes.
  DaemonOptions opts{.flags = {"--host_bytes=16MiB", "--host_slab_bytes=1MiB"}, .nvme = true};
  auto d = DaemonProcess::Start(opts);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? std::move(*d) : nullptr;
}

TEST(StressReplayTest, FirstRequestsOfMooncakeTraceReplayClean) {
  auto daemon = StartTinyDaemon();
  ASSERT_TRUE(daemon);
  const std::string json_path = daemon->dir() + "/report.json";
  const std::string csv_path = daemon->dir() + "/series.csv";
  CommandResult r = RunCommand({KVTIER_STRESS_PATH, "--trace=" + kTrace,
                                "--endpoint=" + daemon->endpoint(), "--page_bytes=64KiB",
                                "--max_requests=300", "--concurrency=2", "--json_out=" + json_path,
                                "--csv_out=" + csv_path, "--csv_interval_ms=200"},
                               /*timeout_ms=*/60000);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err << daemon->Log();
  EXPECT_TRUE(absl::StrContains(r.out, "kvtier-stress report")) << r.out;
  const nlohmann::json j = ReadJson(json_path);
  ASSERT_FALSE(j.is_discarded()) << json_path;
  EXPECT_EQ(j["errors"], 0) << j["error_samples"].dump();
  EXPECT_EQ(j["corrupt_pages"], 0) << j["error_samples"].dump();
  EXPECT_EQ(j["requests"], 300);
  EXPECT_EQ(j["trace"]["block_refs"], 7721);
  EXPECT_EQ(j["pages"]["looked_up"], 7721);
  EXPECT_GT(j["hit_rate"]["overall"].get<double>(), 0.0);
  EXPECT_LE(j["hit_rate"]["overall"].get<double>(), j["trace"]["infinite_cache_hit_rate"].get<double>());
  EXPECT_EQ(j["pages"]["hits"].get<uint64_t>() + j["pages"]["misses"].get<uint64_t>(), 7721u);
  // Every miss was PUT: stored, deduplicated (a concurrent session stored it
  // first) or refused for room.
  const nlohmann::json& p = j["pages"];
  EXPECT_EQ(p["put_stored"].get<uint64_t>() + p["put_deduplicated"].get<uint64_t>() +
                p["put_not_stored"].get<uint64_t>(),
            p["misses"].get<uint64_t>() + p["decode_pages"].get<uint64_t>());
  EXPECT_GT(j["bytes"]["get"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["mapping"]["page_bytes"], 64 * 1024);
  // The tiny tiers were really exercised: pages went down to NVMe.
  uint64_t demotions = 0, nvme_in = 0;
  for (const auto& t : j["daemon_tiers"]) {
    demotions += t["demotions"].get<uint64_t>();
    if (t["name"] == "nvme") nvme_in = t["bytes_in"].get<uint64_t>();
  }
  EXPECT_GT(demotions, 0u) << j["daemon_tiers"].dump();
  EXPECT_GT(nvme_in, 0u) << j["daemon_tiers"].dump();
  // The time series ends at the whole run.
  std::ifstream csv(csv_path);
  std::string line, last;
  ASSERT_TRUE(std::getline(csv, line));
  EXPECT_TRUE(absl::StartsWith(line, "elapsed_s,requests,pages,hit_pages")) << line;
  while (std::getline(csv, line)) last = line;
  EXPECT_TRUE(absl::StrContains(last, ",300,7721,")) << last;
}

TEST(StressReplayTest, WrongBytesAreCountedAsCorrupt) {
  auto daemon = StartTinyDaemon();
  ASSERT_TRUE(daemon);
  // Store garbage under the key kvtier-stress will derive for the trace's
  // first page; its GET must then fail the byte check.
  auto t = trace::LoadTrace(kTrace, {.max_requests = 5});
  ASSERT_TRUE(t.ok()) << t.status();
  stress::StressOptions so;
  so.page_bytes = 64 * 1024;
  auto layout = stress::MakeLayout(so, t->block_tokens);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ClientOptions co{.endpoint = daemon->endpoint(), .layout = *layout};
  auto c = Client::Connect(co);
  ASSERT_TRUE(c.ok()) << c.status();
  const PageKey key =
      stress::KeyForPage(layout->Id(), stress::TraceSalt(*t), t->requests[0].block_ids[0]);
  const std::string garbage(layout->PageBytes(), '\x5a');
  const absl::string_view page = garbage;
  auto put = (*c)->PutInline({&key, 1}, PageKey::Zero(), {&page, 1});
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(put->stored, 1u);

  const std::string json_path = daemon->dir() + "/report.json";
  CommandResult r = RunCommand({KVTIER_STRESS_PATH, "--trace=" + kTrace,
                                "--endpoint=" + daemon->endpoint(), "--page_bytes=64KiB",
                                "--max_requests=5", "--json_out=" + json_path},
                               /*timeout_ms=*/30000);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const nlohmann::json j = ReadJson(json_path);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["corrupt_pages"], 1);
  EXPECT_EQ(j["ok"], false);
  ASSERT_FALSE(j["error_samples"].empty());
  const std::string sample = j["error_samples"][0];
  EXPECT_TRUE(absl::StrContains(sample, "corrupt page: trace line 1, key " + key.ToHex()))
      << sample;
  EXPECT_TRUE(absl::StrContains(sample, "first wrong byte at offset 0")) << sample;
}

TEST(StressReplayTest, BadTraceLineStopsWithItsLineNumber) {
  TempDir dir;
  const std::string path = dir.File("bad.jsonl");
  std::ofstream(path) << R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]})"
                      << "\n{\"timestamp\": 1, \"input_length\": 10}\n";
  CommandResult r = RunCommand({KVTIER_STRESS_PATH, "--trace=" + path,
                                "--endpoint=ipc://" + dir.File("none.sock"), "--timeout_ms=300"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(r.err, path + ":2: missing field 'output_length'")) << r.err;
}

}  // namespace
}  // namespace kvtier::itest
