// Hostile and broken requests over a real socket, from a raw ZeroMQ DEALER
// that bypasses the client library. For each: the reply carries the right
// code and a message naming the problem, the daemon keeps serving, and pages
// stored before are still there byte-exact (checked in TearDown by a fresh
// client).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <optional>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/wire_calls.h"
#include "kvtier.pb.h"
#include "kvtier/shm_buffer.h"
#include "tests/integration/daemon_fixture.h"
#include "tools/common/page_pattern.h"
#include "zmq.hpp"

namespace kvtier::itest {
namespace {

constexpr uint64_t kPage = kSmallPageBytes;
constexpr char kTenants[] = R"({"tenants": [
  {"name": "alice", "token": "alice-secret-1"},
  {"name": "tiny", "token": "tiny-secret-1", "quota": {"host": "192KiB"}},
  {"name": "ops", "token": "ops-secret-333", "admin": true}]})";

struct Reply {
  wire::Response response;
  std::vector<std::string> payloads;
};

std::string Packed(absl::Span<const PageKey> keys) { return PackKeys(keys); }

// One raw DEALER connection. Requests get version 1 and a fresh id unless
// the test sets them; the session id is whatever the test puts in.
class RawPeer {
 public:
  // Authenticates in the handshake as `tenant` (PLAIN, docs/PROTOCOL.md).
  explicit RawPeer(const std::string& endpoint, const std::string& tenant = "alice",
                   const std::string& token = "alice-secret-1")
      : socket_(ctx_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::plain_username, tenant);
    socket_.set(zmq::sockopt::plain_password, token);
    socket_.connect(endpoint);
  }

  void SendFrames(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      socket_.send(zmq::buffer(frames[i]), flags);
    }
  }

  std::optional<std::vector<std::string>> RecvFrames(int timeout_ms = 5000) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(timeout_ms)) == 0) return std::nullopt;
    std::vector<std::string> frames;
    for (;;) {
      zmq::message_t m;
      if (!socket_.recv(m)) break;
      frames.push_back(m.to_string());
      if (!m.more()) break;
    }
    return frames;
  }

  // Sends raw frames and parses the reply.
  absl::StatusOr<Reply> CallRaw(const std::vector<std::string>& frames) {
    SendFrames(frames);
    auto got = RecvFrames();
    if (!got) return absl::DeadlineExceededError("no reply from kvtierd within 5 s");
    Reply r;
    if (got->empty() || !r.response.ParseFromString((*got)[0]))
      return absl::DataLossError("reply header is not a kvtier.wire.Response");
    r.payloads.assign(got->begin() + 1, got->end());
    return r;
  }

  // Fills in version, request id and session (unless already set).
  absl::StatusOr<Reply> Call(wire::Request req, const std::vector<std::string>& payloads = {}) {
    if (req.version() == 0) req.set_version(1);
    if (req.request_id() == 0) req.set_request_id(next_id_++);
    if (!req.has_hello() && req.session_id().empty()) req.set_session_id(session_);
    std::vector<std::string> frames = {req.SerializeAsString()};
    frames.insert(frames.end(), payloads.begin(), payloads.end());
    auto r = CallRaw(frames);
    if (r.ok() && r->response.request_id() != req.request_id())
      return absl::InternalError(absl::StrCat("reply id ", r->response.request_id(),
                                              " does not echo request id ", req.request_id()));
    return r;
  }

  absl::StatusOr<Reply> Hello(const std::string& tenant, const std::string& token,
                              bool layout = true) {
    wire::Request req;
    auto* h = req.mutable_hello();
    h->set_tenant(tenant);
    h->set_token(token);
    h->set_client_name("raw-peer");
    if (layout) {
      Layout l = SmallLayout();
      auto* wl = h->mutable_layout();
      wl->set_layers(l.layers);
      wl->set_kv_heads(l.kv_heads);
      wl->set_head_dim(l.head_dim);
      wl->set_tokens_per_page(l.tokens_per_page);
      wl->set_dtype(static_cast<wire::Dtype>(l.dtype));
    }
    auto r = Call(req);
    if (r.ok() && r->response.code() == wire::OK) session_ = r->response.hello().session_id();
    return r;
  }

  const std::string& session() const { return session_; }
  void set_session(std::string s) { session_ = std::move(s); }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t socket_;
  std::string session_;
  uint64_t next_id_ = 1;
};

