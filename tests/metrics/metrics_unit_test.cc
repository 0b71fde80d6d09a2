// Unit tests of the metrics parts that need no daemon: histogram buckets and
// quantile math, the HTTP request classifier, and the Prometheus rendering of
// a hand-made store snapshot (parsed back with the strict test parser).
#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/get_timer.h"
#include "daemon/latency.h"
#include "daemon/metrics.h"
#include "daemon/metrics_http.h"
#include "tests/metrics/prom_text.h"

namespace kvtier::daemon {
namespace {

using Hist = LatencyHistogram;

TEST(LatencyHistogramTest, BucketsAreUpperInclusivePowersOfTwoMicroseconds) {
  EXPECT_EQ(Hist::BucketFor(0), 0);
  EXPECT_EQ(Hist::BucketFor(1000), 0);  // le 1us
  EXPECT_EQ(Hist::BucketFor(1001), 1);
  EXPECT_EQ(Hist::BucketFor(2000), 1);  // le 2us
  EXPECT_EQ(Hist::BucketFor(2001), 2);
  EXPECT_EQ(Hist::BucketFor(1'000'000), 10);  // 1 ms: le 1.024 ms
  EXPECT_EQ(Hist::BucketFor(Hist::UpperBoundNs(Hist::kFiniteBuckets - 1)), Hist::kFiniteBuckets - 1);
  EXPECT_EQ(Hist::BucketFor(Hist::UpperBoundNs(Hist::kFiniteBuckets - 1) + 1), Hist::kFiniteBuckets);
  EXPECT_EQ(Hist::BucketFor(UINT64_MAX), Hist::kFiniteBuckets);
  // Every value lands in the bucket whose bounds hold it.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const uint64_t ns = rng() >> (rng() % 60);
    const int b = Hist::BucketFor(ns);
    if (b < Hist::kFiniteBuckets) EXPECT_LE(ns, Hist::UpperBoundNs(b)) << ns;
    if (b > 0) EXPECT_GT(ns, Hist::UpperBoundNs(b - 1)) << ns;
  }
}

TEST(LatencyHistogramTest, EmptyHistogramHasZeroQuantiles) {
  Hist h;
  auto s = h.Snap();
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.QuantileNs(0.5), 0);
  EXPECT_EQ(s.MeanNs(), 0);
}

TEST(LatencyHistogramTest, QuantilesInterpolateInsideTheBucket) {
  Hist h;
  // 100 samples of 3 us: all in (2us, 4us]. Rank 50 of 100 is halfway
  // through the bucket: 3 us; every quantile is clamped to the max, 3 us.
  for (int i = 0; i < 100; ++i) h.Record(3000);
  auto s = h.Snap();
  EXPECT_EQ(s.count, 100u);
  EXPECT_EQ(s.sum_ns, 300000u);
  EXPECT_EQ(s.max_ns, 3000u);
  EXPECT_DOUBLE_EQ(s.QuantileNs(0.5), 3000);
  EXPECT_DOUBLE_EQ(s.QuantileNs(0.99), 3000);
  EXPECT_DOUBLE_EQ(s.MeanNs(), 3000);

  // 90 fast (1 us bucket) and 10 slow (in (512us, 1024us]) requests.
  Hist g;
  for (int i = 0; i < 90; ++i) g.Record(800);
  for (int i = 0; i < 10; ++i) g.Record(1'000'000);
  auto t = g.Snap();
  // p50: rank 50 of the 90 in [0, 1us] -> 50/90 us.
  EXPECT_NEAR(t.QuantileNs(0.5), 1000.0 * 50 / 90, 1e-6);
  EXPECT_NEAR(t.QuantileNs(0.9), 1000.0, 1e-6);  // exactly the top of the fast bucket
  // p99: rank 99 -> 9 of the 10 slow ones, in (512us, 1024us], clamped to max 1 ms.
  const double p99 = 512000 + 512000 * 9.0 / 10.0;
  EXPECT_NEAR(t.QuantileNs(0.99), std::min(p99, 1e6), 1e-6);
  EXPECT_DOUBLE_EQ(t.QuantileNs(1.0), 1e6);
}

