// conversation_fuzz's oracle: what a reply may say given what this input's
// tenants did. A violation prints the request and the reply and aborts.
//  - Isolation: a tenant never gets a LOOKUP/GET hit, a DELETE, a PREFETCH
//    resident/merged/queued or a PUT dedup for keys it never PUT (keys are
//    salted per input, so only this input's PUTs count); inline GET pages
//    never carry another tenant's tag, nor another key's stamp.
//  - Sessions: an id that is not a live session of this connection, an
//    unknown tenant or a wrong token is never accepted; admin-only requests
//    fail for the non-admin tenant.
//  - Shape: replies parse, errors name the problem, counts match the keys.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kvtier.pb.h"
#include "tests/fuzz/conversation_ops.h"
#include "zmq.hpp"

namespace kvtier::fuzz {

inline constexpr int kTenantCount = 2;  // 0 alpha (admin), 1 beta
inline constexpr const char* kTenantName[kTenantCount] = {"alpha", "beta"};
inline constexpr const char* kTenantToken[kTenantCount] = {"alpha-token-1", "beta-token-22"};
// The tenant peer `p`'s connection authenticates as (PLAIN, in the handshake).
inline constexpr int PeerTenant(int peer) { return peer % kTenantCount; }

struct Sent;

// The bytes of a page a tenant PUTs: stamped ones start with the tenant's
// 8-byte tag and the key; others are a pattern that never starts with a tag.
std::string PageBytes(int tenant, const std::string& key, size_t size, bool stamped);

// Aborts with `what`, the request and the reply.
[[noreturn]] void Violation(const std::string& what, const wire::Request* request,
                            const wire::Response* reply);

class Oracle {
 public:
  // Before a PUT by `tenant` goes out. Checks run when replies come, so a
  // PUT sent later on another connection (which the daemon may serve
  // first) counts too.
  void WillPut(int tenant, const std::vector<std::string>& keys, bool via_buffer);
  // Shm objects: page bytes the harness or a GET of `tenant` writes there,
  // and buffer PUTs from there. A tenant that PUTs from an object another
  // tenant wrote to (or from a buffer the harness cannot name) may store
  // that tenant's tagged bytes legitimately: its tag checks are off.
  void ObjectWritten(int object, int tenant);
  void PutFrom(int object, int tenant);
  // Checks a reply (payloads: the frames after the header).
  void Check(const Sent& s, const wire::Response& r, const std::vector<zmq::message_t>& payloads);

 private:
  bool Attempted(int tenant, const std::string& key) const;
  // Whether no key of this PUT could be deduplicated: each one PUT by the
  // tenant only by this request, and once in it.
  bool FreshPut(int tenant, const std::vector<std::string>& keys) const;
  void CheckKeysReply(const Sent& s, const wire::Response& r);
  void CheckGet(const Sent& s, const wire::Response& r, const std::vector<zmq::message_t>& payloads);
  void CheckPage(const Sent& s, const wire::Response& r, const std::string& key,
                 const zmq::message_t& page);
  void CheckAdmin(const Sent& s, const wire::Response& r);
  void UpdateTaint();

  std::map<std::string, int> attempted_[kTenantCount];  // PUT requests per key
  std::set<std::string> via_buffer_[kTenantCount];  // PUT from a buffer: any stamp may be there
  bool tainted_[kTenantCount] = {false, false};
  unsigned writers_[kPeers] = {0, 0, 0}, putters_[kPeers] = {0, 0, 0};  // tenant bit masks
};

}  // namespace kvtier::fuzz