#define EXPECT_WIRE_ERROR(reply, code_, substring)                                            \
  do {                                                                                        \
    auto&& r_ = (reply);                                                                      \
    ASSERT_TRUE(r_.ok()) << r_.status();                                                      \
    EXPECT_EQ(r_->response.code(), wire::code_)                                               \
        << wire::Code_Name(r_->response.code()) << ": " << r_->response.message();           \
    EXPECT_TRUE(absl::StrContains(r_->response.message(), substring))                         \
        << "message '" << r_->response.message() << "' does not mention '" << substring << "'"; \
    EXPECT_TRUE(r_->payloads.empty());                                                        \
  } while (0)

#define EXPECT_WIRE_OK(reply)                                                           \
  do {                                                                                  \
    auto&& r_ = (reply);                                                                \
    ASSERT_TRUE(r_.ok()) << r_.status();                                                \
    EXPECT_EQ(r_->response.code(), wire::OK) << r_->response.message();                 \
  } while (0)

wire::Request LookupReq(const std::string& packed) {
  wire::Request r;
  r.mutable_lookup()->set_keys(packed);
  return r;
}

wire::Request GetReq(absl::Span<const PageKey> keys, uint32_t buffer,
                     std::vector<uint64_t> offsets) {
  wire::Request r;
  r.mutable_get()->set_keys(Packed(keys));
  r.mutable_get()->set_buffer_id(buffer);
  for (uint64_t o : offsets) r.mutable_get()->add_offsets(o);
  return r;
}

wire::Request PutReq(absl::Span<const PageKey> keys, uint32_t buffer,
                     std::vector<uint64_t> offsets) {
  wire::Request r;
  r.mutable_put()->set_keys(Packed(keys));
  r.mutable_put()->set_parent(std::string(16, '\0'));
  r.mutable_put()->set_buffer_id(buffer);
  for (uint64_t o : offsets) r.mutable_put()->add_offsets(o);
  return r;
}

wire::Request RegisterReq(const std::string& name, uint64_t size) {
  wire::Request r;
  r.mutable_register_buffer()->set_shm_name(name);
  r.mutable_register_buffer()->set_size(size);
  return r;
}

class BadInputTest : public DaemonTest {
 protected:
  DaemonOptions DaemonOpts() const override { return {.tenants_json = kTenants}; }
  std::string ProbeTenant() const override { return "ops"; }
  std::string ProbeToken() const override { return "ops-secret-333"; }

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(DaemonTest::SetUp());
    ref_keys_ = MakeChain(SmallLayout(), 31337, 4);
    auto c = Connect("alice", "alice-secret-1");
    ASSERT_TRUE(c);
    std::vector<std::string> pages;
    for (const auto& k : ref_keys_) pages.push_back(PatternPage(k, kPage));
    std::vector<absl::string_view> views(pages.begin(), pages.end());
    auto put = c->PutInline(ref_keys_, PageKey::Zero(), views);
    ASSERT_TRUE(put.ok()) << put.status();
    ASSERT_EQ(put->stored, ref_keys_.size());
    peer_ = std::make_unique<RawPeer>(daemon_->endpoint());
    EXPECT_WIRE_OK(peer_->Hello("alice", "alice-secret-1"));
  }

  void TearDown() override {
    if (daemon_ && daemon_->Alive()) {
      // Another client is still served and sees the reference pages intact.
      auto c = Connect("alice", "alice-secret-1");
      EXPECT_TRUE(c);
      if (c) {
        auto pages = c->GetInline(ref_keys_);
        EXPECT_TRUE(pages.ok()) << pages.status();
        for (size_t i = 0; pages.ok() && i < ref_keys_.size(); ++i)
          EXPECT_EQ((*pages)[i], PatternPage(ref_keys_[i], kPage)) << "reference page " << i;
      }
      // And so is the raw peer's own session.
      if (!peer_->session().empty()) {
        auto r = peer_->Call(LookupReq(Packed(ref_keys_)));
        EXPECT_WIRE_OK(r);
        if (r.ok()) {
          EXPECT_EQ(r->response.lookup().hits(), ref_keys_.size());
        }
      }
    } else {
      ADD_FAILURE() << "kvtierd died";
    }
    peer_.reset();
    DaemonTest::TearDown();
  }

  std::vector<PageKey> ref_keys_;
  std::unique_ptr<RawPeer> peer_;
};

