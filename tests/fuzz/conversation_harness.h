// conversation_fuzz's harness: the daemon under test (one per process), the
// peers' shm objects, and one input's conversation — peers, sessions and the
// requests still waiting for their reply. The oracle is conversation_oracle.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "kvtier.pb.h"
#include "tests/fuzz/conversation_ops.h"
#include "tests/fuzz/conversation_oracle.h"
#include "zmq.hpp"

namespace kvtier::fuzz {

// ZeroMQ calls, retried when a signal (libFuzzer's timers) interrupts them.
bool PollIn(zmq::socket_t& sock, std::chrono::milliseconds timeout);
std::vector<zmq::message_t> RecvMessage(zmq::socket_t& sock);  // every frame of one message
void SendMessage(zmq::socket_t& sock, const std::vector<std::string>& frames);

// A POSIX shm object of the harness, mapped whole here (kObjectBytes); the
// harness touches only its first `size` bytes (it may be truncated).
struct ShmObject {
  std::string name;
  int fd = -1;
  uint8_t* map = nullptr;
  uint64_t size = 0;
};

// The daemon under test, started once per process on a private ipc socket
// (emulated HBM 2 MiB, host 4 MiB, NVMe 16 MiB in a temp dir; tenants alpha,
// an admin, and beta, with 1 MiB of host quota). Small, so eviction is near.
class TestDaemon {
 public:
  static TestDaemon& Instance();  // starts it on first use; aborts if it cannot
  const std::string& endpoint() const { return endpoint_; }
  zmq::context_t& context() { return ctx_; }
  ShmObject& object(int i) { return objects_[i]; }
  void ResetObjects();  // new objects, whole size, zeroed
  void Truncate(int i, uint64_t size);
  // A fresh HELLO + PING must answer within 1 s (abort otherwise); then the
  // admin empties both namespaces so the next input starts clean.
  void CheckAliveAndReset();
  void Shutdown();  // at exit

 private:
  TestDaemon() = default;
  void Start();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string dir_, endpoint_;
  zmq::context_t ctx_;
  std::unique_ptr<zmq::socket_t> probe_;
  uint64_t probe_id_ = 0;
  uint64_t generation_ = 0;
  ShmObject objects_[kPeers];
};

struct BufferRec {
  uint32_t id = 0;
  int object = -1;  // index of a harness object, -1 when unknown
};

struct SessionRec {
  std::string id;
  int peer = 0;
  int tenant = 0;
  uint64_t page_bytes = 0;
  bool closed = false;  // a BYE of it was answered OK
  std::vector<BufferRec> buffers;
};

// What the harness remembers of a request until its reply.
struct Sent {
  wire::Request request;
  uint8_t kind = kPing;
  int peer = 0;
  int session = -1;  // index of the live session of this peer it names; -1: must be refused
  int tenant = -1;   // that session's tenant
  uint64_t page_bytes = 0;
  std::vector<std::string> keys;  // whole 16-byte keys
  int object = -1;         // REGISTER: the harness object named
  bool malformed = false;  // breaks a rule of the protocol's shape: must be refused
  uint64_t echo = 0;       // the request id its reply carries
  uint64_t seq = 0;        // harness-wide order of sending
  bool gave_up = false;    // waited for in vain: Drain does not wait again
  bool ambiguous = false;  // another pending request of the peer has the same echo
};

// One input: up to kPeers DEALER sockets, played op by op, then closed.
class Conversation {
 public:
  Conversation(TestDaemon& daemon, uint64_t salt);
  ~Conversation();  // BYE to every live session, sockets closed
  void Play(const Op& op);
  void Drain(int timeout_ms);  // replies of requests not waited for

 private:
  zmq::socket_t& Socket(int peer);
  std::string PoolKey(uint32_t i) const;
  std::vector<std::string> Keys(const Op& op, std::string* wire_keys) const;
  std::string PickSession(const Op& op, int* session) const;
  void Build(const Op& op, Sent& s, std::vector<std::string>& payloads);
  void BuildBody(const Op& op, Sent& s, std::vector<std::string>& payloads);
  void BuildHello(const Op& op, Sent& s);
  void BuildRegister(const Op& op, Sent& s);
  uint32_t PickBuffer(const Op& op, const SessionRec* rec, int* object) const;
  std::vector<uint64_t> Offsets(const Op& op, size_t n, uint64_t page_bytes) const;
  void BuildPut(const Op& op, Sent& s, std::vector<std::string>& payloads);
  void BuildGet(const Op& op, Sent& s);
  static bool Malformed(const Op& op, const Sent& s, const std::vector<std::string>& payloads);
  void Send(int peer, const std::vector<std::string>& frames);
  // Remembers a request sent with `header`; returns its seq.
  uint64_t Expect(Sent s, const std::string& header);
  // Receives what `peer` has until the reply to request `seq` came (true)
  // or timeout_ms passed.
  bool Await(int peer, uint64_t seq, int timeout_ms);
  void OnReply(int peer, std::vector<zmq::message_t>& frames);
  void Apply(const Sent& s, const wire::Response& r);
  int CurrentSession(int peer) const;

  TestDaemon& daemon_;
  uint64_t salt_;
  uint64_t next_id_;
  uint64_t last_id_ = 0;
  uint64_t seq_ = 0;
  std::unique_ptr<zmq::socket_t> sockets_[kPeers];
  std::vector<SessionRec> sessions_;
  std::list<Sent> pending_[kPeers];  // in sending order
  Oracle oracle_;
};

}  // namespace kvtier::fuzz