TEST(LatencyHistogramTest, QuantilesAreWithinOneBucketOfTheTruth) {
  Hist h;
  std::vector<uint64_t> values;
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> dist(std::log(50'000.0), 1.5);  // ~50 us median
  for (int i = 0; i < 20000; ++i) {
    values.push_back(static_cast<uint64_t>(dist(rng)) + 1);
    h.Record(values.back());
  }
  std::sort(values.begin(), values.end());
  auto s = h.Snap();
  for (double q : {0.5, 0.9, 0.99}) {
    const double truth = double(values[static_cast<size_t>(q * values.size()) - 1]);
    const double est = s.QuantileNs(q);
    // Log-2 buckets: the estimate lies in the true value's bucket or a neighbour.
    EXPECT_GT(est, truth / 2.01) << "q=" << q;
    EXPECT_LT(est, truth * 2.01) << "q=" << q;
  }
  EXPECT_LE(s.QuantileNs(0.5), s.QuantileNs(0.9));
  EXPECT_LE(s.QuantileNs(0.9), s.QuantileNs(0.99));
  EXPECT_LE(s.QuantileNs(0.99), double(s.max_ns));
  EXPECT_EQ(s.max_ns, values.back());
}

TEST(LatencyHistogramTest, ConcurrentRecordsAreAllCounted) {
  Hist h;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 50000; ++i) h.Record(1000 * (t + 1) + i % 7);
    });
  for (auto& t : threads) t.join();
  auto s = h.Snap();
  EXPECT_EQ(s.count, 200000u);
  uint64_t total = 0;
  for (uint64_t b : s.buckets) total += b;
  EXPECT_EQ(total, 200000u);
  EXPECT_EQ(s.max_ns, 4006u);
}

TEST(RequestMetricsTest, TypeNamesComeFromTheSchema) {
  EXPECT_EQ(RequestMetrics::TypeName(13), "LOOKUP");
  EXPECT_EQ(RequestMetrics::TypeName(11), "REGISTER_BUFFER");
  EXPECT_EQ(RequestMetrics::TypeName(20), "PING");
  EXPECT_EQ(RequestMetrics::TypeName(0), "INVALID");
  EXPECT_EQ(RequestMetrics::TypeName(2), "UNKNOWN");  // request_id: not a body
  RequestMetrics m;
  m.CountRequest(500);  // out of range: counted as 0
  EXPECT_EQ(m.requests(0), 1u);
}

TEST(HttpClassifyTest, AnswersEveryKindOfRequest) {
  EXPECT_EQ(ClassifyRequest("GET /metrics HTTP/1.1\r\nHost: x").status, 200);
  EXPECT_EQ(ClassifyRequest("GET /metrics?x=1 HTTP/1.0").status, 200);
  EXPECT_TRUE(ClassifyRequest("HEAD /metrics HTTP/1.1").head_only);
  EXPECT_EQ(ClassifyRequest("GET / HTTP/1.1").status, 404);
  EXPECT_EQ(ClassifyRequest("GET /metricsx HTTP/1.1").status, 404);
  EXPECT_EQ(ClassifyRequest("POST /metrics HTTP/1.1").status, 405);
  EXPECT_EQ(ClassifyRequest("DELETE /x HTTP/1.1").status, 405);
  EXPECT_EQ(ClassifyRequest("GET /metrics HTTP/2.0").status, 505);
  for (const char* bad : {"", "garbage", "GET /metrics", "GET  /metrics HTTP/1.1", "get /metrics HTTP/1.1",
                          "GET metrics HTTP/1.1", "GET /metrics FTP/1.0", "GET /m\x01 HTTP/1.1"})
    EXPECT_EQ(ClassifyRequest(bad).status, 400) << bad;
  EXPECT_FALSE(ClassifyRequest("garbage").problem.empty());
}

TEST(HttpClassifyTest, ResponsesCarryLengthAndCloseTheConnection) {
  HttpVerdict v = ClassifyRequest("POST /metrics HTTP/1.1");
  std::string r = HttpResponse(v, "", "text/plain");
  EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 405 Method Not Allowed\r\n")) << r;
  EXPECT_TRUE(absl::StrContains(r, "Allow: GET, HEAD\r\n")) << r;
  EXPECT_TRUE(absl::StrContains(r, "Connection: close\r\n")) << r;
  HttpVerdict head = ClassifyRequest("HEAD /metrics HTTP/1.1");
  std::string h = HttpResponse(head, "abc\n", "text/plain");
  EXPECT_TRUE(absl::StrContains(h, "Content-Length: 4\r\n")) << h;
  EXPECT_TRUE(absl::EndsWith(h, "\r\n\r\n")) << h;  // HEAD: no body
}