TEST_F(BadInputTest, MalformedHeaderFrame) {
  for (std::string garbage : {std::string(11, '\xff'),           // tag varint overflow
                              std::string("\x52\x10" "abc", 5),  // HELLO field cut short
                              std::string("\x0f", 1),            // wire type 7 (invalid)
                              std::string("\x1a\x7f", 2)}) {     // session_id past the end
    EXPECT_WIRE_ERROR(peer_->CallRaw({garbage}), INVALID_ARGUMENT, "malformed request header");
  }
  // Random bytes: always an error reply, never silence or a crash.
  std::mt19937_64 rng(12345);
  for (int i = 0; i < 200; ++i) {
    std::string junk(1 + rng() % 300, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    auto r = peer_->CallRaw({junk});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NE(r->response.code(), wire::OK);
    EXPECT_FALSE(r->response.message().empty());
  }
}

TEST_F(BadInputTest, EmptyMessage) {
  // ZeroMQ cannot carry a message of no frames; the closest is one empty
  // frame, which parses as a Request with every field unset.
  EXPECT_WIRE_ERROR(peer_->CallRaw({""}), FAILED_PRECONDITION, "protocol version 0");
  EXPECT_WIRE_ERROR(peer_->CallRaw({"", ""}), FAILED_PRECONDITION, "protocol version 0");
}

TEST_F(BadInputTest, UnknownRequestType) {
  wire::Request none;  // no body at all
  EXPECT_WIRE_ERROR(peer_->Call(none), INVALID_ARGUMENT, "unknown request type");
  // A body field number this daemon does not know (99, length-delimited).
  wire::Request base;
  base.set_version(1);
  base.set_request_id(4242);
  base.set_session_id(peer_->session());
  std::string frame = base.SerializeAsString() + std::string("\x9a\x06\x03xyz", 6);
  auto r = peer_->CallRaw({frame});
  EXPECT_WIRE_ERROR(r, INVALID_ARGUMENT, "unknown request type");
  EXPECT_EQ(r->response.request_id(), 4242u);
}

TEST_F(BadInputTest, WrongProtocolVersion) {
  RawPeer other(daemon_->endpoint());
  wire::Request hello;
  hello.set_version(2);
  hello.mutable_hello()->set_tenant("alice");
  hello.mutable_hello()->set_token("alice-secret-1");
  EXPECT_WIRE_ERROR(other.Call(hello), FAILED_PRECONDITION, "unsupported protocol version 2");
  wire::Request look = LookupReq(Packed(ref_keys_));
  look.set_version(7);
  EXPECT_WIRE_ERROR(peer_->Call(look), FAILED_PRECONDITION, "protocol version 7");
}

TEST_F(BadInputTest, RequestsBeforeHello) {
  RawPeer fresh(daemon_->endpoint());
  // No session id at all.
  EXPECT_WIRE_ERROR(fresh.Call(LookupReq(Packed(ref_keys_))), UNAUTHENTICATED, "HELLO");
  // A well-formed but made-up session id.
  fresh.set_session(std::string(16, '\x5a'));
  EXPECT_WIRE_ERROR(fresh.Call(LookupReq(Packed(ref_keys_))), UNAUTHENTICATED,
                    "unknown or expired session");
  wire::Request stats;
  stats.mutable_stats();
  EXPECT_WIRE_ERROR(fresh.Call(stats), UNAUTHENTICATED, "unknown or expired session");
  // A short session id.
  fresh.set_session("short");
  EXPECT_WIRE_ERROR(fresh.Call(stats), UNAUTHENTICATED, "HELLO");
  // Another peer's real session id is not a bearer token.
  fresh.set_session(peer_->session());
  EXPECT_WIRE_ERROR(fresh.Call(LookupReq(Packed(ref_keys_))), UNAUTHENTICATED,
                    "unknown or expired session");
  // After BYE the id is dead.
  RawPeer quitter(daemon_->endpoint());
  EXPECT_WIRE_OK(quitter.Hello("alice", "alice-secret-1"));
  wire::Request bye;
  bye.mutable_bye();
  EXPECT_WIRE_OK(quitter.Call(bye));
  EXPECT_WIRE_ERROR(quitter.Call(stats), UNAUTHENTICATED, "unknown or expired session");
}

TEST_F(BadInputTest, BadTokenAndUnknownTenant) {
  // The handshake refuses a wrong token or an unknown tenant: no message of
  // such a connection reaches the daemon, so nothing is answered.
  for (auto [tenant, token] : {std::pair<std::string, std::string>{"alice", "alice-secret-2"},
                               {"mallory", "alice-secret-1"}}) {
    RawPeer other(daemon_->endpoint(), tenant, token);
    other.SendFrames({std::string("not even a request")});
    EXPECT_FALSE(other.RecvFrames(500).has_value()) << tenant << " was answered";
  }
  // The client library says why, at once, in the same words for both (tenant
  // names cannot be probed).
  for (auto [tenant, token] : {std::pair<std::string, std::string>{"alice", "alice-secret-2"},
                               {"mallory", "alice-secret-1"}}) {
    ClientOptions o = itest::Options(daemon_->endpoint(), tenant, token);
    const auto t0 = std::chrono::steady_clock::now();
    auto c = Client::Connect(o);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kUnauthenticated) << c.status();
    EXPECT_TRUE(absl::StrContains(c.status().message(), "unknown tenant or bad token"))
        << c.status();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  }
  // An authenticated connection's HELLO may name its own tenant only.
  RawPeer other(daemon_->endpoint());
  EXPECT_WIRE_ERROR(other.Hello("bob", "bob-secret-1"), PERMISSION_DENIED,
                    "authenticated as 'alice'");
  EXPECT_WIRE_ERROR(other.Hello("", "x"), INVALID_ARGUMENT, "tenant name");
  EXPECT_TRUE(other.session().empty());
}

