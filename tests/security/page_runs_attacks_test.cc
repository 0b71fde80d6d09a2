// Scattered pages (Get/Put.page_runs, docs/PROTOCOL.md "Scattered pages")
// spoken raw from the wire, as the protocol text describes them: a page cut
// into runs lands at each key's offset + the run's buffer_offset, in page
// order, and nothing between the runs is touched; a PUT from runs stores the
// page in run order. Malformed runs are refused by name, nothing stored is
// lost, and another tenant's keys read through runs are misses.
#include <signal.h>
#include <time.h>

#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "kvtier/shm_buffer.h"
#include "tests/security/security_fixture.h"

namespace kvtier::security {
namespace {

// The runs of these tests: a 64 KiB page in four 16 KiB runs, laid out in
// the buffer backwards with a 4 KiB gap after each (an engine's K/V blocks
// are no more orderly). A key's runs span kSpan bytes from its offset.
constexpr uint64_t kRun = kPage / 4, kGap = 4096, kSpan = 4 * (kRun + kGap);
constexpr uint8_t kUntouched = 0xEE;

uint64_t RunAt(int j) { return uint64_t(3 - j) * (kRun + kGap); }

void AddRuns(google::protobuf::RepeatedPtrField<wire::PageRun>* out) {
  for (int j = 0; j < 4; ++j) {
    auto* r = out->Add();
    r->set_length(kRun);
    r->set_buffer_offset(RunAt(j));
  }
}

std::vector<uint64_t> Offsets(size_t n) {
  std::vector<uint64_t> o;
  for (size_t i = 0; i < n; ++i) o.push_back(i * kSpan);
  return o;
}

class PageRunsOnTheWire : public WithAlicePages<3301> {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(WithAlicePages<3301>::SetUp());
    if (IsSkipped()) return;
    auto b = ShmBuffer::Create(4 * kSpan);
    ASSERT_TRUE(b.ok()) << b.status();
    buf_ = std::move(*b);
    std::memset(buf_->data(), kUntouched, buf_->size());
    mallory_ = Mallory();
    auto r = mallory_->Call(RegisterShmReq(buf_->name(), buf_->size()));
    EXPECT_WIRE_CODE(r, OK);
    buffer_id_ = r->response.register_buffer().buffer_id();
  }
  // Byte `b` of page `i`'s runs in the buffer.
  uint8_t* At(size_t i, uint64_t b) {
    return buf_->data() + i * kSpan + RunAt(static_cast<int>(b / kRun)) + b % kRun;
  }
  void RoundTrip(uint64_t seed);
  std::unique_ptr<ShmBuffer> buf_;
  std::unique_ptr<WirePeer> mallory_;
  uint32_t buffer_id_ = 0;
};

TEST_F(PageRunsOnTheWire, HelloListsTheFeature) {
  WirePeer p(daemon_->endpoint(), kMallory, kMalloryToken);
  auto r = p.Hello(kMallory, kMalloryToken, itest::SmallLayout());
  EXPECT_WIRE_CODE(r, OK);
  const auto& f = r->response.hello().features();
  EXPECT_NE(std::find(f.begin(), f.end(), "page_runs"), f.end());
}

// A PUT from runs, then GETs through them: whole, and layer by layer.
void PageRunsOnTheWire::RoundTrip(uint64_t seed) {
  const std::vector<PageKey> keys = itest::MakeChain(itest::SmallLayout(), seed, 4);
  const std::vector<std::string> pages = PatternPages(keys, kPage, /*salt=*/7);
  for (size_t i = 0; i < keys.size(); ++i)
    for (uint64_t b = 0; b < kPage; ++b) *At(i, b) = static_cast<uint8_t>(pages[i][b]);
  wire::Request put;
  put.mutable_put()->set_keys(PackKeys(keys));
  put.mutable_put()->set_parent(std::string(kPageKeyBytes, '\0'));
  put.mutable_put()->set_buffer_id(buffer_id_);
  for (uint64_t o : Offsets(keys.size())) put.mutable_put()->add_offsets(o);
  AddRuns(put.mutable_put()->mutable_page_runs());
  auto stored = mallory_->Call(put);
  EXPECT_WIRE_CODE(stored, OK);
  EXPECT_EQ(stored->response.put().stored(), keys.size());

  // The store holds each page in run order: an inline GET returns it whole.
  auto whole = mallory_->Call(GetInlineReq(keys));
  EXPECT_WIRE_CODE(whole, OK);
  ASSERT_EQ(whole->payloads.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(whole->payloads[i], pages[i]) << "page " << i;

  // A GET through the runs puts every byte back where it came from and
  // leaves the gaps as they were.
  std::memset(buf_->data(), kUntouched, buf_->size());
  wire::Request get = GetReq(keys, buffer_id_, Offsets(keys.size()));
  AddRuns(get.mutable_get()->mutable_page_runs());
  auto got = mallory_->Call(get);
  EXPECT_WIRE_CODE(got, OK);
  EXPECT_EQ(got->response.get().tiers(), std::string(keys.size(), char(wire::TIER_HOST)));
  size_t wrong = 0, gaps_touched = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    for (uint64_t b = 0; b < kPage; ++b) wrong += *At(i, b) != static_cast<uint8_t>(pages[i][b]);
  for (size_t i = 0; i < keys.size(); ++i)
    for (int j = 0; j < 4; ++j)
      for (uint64_t g = 0; g < kGap; ++g)
        gaps_touched += buf_->data()[i * kSpan + RunAt(j) + kRun + g] != kUntouched;
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(gaps_touched, 0u);

  // Layer-wise delivery goes through the same runs (a layer may span two).
  std::memset(buf_->data(), kUntouched, buf_->size());
  get.mutable_get()->set_layerwise(true);
  get.mutable_get()->set_layer_progress_offset(4 * kSpan - 8);  // in the last gap
  auto layered = mallory_->Call(get);
  EXPECT_WIRE_CODE(layered, OK);
  wrong = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    for (uint64_t b = 0; b < kPage; ++b) wrong += *At(i, b) != static_cast<uint8_t>(pages[i][b]);
  EXPECT_EQ(wrong, 0u);
}

TEST_F(PageRunsOnTheWire, PutFromRunsAndGetIntoRunsMoveExactlyThePage) { RoundTrip(3302); }

// Write-through: each page also needs its bytes whole (checksum, NVMe copy),
// so the daemon gathers the runs once and fills from there.
class PageRunsWriteThrough : public PageRunsOnTheWire {
 protected:
  bool Nvme() const override { return true; }
  std::vector<std::string> Flags() const override { return {"--write_policy=write-through"}; }
};

TEST_F(PageRunsWriteThrough, PutFromRunsAndGetIntoRunsMoveExactlyThePage) { RoundTrip(3304); }

TEST_F(PageRunsOnTheWire, MalformedRunsAreRefusedByName) {
  const std::vector<PageKey> keys = itest::MakeChain(itest::SmallLayout(), 3303, 2);
  struct Case {
    std::string what;
    std::function<void(wire::Request&)> edit;
    wire::Code code;
    std::string says;
  };
  auto run = [](wire::Request& r, uint64_t len, uint64_t at) {
    auto* x = r.mutable_get()->add_page_runs();
    x->set_length(len);
    x->set_buffer_offset(at);
  };
  const std::vector<Case> cases = {
      {"runs short of a page", [&](wire::Request& r) { run(r, kPage - 1, 0); },
       wire::INVALID_ARGUMENT, "cover"},
      {"runs past a page", [&](wire::Request& r) { run(r, kPage, 0); run(r, 1, kPage); },
       wire::INVALID_ARGUMENT, "cover"},
      {"a zero-length run", [&](wire::Request& r) { run(r, 0, 0); run(r, kPage, 0); },
       wire::INVALID_ARGUMENT, "length 0"},
      {"a run past the buffer", [&](wire::Request& r) { run(r, kPage, 4 * kSpan - kPage + 1); },
       wire::OUT_OF_RANGE, "outside buffer"},
      {"an offset whose runs wrap around", [&](wire::Request& r) {
         r.mutable_get()->set_offsets(1, ~uint64_t{0} - 100);
         run(r, kPage, 0);
       }, wire::OUT_OF_RANGE, "outside buffer"},
      {"a run offset that wraps", [&](wire::Request& r) { run(r, kPage, ~uint64_t{0} - 10); },
       wire::OUT_OF_RANGE, "outside buffer"},
      {"too many runs", [&](wire::Request& r) { for (int j = 0; j < 65537; ++j) run(r, 1, 0); },
       wire::INVALID_ARGUMENT, "at most 65536"},
      {"runs on an inline GET", [&](wire::Request& r) {
         r.mutable_get()->set_buffer_id(0);
         r.mutable_get()->clear_offsets();
         run(r, kPage, 0);
       }, wire::INVALID_ARGUMENT, "without a buffer_id"},
      {"a progress counter inside a run", [&](wire::Request& r) {
         AddRuns(r.mutable_get()->mutable_page_runs());
         r.mutable_get()->set_layerwise(true);
         r.mutable_get()->set_layer_progress_offset(RunAt(2) + 8);
       }, wire::INVALID_ARGUMENT, "overlaps run 2 of page 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    wire::Request r = GetReq(keys, buffer_id_, Offsets(keys.size()));
    c.edit(r);
    auto reply = mallory_->Call(r);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->response.code(), c.code)
        << wire::Code_Name(reply->response.code()) << ": " << reply->response.message();
    EXPECT_TRUE(absl::StrContains(reply->response.message(), c.says))
        << "'" << reply->response.message() << "' does not say '" << c.says << "'";
    // The same runs on a PUT: refused alike, nothing stored.
    wire::Request p;
    p.mutable_put()->set_keys(r.get().keys());
    p.mutable_put()->set_buffer_id(r.get().buffer_id());
    *p.mutable_put()->mutable_offsets() = r.get().offsets();
    *p.mutable_put()->mutable_page_runs() = r.get().page_runs();
    if (r.get().layerwise()) continue;  // a GET-only field
    auto put = mallory_->Call(p);
    ASSERT_TRUE(put.ok()) << put.status();
    EXPECT_NE(put->response.code(), wire::OK);
  }
  auto look = mallory_->Call(LookupReq(keys));
  EXPECT_WIRE_CODE(look, OK);
  EXPECT_EQ(look->response.lookup().hits(), 0u) << "a refused PUT stored pages";
  EXPECT_TRUE(daemon_->Alive());
}

TEST_F(PageRunsOnTheWire, AnotherTenantsKeysThroughRunsAreMisses) {
  wire::Request get = GetReq(keys_, buffer_id_, Offsets(keys_.size()));
  AddRuns(get.mutable_get()->mutable_page_runs());
  auto r = mallory_->Call(get);
  EXPECT_WIRE_CODE(r, OK);
  EXPECT_EQ(r->response.get().tiers(), std::string(keys_.size(), '\0'));
  size_t touched = 0;
  for (uint64_t b = 0; b < buf_->size(); ++b) touched += buf_->data()[b] != kUntouched;
  EXPECT_EQ(touched, 0u) << "alice's bytes reached mallory's buffer";
}

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

// Deadlines (docs/PROTOCOL.md, "Deadlines"): a transfer that reaches the
// daemon after its deadline touches nothing, and says so.
TEST_F(PageRunsOnTheWire, ATransferPastItsDeadlineTouchesNothing) {
  const uint64_t past = MonotonicNs() - 1000000;
  wire::Request get = GetReq(keys_, buffer_id_, Offsets(keys_.size()));
  get.mutable_get()->set_deadline_ns(past);
  auto r = mallory_->Call(get);
  EXPECT_WIRE_CODE(r, DEADLINE_EXCEEDED);
  EXPECT_TRUE(absl::StrContains(r->response.message(), "deadline_ns")) << r->response.message();

  const std::vector<PageKey> keys = itest::MakeChain(itest::SmallLayout(), 3305, 2);
  wire::Request put;
  put.mutable_put()->set_keys(PackKeys(keys));
  put.mutable_put()->set_buffer_id(buffer_id_);
  for (uint64_t o : Offsets(keys.size())) put.mutable_put()->add_offsets(o);
  put.mutable_put()->set_deadline_ns(past);
  auto p = mallory_->Call(put);
  EXPECT_WIRE_CODE(p, DEADLINE_EXCEEDED);
  auto look = mallory_->Call(LookupReq(keys));
  EXPECT_WIRE_CODE(look, OK);
  EXPECT_EQ(look->response.lookup().hits(), 0u);
  size_t touched = 0;
  for (uint64_t b = 0; b < buf_->size(); ++b) touched += buf_->data()[b] != kUntouched;
  EXPECT_EQ(touched, 0u);
}

// The case deadlines exist for: the daemon stalls (here SIGSTOP) while a
// client's GET is queued; the client gives up, reuses its memory, and the
// daemon, resumed, must not write into it then. Nor may a PUT given up on
// store what the buffer holds later.
TEST_F(PageRunsOnTheWire, AGetGivenUpOnNeverWritesLater) {
  auto b = ShmBuffer::Create(keys_.size() * kPage);
  ASSERT_TRUE(b.ok()) << b.status();
  std::memset((*b)->data(), kUntouched, (*b)->size());
  std::unique_ptr<Client> alice = Alice();
  ASSERT_TRUE(alice);
  ClientOptions o = itest::Options(daemon_->endpoint(), kAlice, kAliceToken);
  o.layout = itest::SmallLayout();
  o.timeout = std::chrono::milliseconds(300);
  auto impatient = Client::Connect(o);
  ASSERT_TRUE(impatient.ok()) << impatient.status();
  auto id2 = (*impatient)->RegisterBuffer(**b);
  ASSERT_TRUE(id2.ok()) << id2.status();
  std::vector<uint64_t> offsets;
  for (size_t i = 0; i < keys_.size(); ++i) offsets.push_back(i * kPage);

  ASSERT_EQ(kill(daemon_->pid(), SIGSTOP), 0);
  auto got = (*impatient)->Get(keys_, *id2, offsets);
  EXPECT_FALSE(got.ok());
  const std::vector<PageKey> fresh = itest::MakeChain(itest::SmallLayout(), 3306, 4);
  auto put = (*impatient)->Put(fresh, PageKey::Zero(), *id2, offsets);
  EXPECT_FALSE(put.ok());
  ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
  // The daemon now takes the queued GET and PUT; both are past their deadline.
  auto ping = alice->Ping();
  ASSERT_TRUE(ping.ok()) << ping.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  size_t touched = 0;
  for (uint64_t i = 0; i < (*b)->size(); ++i) touched += (*b)->data()[i] != kUntouched;
  EXPECT_EQ(touched, 0u) << "the daemon wrote into memory after the client gave up";
  auto look = alice->Lookup(fresh);
  ASSERT_TRUE(look.ok()) << look.status();
  EXPECT_EQ(look->hits, 0u) << "a PUT given up on stored pages";
}

}  // namespace
}  // namespace kvtier::security
