// Writes the seed corpus of conversation_fuzz: short conversations that
// reach every request type, both tenants, shm and emulated-device buffers,
// truncation, pipelining and malformed requests, encoded so that
// conversation_ops.h decodes them back (checked here).
// Run: make_conversation_corpus tests/fuzz/conversation_corpus
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/fuzz/conversation_ops.h"

namespace {

using kvtier::fuzz::Op;
using namespace kvtier::fuzz;

Op Make(uint8_t kind, uint8_t peer = 0) {
  Op op;
  op.kind = kind;
  op.peer = peer;
  return op;
}
Op Hello(uint8_t peer, uint8_t tenant, uint8_t layout = 1) {
  Op op = Make(kHello, peer);
  op.tenant = tenant, op.layout = layout, op.text = "seed";
  return op;
}
Op WithKeys(Op op, std::vector<uint8_t> keys) {
  op.keys = std::move(keys);
  return op;
}
Op Put(uint8_t peer, std::vector<uint8_t> keys, uint8_t buffer = 0) {
  Op op = WithKeys(Make(kPut, peer), std::move(keys));
  op.buffer = buffer;
  return op;
}
Op Get(uint8_t peer, std::vector<uint8_t> keys, uint8_t buffer = 0, uint64_t base = 0) {
  Op op = WithKeys(Make(kGet, peer), std::move(keys));
  op.buffer = buffer, op.base = base;
  return op;
}
Op Keyed(uint8_t kind, uint8_t peer, std::vector<uint8_t> keys) {
  return WithKeys(Make(kind, peer), std::move(keys));
}
Op Register(uint8_t peer, uint8_t object = 0, uint32_t kind = 0) {
  Op op = Make(kRegister, peer);
  op.object = object, op.buffer_kind = kind;
  return op;
}
Op Evict(uint8_t peer, uint8_t ns, uint32_t tier, bool all, uint64_t pages = 0) {
  Op op = Make(kEvict, peer);
  op.ns = ns, op.tier = tier, op.all = all, op.pages = pages;
  return op;
}
Op Session(Op op, uint8_t pick) {
  op.session = pick;
  return op;
}
Op NoWait(Op op) {
  op.wait = false;
  return op;
}

std::vector<std::pair<std::string, std::vector<Op>>> Seeds() {
  std::vector<std::pair<std::string, std::vector<Op>>> s;
  s.push_back({"hello_ping_stats_bye",
               {Hello(0, 0), Make(kPing), Make(kStats), Make(kTenants), Make(kBye)}});
  s.push_back({"put_get_inline",
               {Hello(0, 0), Put(0, {0, 1, 2}), Keyed(kLookup, 0, {0, 1, 2, 3}), Get(0, {0, 1, 2}),
                Keyed(kDelete, 0, {1}), Keyed(kLookup, 0, {0, 1, 2}), Get(0, {2, 0})}});
  Op layerwise = Get(1, {0, 1, 2, 3}, 1, 65536);
  layerwise.layerwise = true;
  Op unregister = Make(kUnregister, 1);
  unregister.buffer = 1;
  s.push_back({"put_get_buffer",
               {Hello(1, 1, 3), Register(1), Put(1, {0, 1, 2, 3}, 1), Get(1, {0, 1, 2, 3}, 1, 131072),
                layerwise, unregister, Get(1, {0}, 1), Make(kBye, 1)}});
  s.push_back({"two_tenants",
               {Hello(0, 0), Hello(1, 1), Put(0, {0, 1}), Keyed(kLookup, 1, {0, 1}), Get(1, {0, 1}),
                Put(1, {0}), Get(1, {0, 1}), Keyed(kPrefetch, 1, {1}), Keyed(kDelete, 1, {1}),
                Evict(1, 1, 0, true), Evict(1, 3, 0, true), Make(kFlush, 1), Make(kTenants, 1),
                Make(kStats, 1), Get(0, {0, 1}), Evict(0, 2, 0, true), Make(kFlush, 0)}});
  s.push_back({"wrong_sessions",
               {Hello(0, 0), Hello(1, 1), Session(Make(kPing, 1), kOtherPeer),
                Session(Make(kPing, 1), kRandom), Session(Make(kPing, 1), kShortId),
                Session(Make(kPing, 1), kNoSession), Make(kBye), Session(Make(kPing), kStale),
                Hello(0, 1), Session(Put(0, {4}), kStale), Make(kPing, 2)}});
  Op shrink = Make(kTruncate, 0);
  shrink.size_mode = 1;
  Op grow = Make(kTruncate, 0);
  grow.size_mode = 2;
  s.push_back({"truncated_buffer",
               {Hello(0, 0, 3), Register(0), Put(0, {0, 1, 2, 3}, 1), shrink,
                Get(0, {0, 1, 2, 3}, 1, 122880), Put(0, {4, 5, 6, 7}, 1), grow,
                Put(0, {4, 5, 6, 7}, 1), Get(0, {4, 5}, 1, 200000)}});
  Op best_effort = Get(0, {0, 1, 2, 3}, 1, 65536);
  best_effort.policy = 1;
  Op timeout = Get(0, {0, 1, 2, 3}, 1);
  timeout.policy = 2, timeout.timeout_ms = 50;
  Op prefetch = Keyed(kPrefetch, 0, {0, 1, 2, 3});
  prefetch.priority = 5, prefetch.lease_ms = 100;
  s.push_back({"tiers_prefetch",
               {Hello(0, 0), Register(0), Put(0, {0, 1, 2, 3, 4, 5, 6, 7}), Make(kFlush),
                Keyed(kLookup, 0, {0, 1, 2, 3}), best_effort, timeout, Evict(0, 0, 2, false, 3),
                prefetch, Get(0, {4, 5, 6, 7}), Evict(0, 0, 1, true), Evict(0, 0, 0, false, 2)}});
  s.push_back({"pipelined",
               {Hello(0, 0), Hello(1, 0), Register(0), Register(1), NoWait(Put(0, {0, 1, 2}, 1)),
                NoWait(Put(1, {0, 1, 2}, 1)), NoWait(Make(kUnregister, 0)),
                NoWait(Get(1, {0, 1, 2}, 1)), NoWait(Keyed(kDelete, 0, {1})),
                NoWait(Put(0, {1, 2})), NoWait(Make(kBye, 1)), Get(0, {0, 1, 2})}});
  Op raw = Make(kRaw, 1);
  raw.frames = {"\x0a\x05garbage", "", "frame"};
  Op bad_version = Make(kPing);
  bad_version.mangle = 1, bad_version.version = 7;
  Op extra = Put(0, {0});
  extra.mangle = 2, extra.frames = {"extra"};
  Op repeat = Make(kStats);
  repeat.mangle = 3;
  Op wrong_size = Put(0, {1, 2});
  wrong_size.page_size = 1, wrong_size.delta = -1;
  Op few_frames = Put(0, {3, 4});
  few_frames.frame_count = 1;
  Op many = Make(kLookup);
  many.key_mode = 1, many.many = 254;  // 4097 keys
  Op tail = Keyed(kDelete, 0, {0});
  tail.key_mode = 2, tail.key_tail = 3;
  Op odd = Get(0, {0, 1}, 1);
  odd.offsets = 2, odd.raw_offsets = {~uint64_t{0} - 10, 3};
  Op parent = Put(0, {5});
  parent.parent = 3, parent.text = "short";
  s.push_back({"malformed",
               {Hello(0, 0), raw, bad_version, extra, repeat, wrong_size, few_frames, many, tail,
                Register(0), odd, parent, Keyed(kLookup, 0, {kZeroKey, kOnesKey, kRawKey})}});
  Op big_hello = Hello(2, 0, 4);
  for (uint32_t& f : big_hello.raw_layout) f = 100000;
  Op unknown = Hello(2, 2);
  Op wrong_token = Hello(2, 1);
  wrong_token.token = 1;
  s.push_back({"bad_hello",
               {unknown, wrong_token, big_hello, Hello(2, 0, 0), Put(2, {0}), Register(2),
                Get(2, {0}, 1)}});
  Op too_big = Register(0);
  too_big.size_mode = 2, too_big.size = 1ull << 40;
  s.push_back({"register_edges",
               {Hello(0, 0), Hello(1, 1), Register(0, 3), Register(0, 4), Register(0, 2),
                Register(0, 0, 2), Put(0, {0, 1}, 1), Get(0, {0, 1}, 1, 8192), Register(1, 2),
                Register(0, 1), Register(1, 0), too_big, Register(0, 0, 1)}});
  Op many_put = Put(0, {}, 1);
  many_put.key_mode = 1, many_put.many = 255, many_put.offsets = 1;  // 300 keys
  s.push_back({"pressure",
               {Hello(0, 1, 3), Register(0), many_put, Keyed(kLookup, 0, {0, 1, 2}), Make(kStats)}});
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  for (auto& [name, ops] : Seeds()) {
    const std::string bytes = EncodeOps(ops);
    // The decoder must read back exactly these ops.
    auto back = DecodeOps(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    if (back.size() != ops.size() || EncodeOps(back) != bytes) {
      std::fprintf(stderr, "seed %s does not decode back\n", name.c_str());
      return 1;
    }
    std::ofstream out(std::string(argv[1]) + "/" + name, std::ios::binary);
    if (!(out << bytes)) {
      std::fprintf(stderr, "cannot write %s/%s\n", argv[1], name.c_str());
      return 1;
    }
  }
  return 0;
}