// PutReply.page_status (docs/PROTOCOL.md): one byte per key, what became of
// it; leading_kept: the leading keys a caller may count on.
TEST_F(BadInputTest, PutReplySaysWhatBecameOfEachPage) {
  auto fresh = MakeChain(SmallLayout(), 4242, 2);
  // ref_keys_[0..1] are stored: a chain of them and two new pages.
  std::vector<PageKey> chain = {ref_keys_[0], ref_keys_[1], fresh[0], fresh[1]};
  std::vector<std::string> pages;
  for (const auto& k : chain) pages.push_back(PatternPage(k, kPage));
  auto r = peer_->Call(PutReq(chain, 0, {}), pages);
  EXPECT_WIRE_OK(r);
  const wire::PutReply& pr = r->response.put();
  EXPECT_EQ(pr.page_status(), std::string({'\x01', '\x01', '\x00', '\x00'}));
  EXPECT_EQ(pr.leading_kept(), 4u);
  EXPECT_EQ(pr.stored(), 2u);
  EXPECT_EQ(pr.deduplicated(), 2u);
  // A tenant with room for 3 pages: the chain is cut at the 4th.
  ClientOptions o = itest::Options(daemon_->endpoint(), "tiny", "tiny-secret-1");
  o.layout = SmallLayout();
  auto tiny = Client::Connect(o);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  auto five = MakeChain(SmallLayout(), 777, 5);
  std::vector<std::string> bytes;
  for (const auto& k : five) bytes.push_back(PatternPage(k, kPage));
  std::vector<absl::string_view> views(bytes.begin(), bytes.end());
  auto put = (*tiny)->PutInline(five, PageKey::Zero(), views);
  ASSERT_TRUE(put.ok()) << put.status();
  ASSERT_EQ(put->pages.size(), 5u);
  EXPECT_EQ(put->leading_kept, put->stored);
  EXPECT_GT(put->not_stored, 0u) << "192 KiB held five 64 KiB pages?";
  for (size_t i = 0; i < 5; ++i)
    EXPECT_EQ(put->pages[i], i < put->leading_kept ? PutPageStatus::kStored : PutPageStatus::kNoRoom)
        << "page " << i;
}

