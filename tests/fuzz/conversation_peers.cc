// One conversation_fuzz input played against the daemon: ops become
// wire::Requests (conversation_build.cc), go out on the peers' DEALER
// sockets, and every reply goes through the oracle and updates what the
// harness knows (sessions, buffers).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "tests/fuzz/conversation_harness.h"

namespace kvtier::fuzz {
namespace {

// How long an op waits for its reply (KVTIER_FUZZ_REPLY_MS, default 200).
const int kReplyTimeoutMs = [] {
  const char* v = std::getenv("KVTIER_FUZZ_REPLY_MS");
  return v ? std::atoi(v) : 200;
}();
// KVTIER_FUZZ_TRACE=1: one line per op and per reply on stderr.
const bool kTrace = std::getenv("KVTIER_FUZZ_TRACE") != nullptr;

}  // namespace

// ZeroMQ calls return EINTR when a signal (libFuzzer's timers) comes: retried.
bool PollIn(zmq::socket_t& sock, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
  for (;;) {
    try {
      return zmq::poll(&item, 1, timeout) > 0;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

std::vector<zmq::message_t> RecvMessage(zmq::socket_t& sock) {
  std::vector<zmq::message_t> frames;
  for (bool more = true; more;) {
    zmq::message_t msg;
    try {
      if (!sock.recv(msg)) continue;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
      continue;
    }
    more = msg.more();
    frames.push_back(std::move(msg));
  }
  return frames;
}

void SendMessage(zmq::socket_t& sock, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    for (;;) {
      try {
        (void)sock.send(zmq::buffer(frames[i]), flags);
        break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;  // not sent: send it again
      }
    }
  }
}

Conversation::Conversation(TestDaemon& daemon, uint64_t salt)
    : daemon_(daemon), salt_(salt), next_id_((salt & 0xffffffffff) << 16 | 1) {
  daemon_.ResetObjects();
}

Conversation::~Conversation() {
  Drain(kReplyTimeoutMs);
  for (size_t i = 0; i < sessions_.size(); ++i) {
    SessionRec& rec = sessions_[i];
    if (rec.closed) continue;
    wire::Request bye;
    bye.set_version(1);
    bye.set_request_id(next_id_++);
    bye.set_session_id(rec.id);
    bye.mutable_bye();
    const std::string header = bye.SerializeAsString();
    Send(rec.peer, {header});
    Sent s{.request = bye, .kind = kBye, .peer = rec.peer, .session = int(i), .tenant = rec.tenant};
    (void)Await(rec.peer, Expect(std::move(s), header), kReplyTimeoutMs);
  }
  for (auto& s : sockets_) s.reset();
}

zmq::socket_t& Conversation::Socket(int peer) {
  if (!sockets_[peer]) {
    sockets_[peer] = std::make_unique<zmq::socket_t>(daemon_.context(), zmq::socket_type::dealer);
    sockets_[peer]->set(zmq::sockopt::linger, 0);
    // Each peer authenticates in the handshake as its own tenant; HELLOs
    // naming the other (or none) are refused (conversation_oracle.cc).
    const int t = PeerTenant(peer);
    sockets_[peer]->set(zmq::sockopt::plain_username, std::string(kTenantName[t]));
    sockets_[peer]->set(zmq::sockopt::plain_password, std::string(kTenantToken[t]));
    try {
      sockets_[peer]->connect(daemon_.endpoint());
    } catch (const zmq::error_t& e) {  // say why, not just "deadly signal"
      std::fprintf(stderr, "conversation_fuzz: peer %d cannot connect to %s: %s (errno %d)\n", peer,
                   daemon_.endpoint().c_str(), e.what(), e.num());
      std::abort();
    }
  }
  return *sockets_[peer];
}

int Conversation::CurrentSession(int peer) const {
  for (size_t i = sessions_.size(); i-- > 0;)
    if (sessions_[i].peer == peer && !sessions_[i].closed) return int(i);
  return -1;
}

void Conversation::Play(const Op& op) {
  if (op.kind == kTruncate) {
    const uint64_t sizes[] = {0, kObjectBytes / 2, kObjectBytes, op.size};
    if (kTrace) std::fprintf(stderr, "object %d truncated to %llu bytes\n", op.peer,
                             (unsigned long long)sizes[op.size_mode]);
    daemon_.Truncate(op.peer, sizes[op.size_mode]);
    return;
  }
  Sent s;
  std::vector<std::string> frames;
  if (op.kind == kRaw) {
    s.kind = kRaw;
    frames = op.frames;
  } else {
    std::vector<std::string> payloads;
    Build(op, s, payloads);
    frames.push_back(s.request.SerializeAsString());
    for (std::string& p : payloads) frames.push_back(std::move(p));
    if (op.mangle == 2) frames.insert(frames.end(), op.frames.begin(), op.frames.end());
  }
  s.peer = op.peer;
  if (kTrace)
    std::fprintf(stderr, "peer %d -> %s [%zu keys, %zu frames]%s\n", op.peer,
                 s.request.ShortDebugString().substr(0, 300).c_str(), s.keys.size(), frames.size(),
                 op.wait ? "" : " (no wait)");
  Send(op.peer, frames);
  const uint64_t seq = Expect(std::move(s), frames[0]);
  if (op.wait) (void)Await(op.peer, seq, kReplyTimeoutMs);
}

// The reply echoes the request id the daemon could parse: 0 when the header
// is no Request (parsing here says the same as in the daemon).
uint64_t Conversation::Expect(Sent s, const std::string& header) {
  wire::Request parsed;
  s.echo = parsed.ParseFromString(header) ? parsed.request_id() : 0;
  s.seq = ++seq_;
  // Twins (a repeated id, a raw frame's id, two unparsable headers): which
  // reply answers which is anybody's guess, so neither is checked.
  for (Sent& other : pending_[s.peer])
    if (other.echo == s.echo) other.ambiguous = s.ambiguous = true;
  pending_[s.peer].push_back(std::move(s));
  return seq_;
}

void Conversation::Send(int peer, const std::vector<std::string>& frames) {
  SendMessage(Socket(peer), frames);
}

bool Conversation::Await(int peer, uint64_t seq, int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  zmq::socket_t& sock = Socket(peer);
  auto waiting = [&] {
    for (const Sent& s : pending_[peer])
      if (s.seq == seq) return true;
    return false;
  };
  while (waiting()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() < 0 || !PollIn(sock, left)) {
      for (Sent& s : pending_[peer]) s.gave_up |= s.seq == seq;
      if (kTrace) std::fprintf(stderr, "  peer %d: no reply\n", peer);
      return false;
    }
    std::vector<zmq::message_t> frames = RecvMessage(sock);
    OnReply(peer, frames);
  }
  return true;
}

// Replies of requests not waited for; those already given up on are not
// waited for again.
void Conversation::Drain(int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (int p = 0; p < kPeers; ++p) {
    for (;;) {
      uint64_t seq = 0;
      for (const Sent& s : pending_[p])
        if (!s.gave_up) {
          seq = s.seq;
          break;
        }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (seq == 0 || left.count() < 0 || !Await(p, seq, int(left.count()))) break;
    }
  }
}

void Conversation::OnReply(int peer, std::vector<zmq::message_t>& frames) {
  wire::Response r;
  if (!r.ParseFromArray(frames[0].data(), frames[0].size()))
    Violation(absl::StrCat("a reply whose header does not parse (", frames.size(),
                           " frames, the first ", frames[0].size(), " bytes: ",
                           absl::CEscape(frames[0].to_string().substr(0, 64)), ")"),
              nullptr, nullptr);
  if (kTrace)
    std::fprintf(stderr, "  peer %d <- %s\n", peer, r.ShortDebugString().substr(0, 200).c_str());
  // The first request this reply can answer: same echoed id, and of the
  // replied type (an error reply answers any).
  auto& pending = pending_[peer];
  auto it = pending.end();
  for (auto c = pending.begin(); c != pending.end() && it == pending.end(); ++c)
    if (c->echo == r.request_id() &&
        (r.body_case() == wire::Response::BODY_NOT_SET ||
         int(c->request.body_case()) == int(r.body_case())))
      it = c;
  if (it == pending.end())  // the typed reply to a twin that got the error reply
    for (auto c = pending.begin(); c != pending.end() && it == pending.end(); ++c)
      if (c->echo == r.request_id()) it = c;
  if (it == pending.end()) return;  // a reply we stopped waiting for, long gone
  std::vector<zmq::message_t> payloads;
  for (size_t i = 1; i < frames.size(); ++i) payloads.push_back(std::move(frames[i]));
  const bool same_type = r.body_case() == wire::Response::BODY_NOT_SET ||
                         int(it->request.body_case()) == int(r.body_case());
  if (!it->ambiguous && it->kind != kRaw) oracle_.Check(*it, r, payloads);
  if (r.code() == wire::OK && it->kind != kRaw && same_type) Apply(*it, r);
  pending.erase(it);
}

// What an OK reply changes in the harness's picture.
void Conversation::Apply(const Sent& s, const wire::Response& r) {
  switch (s.kind) {
    case kHello: {
      const std::string& ns = r.hello().namespace_();
      sessions_.push_back(SessionRec{.id = r.hello().session_id(), .peer = s.peer,
                                     .tenant = ns == kTenantName[0] ? 0 : 1,
                                     .page_bytes = r.hello().page_bytes()});
      return;
    }
    case kRegister:
      if (s.session >= 0)
        sessions_[s.session].buffers.push_back(
            BufferRec{.id = r.register_buffer().buffer_id(), .object = s.object});
      return;
    case kUnregister:
      if (s.session >= 0) {
        auto& bufs = sessions_[s.session].buffers;
        for (auto b = bufs.begin(); b != bufs.end(); ++b)
          if (b->id == s.request.unregister_buffer().buffer_id()) {
            bufs.erase(b);
            break;
          }
      }
      return;
    case kBye:
      if (s.session >= 0) sessions_[s.session].closed = true;
      return;
    default: return;
  }
}

}  // namespace kvtier::fuzz
