// libFuzzer target: structure-aware conversations with a real daemon. An
// input is up to 32 ops (conversation_ops.h) of up to 3 peers and 2 tenants —
// HELLO, buffers, PUT/GET inline and through shm, LOOKUP, DELETE, PREFETCH,
// operator requests, raw garbage, shm truncation — played against one
// in-process kvtier::daemon::Daemon (conversation_daemon.cc). Findings: a
// sanitizer report, a broken oracle rule (conversation_oracle.h), or a
// daemon that no longer answers a fresh HELLO + PING within 1 s.
// Run: scripts/fuzz.sh 60 conversation_fuzz; replay: conversation_fuzz FILE.
// Environment: KVTIER_FUZZ_TRACE=1 (each request and reply on stderr),
// KVTIER_FUZZ_LOG=debug (the daemon's log), KVTIER_FUZZ_NVME=0 (no NVMe
// tier), KVTIER_FUZZ_SAVE_INPUT=FILE (each input written there first: keeps
// one that kills the process outright), KVTIER_FUZZ_ALIVE_MS (1000),
// KVTIER_FUZZ_REPLY_MS (200: how long an op waits for its reply),
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>

#include "google/protobuf/stubs/logging.h"

#include "tests/fuzz/conversation_harness.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Fuzzed strings are rarely UTF-8: protobuf would log every one of them.
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int,
                                     const std::string&) {});
  kvtier::fuzz::TestDaemon::Instance();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtier::fuzz;
  // Keys are salted per input: what earlier inputs stored is never named.
  static uint64_t salt = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  TestDaemon& daemon = TestDaemon::Instance();
  // KVTIER_FUZZ_SAVE_INPUT=FILE: each input is written there first, so one
  // that kills the process outright (no libFuzzer artifact) is kept.
  static const char* save = std::getenv("KVTIER_FUZZ_SAVE_INPUT");
  if (save != nullptr) std::ofstream(save, std::ios::binary).write(reinterpret_cast<const char*>(data), size);
  const std::vector<Op> ops = DecodeOps(data, size);
  {
    Conversation conversation(daemon, salt += 0x9e3779b97f4a7c15);
    for (const Op& op : ops) conversation.Play(op);
  }
  daemon.CheckAliveAndReset();
  return 0;
}

// OpenSSL 3 keeps per-thread and global state (DRBGs, fetched algorithms)
// that it frees only after LeakSanitizer's exit-time check has run.
extern "C" const char* __lsan_default_suppressions() { return "leak:libcrypto.so\n"; }