TEST_F(BadInputTest, BadLayoutAtHello) {
  RawPeer other(daemon_->endpoint());
  wire::Request hello;
  auto* h = hello.mutable_hello();
  h->set_tenant("alice");
  h->set_token("alice-secret-1");
  h->mutable_layout()->set_layers(0);
  h->mutable_layout()->set_kv_heads(2);
  h->mutable_layout()->set_head_dim(64);
  h->mutable_layout()->set_tokens_per_page(64);
  h->mutable_layout()->set_dtype(wire::FP16);
  EXPECT_WIRE_ERROR(other.Call(hello), INVALID_ARGUMENT, "layers");
  h->mutable_layout()->set_layers(2);
  h->mutable_layout()->set_dtype(static_cast<wire::Dtype>(99));
  EXPECT_WIRE_ERROR(other.Call(hello), INVALID_ARGUMENT, "dtype");
  // 64 layers x 32 KiB = 2 MiB pages; this daemon's slabs are 1 MiB.
  h->mutable_layout()->set_dtype(wire::FP16);
  h->mutable_layout()->set_layers(64);
  EXPECT_WIRE_ERROR(other.Call(hello), INVALID_ARGUMENT, "pages up to");
}

TEST_F(BadInputTest, OffsetsAndLengthsOutsideRegisteredBuffer) {
  auto buf = ShmBuffer::Create(4 * kPage);
  ASSERT_TRUE(buf.ok());
  auto reg = peer_->Call(RegisterReq((*buf)->name(), (*buf)->size()));
  EXPECT_WIRE_OK(reg);
  uint32_t id = reg->response.register_buffer().buffer_id();
  ASSERT_NE(id, 0u);
  auto one = std::vector<PageKey>{ref_keys_[0]};
  EXPECT_WIRE_ERROR(peer_->Call(GetReq(one, id, {3 * kPage + 1})), OUT_OF_RANGE, "outside buffer");
  EXPECT_WIRE_ERROR(peer_->Call(GetReq(one, id, {~0ull - 100})), OUT_OF_RANGE, "outside buffer");
  EXPECT_WIRE_ERROR(peer_->Call(GetReq(one, id, {4 * kPage})), OUT_OF_RANGE, "page 0 at offset");
  auto fresh = MakeChain(SmallLayout(), 555, 2);
  EXPECT_WIRE_ERROR(peer_->Call(PutReq(fresh, id, {0, 4 * kPage - 1})), OUT_OF_RANGE,
                    "page 1 at offset");
  EXPECT_WIRE_ERROR(peer_->Call(PutReq(fresh, id, {1ull << 63, 0})), OUT_OF_RANGE,
                    "outside buffer");
  EXPECT_WIRE_ERROR(peer_->Call(GetReq(fresh, id, {0})), INVALID_ARGUMENT, "1 offsets for 2 keys");
  EXPECT_WIRE_ERROR(peer_->Call(GetReq(one, 77, {0})), NOT_FOUND, "buffer 77 is not registered");
  EXPECT_WIRE_ERROR(peer_->Call(PutReq(one, 77, {0})), NOT_FOUND, "buffer 77 is not registered");
  wire::Request unreg;
  unreg.mutable_unregister_buffer()->set_buffer_id(77);
  EXPECT_WIRE_ERROR(peer_->Call(unreg), NOT_FOUND, "not registered");
  // Registering more than the object holds, or nothing.
  EXPECT_WIRE_ERROR(peer_->Call(RegisterReq((*buf)->name(), 5 * kPage)), INVALID_ARGUMENT,
                    "smaller than the registered size");
  EXPECT_WIRE_ERROR(peer_->Call(RegisterReq((*buf)->name(), 0)), INVALID_ARGUMENT,
                    "size must be > 0");
  // Nothing of the refused PUTs was stored; a correct GET still works.
  auto look = peer_->Call(LookupReq(Packed(fresh)));
  EXPECT_WIRE_OK(look);
  EXPECT_EQ(look->response.lookup().hits(), 0u);
  auto get = peer_->Call(GetReq(one, id, {3 * kPage}));
  EXPECT_WIRE_OK(get);
  EXPECT_EQ(tools::CheckPattern(ref_keys_[0], (*buf)->data() + 3 * kPage, kPage), kPage);
}

TEST_F(BadInputTest, ShmNameThatDoesNotExist) {
  std::string name = absl::StrCat("/kvtier-itest-missing-", getpid());
  EXPECT_WIRE_ERROR(peer_->Call(RegisterReq(name, kPage)), NOT_FOUND, "cannot open shm object");
}