tiers::StoreSnapshot HandMadeSnapshot() {
  tiers::StoreSnapshot snap;
  tiers::TierSnapshot host;
  host.kind = tiers::TierKind::kHost;
  host.capacity_bytes = 1 << 30;
  host.used_bytes = 3 << 20;
  host.pages = 3;
  host.hits = 7;
  host.bytes_in = 3 << 20;
  tiers::TierSnapshot nvme;
  nvme.kind = tiers::TierKind::kNvme;
  nvme.pages = 2;
  nvme.io.io_errors = 1;
  nvme.io.class_ios[0] = 4;  // demand
  nvme.io.class_latency_us[0] = 900;
  nvme.io.class_ios[2] = 6;  // write-back
  snap.tiers = {host, nvme};
  tiers::NamespaceSnapshot ns;
  ns.name = "we\"ird\\name";
  ns.pages = 5;
  ns.tier_bytes[tiers::TierKind::kHost] = 3 << 20;
  ns.tier_quota_bytes[tiers::TierKind::kHost] = 8 << 20;
  snap.namespaces = {ns};
  return snap;
}

TEST(PrometheusTest, RendersAParsableExposition) {
  RequestMetrics m;
  m.CountRequest(13);
  m.RecordLatency(13, 1500);
  m.CountRequest(15);
  m.CountError(15);
  m.RecordLatency(15, 3'000'000'000);
  ProcessFigures p{.version = "9.9.9", .uptime_s = 12.5, .rss_bytes = 100, .rss_anon_bytes = 50};
  std::string text = RenderPrometheus(HandMadeSnapshot(), m, p);
  auto x = mtest::ParseExposition(text);
  ASSERT_TRUE(x.ok()) << x.status() << "\n" << text;
  const std::string ns = "we\"ird\\name";  // escaped on the wire, unescaped by the parser
  EXPECT_EQ(*x->Value("kvtier_tier_pages", {{"tier", "host"}}), 3);
  EXPECT_EQ(*x->Value("kvtier_tier_pages", {{"tier", "nvme"}}), 2);
  EXPECT_EQ(*x->Value("kvtier_tier_hits_total", {{"tier", "host"}}), 7);
  EXPECT_EQ(*x->Value("kvtier_tier_io_errors_total", {{"tier", "nvme"}}), 1);
  EXPECT_EQ(*x->Value("kvtier_tier_io_demand_total", {{"tier", "nvme"}}), 4);
  // Summed class latency in seconds (Prometheus' base unit), as a counter.
  EXPECT_NEAR(*x->Value("kvtier_tier_io_demand_latency_seconds_total", {{"tier", "nvme"}}), 900e-6, 1e-12);
  EXPECT_EQ(x->types.at("kvtier_tier_io_demand_latency_seconds_total"), "counter");
  EXPECT_EQ(*x->Value("kvtier_tier_io_prefetch_total", {{"tier", "nvme"}}), 0);
  EXPECT_EQ(*x->Value("kvtier_tier_io_writeback_total", {{"tier", "nvme"}}), 6);
  EXPECT_EQ(*x->Value("kvtier_namespace_pages", {{"namespace", ns}}), 5);
  EXPECT_EQ(*x->Value("kvtier_namespace_bytes", {{"namespace", ns}, {"tier", "host"}}), 3 << 20);
  EXPECT_EQ(*x->Value("kvtier_namespace_bytes", {{"namespace", ns}, {"tier", "nvme"}}), 0);
  EXPECT_EQ(*x->Value("kvtier_namespace_quota_bytes", {{"namespace", ns}, {"tier", "host"}}), 8 << 20);
  EXPECT_FALSE(x->Value("kvtier_namespace_quota_bytes", {{"namespace", ns}, {"tier", "nvme"}}).ok());
  EXPECT_EQ(*x->Value("kvtier_build_info", {{"version", "9.9.9"}}), 1);
  EXPECT_EQ(*x->Value("kvtier_uptime_seconds"), 12.5);
  EXPECT_EQ(*x->Value("kvtier_requests_total", {{"type", "PUT"}}), 1);
  EXPECT_EQ(*x->Value("kvtier_request_errors_total", {{"type", "PUT"}}), 1);
  EXPECT_EQ(*x->Value("kvtier_request_errors_total", {{"type", "LOOKUP"}}), 0);
  // 1.5 us is in le=2e-06; 3 s is in le=4.194304 (2^22 us) and above.
  EXPECT_EQ(*x->Value("kvtier_request_duration_seconds_bucket", {{"type", "LOOKUP"}, {"le", "1e-06"}}), 0);
  EXPECT_EQ(*x->Value("kvtier_request_duration_seconds_bucket", {{"type", "LOOKUP"}, {"le", "2e-06"}}), 1);
  EXPECT_EQ(*x->Value("kvtier_request_duration_seconds_bucket", {{"type", "PUT"}, {"le", "2.097152"}}), 0);
  EXPECT_EQ(*x->Value("kvtier_request_duration_seconds_bucket", {{"type", "PUT"}, {"le", "4.194304"}}), 1);
  EXPECT_EQ(*x->Value("kvtier_request_duration_seconds_count", {{"type", "PUT"}}), 1);
  EXPECT_NEAR(*x->Value("kvtier_request_duration_seconds_sum", {{"type", "PUT"}}), 3.0, 1e-9);
  EXPECT_EQ(x->types.at("kvtier_request_duration_seconds"), "histogram");
  EXPECT_EQ(x->types.at("kvtier_tier_hits_total"), "counter");
  // Types with no traffic have no series.
  EXPECT_TRUE(x->All("kvtier_requests_total").size() == 2);
}

// No family breaks Prometheus' naming rules that `promtool check metrics`
// enforces (scripts/check_monitoring.sh runs promtool itself on a live daemon):
// counters end in _total, no unit but a base one (seconds, bytes), and every
// family with samples has a TYPE.
TEST(PrometheusTest, NamesFollowPrometheusConventions) {
  RequestMetrics m;
  m.CountRequest(13);
  m.RecordLatency(13, 1500);
  ProcessFigures p{.version = "1.2.3"};
  prefetch::PrefetchCounters pc;
  pc.issued = 3;
  pc.promoted_pages = 2;
  pc.leased_pages = 1;
  std::string text = RenderPrometheus(HandMadeSnapshot(), m, p, tiers::SharedCacheCounters{}, pc);
  auto x = mtest::ParseExposition(text);
  ASSERT_TRUE(x.ok()) << x.status() << "\n" << text;
  for (const auto& [family, type] : x->types) {
    for (const char* unit : {"_us", "_ms", "_microseconds", "_milliseconds", "_kib", "_mib"})
      EXPECT_FALSE(absl::StrContains(family, absl::StrCat(unit, "_")) || absl::EndsWith(family, unit))
          << family << " has a non-base unit";
    if (type == "counter") {
      EXPECT_TRUE(absl::EndsWith(family, "_total")) << family;
    } else {
      EXPECT_FALSE(absl::EndsWith(family, "_total")) << family << " is a " << type;
    }
  }
  EXPECT_EQ(*x->Value("kvtier_prefetch_issued_total"), 3);
  EXPECT_EQ(*x->Value("kvtier_prefetch_promoted_pages_total"), 2);
  EXPECT_EQ(*x->Value("kvtier_prefetch_leased_pages"), 1);
  EXPECT_EQ(x->types.at("kvtier_prefetch_leased_pages"), "gauge");
  EXPECT_EQ(*x->Value("kvtier_shared_cache_down_nodes"), 0);
}

TEST(MetricsAddressTest, LoopbackIsToldApartFromOtherAddresses) {
  for (const char* a : {"127.0.0.1", "127.0.0.2", "127.255.255.254", "::1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(*IsLoopbackAddress(a)) << a;
  for (const char* a : {"0.0.0.0", "10.0.0.5", "192.0.2.1", "128.0.0.1", "::", "fe80::1",
                        "::ffff:10.0.0.1", "2001:db8::1"})
    EXPECT_FALSE(*IsLoopbackAddress(a)) << a;
  for (const char* a : {"", "localhost", "127.0.0.1:9464", "1.2.3", "[::1]", "300.0.0.1"}) {
    auto r = IsLoopbackAddress(a);
    ASSERT_FALSE(r.ok()) << a;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << a;
    EXPECT_TRUE(absl::StrContains(r.status().message(), "--metrics_address")) << r.status();
  }
  EXPECT_EQ(HostPort("127.0.0.1", 9464), "127.0.0.1:9464");
  EXPECT_EQ(HostPort("::1", 9464), "[::1]:9464");
}

// An address that cannot be bound (here: a port another socket holds) is an
// error naming the address, the port and the errno text.
TEST(MetricsAddressTest, UnbindableAddressNamesAddressPortAndErrno) {
  MetricsHttpOptions o;
  o.address = "127.0.0.1";
  auto first = MetricsHttpServer::Start(o, [] { return std::string(); });
  ASSERT_TRUE(first.ok()) << first.status();
  o.port = (*first)->port();
  auto second = MetricsHttpServer::Start(o, [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  const std::string msg(second.status().message());
  EXPECT_TRUE(absl::StrContains(msg, absl::StrCat("127.0.0.1:", o.port))) << msg;
  EXPECT_TRUE(absl::StrContains(msg, strerror(EADDRINUSE))) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "--metrics_address")) << msg;
  o.address = "not-an-address";
  auto bad = MetricsHttpServer::Start(o, [] { return std::string(); });
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PrometheusTest, LatencyRowsForStats) {
  RequestMetrics m;
  for (int i = 0; i < 10; ++i) {
    m.CountRequest(14);
    m.RecordLatency(14, 10'000 * (i + 1));
  }
  wire::StatsReply out;
  FillLatency(m, &out);
  ASSERT_EQ(out.latency_size(), 1);
  const auto& l = out.latency(0);
  EXPECT_EQ(l.request(), "GET");
  EXPECT_EQ(l.count(), 10u);
  EXPECT_DOUBLE_EQ(l.max_us(), 100);
  EXPECT_DOUBLE_EQ(l.mean_us(), 55);
  EXPECT_LE(l.p50_us(), l.p90_us());
  EXPECT_LE(l.p90_us(), l.p99_us());
  EXPECT_LE(l.p99_us(), l.max_us());
  EXPECT_GT(l.p50_us(), 16);  // the 5th of 10..100 us is 50 us: bucket (32, 64] us
  EXPECT_LE(l.p50_us(), 64);
}

// GET stages: each GET lands in its total time's bucket, and STATS gives the
// bucket's mean per stage; a GetTimer stamps the stages from the threads a
// GET runs on.
TEST(GetStagesTest, BucketsByTotalTimeWithTheMeanOfEachStage) {
  RequestMetrics m;
  m.get_stages.Record(100'000'000, {60'000'000, 10'000'000, 30'000'000});  // 100 ms
  m.get_stages.Record(90'000'000, {40'000'000, 10'000'000, 40'000'000});   // same bucket
  m.get_stages.Record(3'000, {0, 1'000, 2'000});                          // 3 us
  wire::StatsReply out;
  FillLatency(m, &out);
  ASSERT_EQ(out.get_stages_size(), 2);
  const auto& fast = out.get_stages(0);
  EXPECT_DOUBLE_EQ(fast.le_us(), 4);  // (2, 4] us
  EXPECT_EQ(fast.count(), 1u);
  EXPECT_DOUBLE_EQ(fast.copy_us(), 2);
  const auto& slow = out.get_stages(1);
  EXPECT_DOUBLE_EQ(slow.le_us(), 131072);  // (65.5, 131] ms
  EXPECT_EQ(slow.count(), 2u);
  EXPECT_DOUBLE_EQ(slow.prefetch_wait_us(), 50'000);
  EXPECT_DOUBLE_EQ(slow.copy_queue_us(), 10'000);
  EXPECT_DOUBLE_EQ(slow.copy_us(), 35'000);
}

TEST(GetStagesTest, TimerStampsTheStagesInOrder) {
  GetStages stages;
  auto timer = std::make_shared<GetTimer>();
  std::vector<CopyEngine::Part> parts(2, [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
  timer->Wrap(parts, timer);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // "waiting for promotions"
  timer->Submitted();
  for (auto& p : parts) p();
  timer->Finish(stages);
  const auto snap = stages.Snap();
  uint64_t n = 0;
  GetStages::Durations sum{};
  for (const auto& b : snap) {
    n += b.count;
    for (int k = 0; k < GetStages::kStages; ++k) sum[k] += b.sum_ns[k];
  }
  EXPECT_EQ(n, 1u);
  EXPECT_GE(sum[GetStages::kPrefetchWait], 2'000'000u);
  EXPECT_GE(sum[GetStages::kCopy], 4'000'000u) << "both parts run after the first one started";
}

}  // namespace
}  // namespace kvtier::daemon
