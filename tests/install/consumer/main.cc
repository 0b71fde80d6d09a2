// kvtier-consumer: a real user of the installed client library, built from
// the installed headers alone (issue 26: the whole installed API compiles).
// Connects to the daemon at argv[1] and calls every public method of
// kvtier::Client, ShmBuffer and GpuArena: PUTs pages of a prompt inline and
// through a registered buffer, LOOKUPs (plain, leased, batched), GETs them
// back every way and checks every byte, PREFETCHes, reads PING, STATS and
// TENANTS, EVICTs, FLUSHes and DELETEs. Exit 0 when everything matched.
//   kvtier-consumer ipc:///path/kvtierd.sock
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "kvtier/client.h"
#include "kvtier/gpu_arena.h"
#include "kvtier/layout.h"
#include "kvtier/page_key.h"
#include "kvtier/shm_buffer.h"
#include "kvtier/stats.h"

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "kvtier-consumer: %s\n", what.c_str());
  return 1;
}

// Bytes that differ per page and per position, so a swapped or shifted page
// cannot pass.
std::string PageBytes(uint64_t size, uint32_t page) {
  std::string bytes(size, '\0');
  for (uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + page * 7 + 1) & 0xff);
  return bytes;
}

}  // namespace

#define CHECK_OK(expr, what)                                   \
  do {                                                         \
    if (auto _st = (expr); !_st.ok()) return Fail(std::string(what) + ": " + _st.ToString()); \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) return Fail("usage: kvtier-consumer ENDPOINT (e.g. ipc:///run/kvtier/kvtierd.sock)");
  // Where a client with no endpoint would go (kvtier/paths.h).
  if (kvtier::DefaultEndpoint().rfind("ipc://", 0) != 0 && getenv("KVTIER_ENDPOINT") == nullptr)
    return Fail("DefaultEndpoint() is not an ipc:// endpoint: " + kvtier::DefaultEndpoint());
  const kvtier::Layout layout{.layers = 2, .kv_heads = 2, .head_dim = 64, .tokens_per_page = 16,
                              .dtype = kvtier::Dtype::kFp16};
  const uint64_t page = layout.PageBytes();
  kvtier::ClientOptions options;
  options.endpoint = argv[1];
  options.layout = layout;
  options.client_name = "kvtier-consumer";
  auto client = kvtier::Client::Connect(options);
  if (!client.ok()) return Fail("connect: " + client.status().ToString());
  kvtier::Client& c = **client;
  if (c.page_bytes() != page) return Fail("HELLO's page size differs from the layout's");
  if (c.layout_id() != layout.Id()) return Fail("HELLO's layout id differs from the layout's");

  // PING: who the daemon thinks we are.
  auto ping = c.Ping();
  if (!ping.ok()) return Fail("ping: " + ping.status().ToString());
  if (ping->version.empty() || ping->namespace_name != c.namespace_name())
    return Fail("ping names another session: '" + ping->namespace_name + "'");

  // A prompt of three pages, stored inline.
  std::vector<uint32_t> prompt(3 * layout.tokens_per_page);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<uint32_t>(1000 + i);
  const std::vector<kvtier::PageKey> keys =
      kvtier::DeriveChain(layout.Id(), layout.tokens_per_page, prompt);
  if (keys.size() != 3) return Fail("expected 3 page keys");
  std::vector<std::string> pages;
  for (uint32_t p = 0; p < keys.size(); ++p) pages.push_back(PageBytes(page, p));
  const std::vector<absl::string_view> views(pages.begin(), pages.begin() + 2);
  auto put = c.PutInline(absl::MakeConstSpan(keys).subspan(0, 2), kvtier::PageKey::Zero(), views);
  if (!put.ok()) return Fail("put inline: " + put.status().ToString());
  if (put->leading_kept != 2) return Fail("put inline kept " + std::to_string(put->leading_kept) +
                                          " of 2: " + put->not_stored_reason);

  // The third page through a registered shared-memory buffer (by fd where
  // the daemon takes them, else by name).
  auto buf = kvtier::ShmBuffer::Create(4 * page);
  if (!buf.ok()) return Fail("shm buffer: " + buf.status().ToString());
  auto id = c.RegisterBuffer(**buf);
  if (!id.ok()) return Fail("register: " + id.status().ToString());
  std::memcpy((*buf)->data(), pages[2].data(), page);
  const uint64_t zero = 0;
  auto put3 = c.Put(absl::MakeConstSpan(keys).subspan(2, 1), keys[1], *id,
                    absl::MakeConstSpan(&zero, 1));
  if (!put3.ok() || put3->leading_kept != 1)
    return Fail("put from the buffer: " + (put3.ok() ? put3->not_stored_reason : put3.status().ToString()));

  // LOOKUP: plain, leased, batched.
  auto lookup = c.Lookup(keys);
  if (!lookup.ok() || lookup->hits != keys.size())
    return Fail("lookup: " + (lookup.ok() ? std::to_string(lookup->hits) + " hits" : lookup.status().ToString()));
  auto leased = c.Lookup(keys, kvtier::LookupOptions{.lease = std::chrono::milliseconds(500)});
  if (!leased.ok() || leased->hits != keys.size()) return Fail("leased lookup");
  const std::vector<std::vector<kvtier::PageKey>> chains = {keys, {keys[0]}};
  auto batch = c.LookupBatch(absl::MakeConstSpan(chains));
  if (!batch.ok() || batch->size() != 2 || (*batch)[0].hits != 3 || (*batch)[1].hits != 1)
    return Fail("batched lookup");
  std::vector<absl::Span<const kvtier::PageKey>> spans = {keys};
  if (auto b = c.LookupBatch(absl::MakeConstSpan(spans)); !b.ok() || (*b)[0].hits != 3)
    return Fail("batched lookup of spans");

  // GET: inline, into the buffer, with a policy, layer by layer.
  auto got = c.GetInline(keys);
  if (!got.ok()) return Fail("get inline: " + got.status().ToString());
  for (size_t p = 0; p < keys.size(); ++p)
    if ((*got)[p] != pages[p]) return Fail("page " + std::to_string(p) + " came back different");
  const std::vector<uint64_t> offsets = {0, page, 2 * page};
  auto CheckBuffer = [&](const char* how) -> std::string {
    for (size_t p = 0; p < keys.size(); ++p)
      if (std::memcmp((*buf)->data() + offsets[p], pages[p].data(), page) != 0)
        return std::string(how) + ": page " + std::to_string(p) + " came back different";
    return "";
  };
  std::memset((*buf)->data(), 0, (*buf)->size());
  auto tiers = c.Get(keys, *id, offsets);
  if (!tiers.ok()) return Fail("get: " + tiers.status().ToString());
  if (std::string e = CheckBuffer("get"); !e.empty()) return Fail(e);
  std::memset((*buf)->data(), 0, (*buf)->size());
  auto best = c.Get(keys, *id, offsets, kvtier::GetOptions{.policy = kvtier::GetPolicy::kTimeout,
                                                          .timeout = std::chrono::milliseconds(500)});
  if (!best.ok()) return Fail("get with a timeout: " + best.status().ToString());
  if (std::string e = CheckBuffer("get with a timeout"); !e.empty()) return Fail(e);
  std::memset((*buf)->data(), 0, (*buf)->size());
  uint32_t layers_seen = 0;
  auto layered = c.GetLayers(keys, *id, offsets, absl::MakeSpan((*buf)->data(), (*buf)->size()),
                             3 * page, [&](uint32_t) { ++layers_seen; });
  if (!layered.ok()) return Fail("layer-wise get: " + layered.status().ToString());
  if (layers_seen != layout.layers) return Fail("layer-wise get reported " + std::to_string(layers_seen) + " layers");
  if (std::string e = CheckBuffer("layer-wise get"); !e.empty()) return Fail(e);

  // PREFETCH: the pages are resident already.
  auto pf = c.Prefetch(keys);
  if (!pf.ok()) return Fail("prefetch: " + pf.status().ToString());
  if (pf->missing != 0) return Fail("prefetch found pages missing");

  // A device arena: emulated without a GPU, a real one with.
  std::string why;
  (void)kvtier::GpuArena::CudaAvailable(&why);
  auto arena = kvtier::GpuArena::Create(page, kvtier::ArenaKind::kAuto);
  if (!arena.ok()) return Fail("arena: " + arena.status().ToString());
  auto arena_id = (*arena)->Register(c);
  if (!arena_id.ok()) return Fail("arena register: " + arena_id.status().ToString());
  if (auto t = c.Get(absl::MakeConstSpan(keys).subspan(0, 1), *arena_id, absl::MakeConstSpan(&zero, 1)); !t.ok())
    return Fail("get into the arena: " + t.status().ToString());
  std::string back(page, '\0');
  CHECK_OK((*arena)->Read(0, back.data(), page), "arena read");
  if (back != pages[0]) return Fail(std::string("the arena (") + std::string(kvtier::ArenaKindName((*arena)->kind())) +
                                    ") holds other bytes than page 0");
  CHECK_OK((*arena)->Write(0, pages[1].data(), page), "arena write");
  CHECK_OK(c.UnregisterBuffer(*arena_id), "arena unregister");

  // STATS: our namespace holds the three pages.
  auto stats = c.Stats();
  if (!stats.ok()) return Fail("stats: " + stats.status().ToString());
  if (stats->daemon.version != ping->version) return Fail("stats and ping disagree on the version");
  if (stats->tiers.empty() || stats->tier("host") == nullptr) return Fail("stats lists no host tier");
  const kvtier::NamespaceSummary* mine = nullptr;
  for (const auto& n : stats->namespaces)
    if (n.name == c.namespace_name()) mine = &n;
  if (mine == nullptr || mine->pages < keys.size()) return Fail("stats: our namespace lacks its pages");

  // TENANTS and FLUSH are for admin sessions; others get PermissionDenied.
  auto tenants = c.Tenants();
  auto flush = c.Flush();
  if (ping->admin) {
    if (!tenants.ok() || tenants->empty()) return Fail("tenants: " + tenants.status().ToString());
    // Without a persistent tier there is nothing to flush to, and it says so.
    if (!flush.ok() && !absl::IsFailedPrecondition(flush.status()))
      return Fail("flush: " + flush.status().ToString());
  } else if (tenants.ok() || !absl::IsPermissionDenied(tenants.status()) || flush.ok()) {
    return Fail("tenants/flush answered a session that is not an admin");
  }

  // EVICT one page of our own namespace out of the store, then DELETE the rest.
  auto ev = c.Evict("", kvtier::TierKind::kNone, 1);
  if (!ev.ok()) return Fail("evict: " + ev.status().ToString());
  auto del = c.Delete(keys);
  if (!del.ok()) return Fail("delete: " + del.status().ToString());
  if (ev->evicted + *del != keys.size())
    return Fail("evict + delete removed " + std::to_string(ev->evicted + *del) + " pages, not 3");
  if (auto l = c.Lookup(keys); !l.ok() || l->hits != 0) return Fail("pages remain after DELETE");
  CHECK_OK(c.UnregisterBuffer(*id), "unregister");
  std::printf("kvtier-consumer: every client call answered; %zu pages of %llu bytes round-tripped through %s%s\n",
              keys.size(), static_cast<unsigned long long>(page), argv[1],
              c.takes_buffer_fds() ? " (buffers by fd)" : "");
  return 0;
}