TEST_F(BadInputTest, BadShmNames) {
  for (const char* name : {"noslash", "/a/b", "", "/", "//x"})
    EXPECT_WIRE_ERROR(peer_->Call(RegisterReq(name, kPage)), INVALID_ARGUMENT, "must look like");
  EXPECT_WIRE_ERROR(peer_->Call(RegisterReq(std::string("/nul\0byte", 9), kPage)),
                    INVALID_ARGUMENT, "must look like");
  EXPECT_WIRE_ERROR(peer_->Call(RegisterReq(absl::StrCat("/", std::string(300, 'x')), kPage)),
                    INVALID_ARGUMENT, "must look like");
  // The daemon's own host arena exists under this name: never a client buffer.
  std::string own = absl::StrCat("/kvtier-host-", daemon_->pid());
  EXPECT_WIRE_ERROR(peer_->Call(RegisterReq(own, kPage)), PERMISSION_DENIED,
                    "reserved for the daemon");
  EXPECT_WIRE_ERROR(peer_->Call(RegisterReq("/kvtier-host-elsewhere", kPage)), PERMISSION_DENIED,
                    "reserved for the daemon");
}

TEST_F(BadInputTest, InlinePageOfTheWrongSize) {
  auto keys = MakeChain(SmallLayout(), 777, 2);
  std::string good0 = PatternPage(keys[0], kPage), good1 = PatternPage(keys[1], kPage);
  EXPECT_WIRE_ERROR(peer_->Call(PutReq(keys, 0, {}), {good0, good1.substr(1)}), INVALID_ARGUMENT,
                    "page 1 is 65535 bytes");
  EXPECT_WIRE_ERROR(peer_->Call(PutReq(keys, 0, {}), {good0, good1 + "x"}), INVALID_ARGUMENT,
                    "page 1 is 65537 bytes");
  EXPECT_WIRE_ERROR(peer_->Call(PutReq(keys, 0, {}), {"", ""}), INVALID_ARGUMENT,
                    "page 0 is 0 bytes");
  EXPECT_WIRE_ERROR(peer_->Call(PutReq(keys, 0, {}), {good0}), INVALID_ARGUMENT,
                    "1 payload frames, expected 2");
  EXPECT_WIRE_ERROR(peer_->Call(PutReq(keys, 0, {}), {good0, good1, good1}), INVALID_ARGUMENT,
                    "3 payload frames, expected 2");
  EXPECT_WIRE_ERROR(peer_->Call(PutReq(keys, 5, {0, 0}), {good0, good1}), INVALID_ARGUMENT,
                    "payload frames sent with a buffer transfer");
  EXPECT_WIRE_ERROR(peer_->Call(LookupReq(Packed(keys)), {good0}), INVALID_ARGUMENT,
                    "unexpected 1 payload frames");
  EXPECT_WIRE_ERROR(peer_->Call(GetReq(keys, 0, {}), {good0}), INVALID_ARGUMENT,
                    "unexpected 1 payload frames");
  auto look = peer_->Call(LookupReq(Packed(keys)));
  EXPECT_WIRE_OK(look);
  EXPECT_EQ(look->response.lookup().hits(), 0u) << "a refused PUT stored something";
  // The same chain with correct pages goes in and comes back exact.
  auto put = peer_->Call(PutReq(keys, 0, {}), {good0, good1});
  EXPECT_WIRE_OK(put);
  EXPECT_EQ(put->response.put().stored(), 2u);
  auto get = peer_->Call(GetReq(keys, 0, {}));
  EXPECT_WIRE_OK(get);
  ASSERT_EQ(get->payloads.size(), 2u);
  EXPECT_EQ(get->payloads[0], good0);
  EXPECT_EQ(get->payloads[1], good1);
}

TEST_F(BadInputTest, TooManyKeys) {
  std::string many(4097 * 16, '\x01');
  EXPECT_WIRE_ERROR(peer_->Call(LookupReq(many)), INVALID_ARGUMENT, "4097 keys, at most 4096");
  wire::Request del;
  del.mutable_delete_()->set_keys(many);
  EXPECT_WIRE_ERROR(peer_->Call(del), INVALID_ARGUMENT, "at most 4096");
  wire::Request get;
  get.mutable_get()->set_keys(many);
  EXPECT_WIRE_ERROR(peer_->Call(get), INVALID_ARGUMENT, "at most 4096");
  // Exactly at the limit is fine.
  auto ok = peer_->Call(LookupReq(std::string(4096 * 16, '\x01')));
  EXPECT_WIRE_OK(ok);
  EXPECT_EQ(ok->response.lookup().hits(), 0u);
}

TEST_F(BadInputTest, KeyBytesNotAMultipleOf16) {
  EXPECT_WIRE_ERROR(peer_->Call(LookupReq(std::string(17, 'k'))), INVALID_ARGUMENT,
                    "not a multiple of 16");
  wire::Request del;
  del.mutable_delete_()->set_keys(std::string(15, 'k'));
  EXPECT_WIRE_ERROR(peer_->Call(del), INVALID_ARGUMENT, "not a multiple of 16");
  EXPECT_WIRE_ERROR(peer_->Call(LookupReq("")), INVALID_ARGUMENT, "no keys");
  wire::Request put = PutReq({ref_keys_[0]}, 0, {});
  put.mutable_put()->set_keys(Packed(ref_keys_).substr(0, 33));
  EXPECT_WIRE_ERROR(peer_->Call(put, {std::string(kPage, 'p')}), INVALID_ARGUMENT,
                    "not a multiple of 16");
  wire::Request parent = PutReq({ref_keys_[0]}, 0, {});
  parent.mutable_put()->set_parent("12345");
  EXPECT_WIRE_ERROR(peer_->Call(parent, {std::string(kPage, 'p')}), INVALID_ARGUMENT,
                    "parent key is 5 bytes");
}

TEST_F(BadInputTest, GetPutInASessionWithoutLayout) {
  RawPeer bare(daemon_->endpoint());
  EXPECT_WIRE_OK(bare.Hello("alice", "alice-secret-1", /*layout=*/false));
  EXPECT_WIRE_ERROR(bare.Call(GetReq(ref_keys_, 0, {})), FAILED_PRECONDITION, "no layout");
  auto fresh = MakeChain(SmallLayout(), 888, 1);
  EXPECT_WIRE_ERROR(bare.Call(PutReq(fresh, 0, {}), {std::string(kPage, 'p')}),
                    FAILED_PRECONDITION, "no layout");
  auto buf = ShmBuffer::Create(kPage);
  ASSERT_TRUE(buf.ok());
  auto reg = bare.Call(RegisterReq((*buf)->name(), kPage));
  EXPECT_WIRE_OK(reg);
  uint32_t id = reg->response.register_buffer().buffer_id();
  EXPECT_WIRE_ERROR(bare.Call(GetReq(ref_keys_, id, {0, 0, 0, 0})), FAILED_PRECONDITION,
                    "no layout");
  EXPECT_WIRE_ERROR(bare.Call(PutReq(fresh, id, {0})), FAILED_PRECONDITION, "no layout");
  // Metadata requests need no layout.
  auto look = bare.Call(LookupReq(Packed(ref_keys_)));
  EXPECT_WIRE_OK(look);
  EXPECT_EQ(look->response.lookup().hits(), ref_keys_.size());
}

TEST_F(BadInputTest, ShmBufferTruncatedAfterRegistration) {
  auto buf = ShmBuffer::Create(8 * kPage);
  ASSERT_TRUE(buf.ok());
  auto reg = peer_->Call(RegisterReq((*buf)->name(), (*buf)->size()));
  EXPECT_WIRE_OK(reg);
  uint32_t id = reg->response.register_buffer().buffer_id();
  auto fresh = MakeChain(SmallLayout(), 999, 4);
  int fd = shm_open((*buf)->name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 0), 0);
  close(fd);
  // The daemon's copies now touch pages past the end of the object (SIGBUS).
  EXPECT_WIRE_ERROR(peer_->Call(GetReq(ref_keys_, id, {0, kPage, 2 * kPage, 3 * kPage})),
                    FAILED_PRECONDITION, "truncated");
  EXPECT_WIRE_ERROR(peer_->Call(PutReq(fresh, id, {0, kPage, 2 * kPage, 3 * kPage})),
                    FAILED_PRECONDITION, "truncated");
  auto look = peer_->Call(LookupReq(Packed(fresh)));
  EXPECT_WIRE_OK(look);
  EXPECT_EQ(look->response.lookup().hits(), 0u) << "a faulted PUT published pages";
  // Dropping the broken buffer works, and a new one serves again.
  wire::Request unreg;
  unreg.mutable_unregister_buffer()->set_buffer_id(id);
  EXPECT_WIRE_OK(peer_->Call(unreg));
  auto good = ShmBuffer::Create(4 * kPage);
  ASSERT_TRUE(good.ok());
  auto reg2 = peer_->Call(RegisterReq((*good)->name(), (*good)->size()));
  EXPECT_WIRE_OK(reg2);
  auto get = peer_->Call(GetReq(ref_keys_, reg2->response.register_buffer().buffer_id(),
                                {0, kPage, 2 * kPage, 3 * kPage}));
  EXPECT_WIRE_OK(get);
  for (size_t i = 0; i < ref_keys_.size(); ++i)
    EXPECT_EQ(tools::CheckPattern(ref_keys_[i], (*good)->data() + i * kPage, kPage), kPage);
}

}  // namespace
}  // namespace kvtier::itest

namespace kvtier::itest {
namespace {

// A remote client that asks for pages and never reads the replies: the
// zero-copy reply frames (each holding a pin on its page) pile up in ZeroMQ's
// queues. Shutdown must still be clean: no pin may outlive the store.
class SlowReaderTest : public DaemonTest {
 protected:
  DaemonOptions DaemonOpts() const override { return {.tcp = true}; }
};

TEST_F(SlowReaderTest, ShutdownWithUnreadInlineRepliesIsClean) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto keys = MakeChain(SmallLayout(), 4711, 4);
  std::vector<std::string> pages;
  for (const auto& k : keys) pages.push_back(PatternPage(k, kPage));
  std::vector<absl::string_view> views(pages.begin(), pages.end());
  ASSERT_TRUE(c->PutInline(keys, PageKey::Zero(), views).ok());

  zmq::context_t ctx(1);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvhwm, 1);
  dealer.set(zmq::sockopt::rcvbuf, 4096);
  dealer.set(zmq::sockopt::plain_username, "default");  // the built-in tenant: any password
  dealer.set(zmq::sockopt::plain_password, "-");
  dealer.connect(daemon_->tcp_endpoint());
  wire::Request hello;
  hello.set_version(1);
  hello.set_request_id(1);
  hello.mutable_hello()->set_tenant("default");
  Layout l = SmallLayout();
  auto* wl = hello.mutable_hello()->mutable_layout();
  wl->set_layers(l.layers), wl->set_kv_heads(l.kv_heads), wl->set_head_dim(l.head_dim);
  wl->set_tokens_per_page(l.tokens_per_page), wl->set_dtype(wire::FP16);
  dealer.send(zmq::buffer(hello.SerializeAsString()));
  zmq::message_t m;
  ASSERT_TRUE(dealer.recv(m));
  wire::Response hr;
  ASSERT_TRUE(hr.ParseFromArray(m.data(), static_cast<int>(m.size())));
  ASSERT_EQ(hr.code(), wire::OK) << hr.message();
  const int kRequests = 400;
  for (int i = 0; i < kRequests; ++i) {
    wire::Request get;
    get.set_version(1);
    get.set_request_id(100 + i);
    get.set_session_id(hr.hello().session_id());
    get.mutable_get()->set_keys(PackKeys(keys));
    dealer.send(zmq::buffer(get.SerializeAsString()));
  }
  // Wait until the daemon has answered them all (into its queues).
  for (int i = 0; i < 200; ++i) {
    auto s = WireStats(*c);
    ASSERT_TRUE(s.ok()) << s.status();
    if (s->daemon().requests() >= static_cast<uint64_t>(kRequests + 3)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // The unread replies hold pins on the pages (zero-copy frames).
  auto s = WireStats(*c);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_GE(s->tiers_size(), 1);
  EXPECT_GT(s->tiers(0).pinned_pages(), 0u) << "replies were not queued; the test proves nothing";
  c.reset();
  // TearDown: SIGTERM must end in exit status 0, not a crash on a late unpin.
}

}  // namespace
}  // namespace kvtier::itest
