// kvtier-consumer: the smallest real user of the installed client library.
// Connects to the daemon at argv[1], PUTs two pages of a prompt inline,
// LOOKUPs and GETs them back and checks every byte. Exit 0 when they match.
//   kvtier-consumer ipc:///path/kvtierd.sock
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "kvtier/client.h"
#include "kvtier/layout.h"
#include "kvtier/page_key.h"

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

int main(int argc, char** argv) {
  if (argc != 2) return Fail("usage: kvtier-consumer ENDPOINT (e.g. ipc:///run/kvtier/kvtierd.sock)");
  const kvtier::Layout layout{.layers = 2, .kv_heads = 2, .head_dim = 64, .tokens_per_page = 16,
                              .dtype = kvtier::Dtype::kFp16};
  kvtier::ClientOptions options;
  options.endpoint = argv[1];
  options.layout = layout;
  options.client_name = "kvtier-consumer";
  auto client = kvtier::Client::Connect(options);
  if (!client.ok()) return Fail("connect: " + client.status().ToString());

  std::vector<uint32_t> prompt(2 * layout.tokens_per_page);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<uint32_t>(1000 + i);
  const std::vector<kvtier::PageKey> keys =
      kvtier::DeriveChain(layout.Id(), layout.tokens_per_page, prompt);
  if (keys.size() != 2) return Fail("expected 2 page keys");

  std::vector<std::string> pages;
  for (uint32_t p = 0; p < keys.size(); ++p) pages.push_back(PageBytes(layout.PageBytes(), p));
  const std::vector<absl::string_view> views(pages.begin(), pages.end());
  auto put = (*client)->PutInline(keys, kvtier::PageKey::Zero(), views);
  if (!put.ok()) return Fail("put: " + put.status().ToString());
  if (put->stored + put->deduplicated != keys.size())
    return Fail("put stored " + std::to_string(put->stored) + " of " + std::to_string(keys.size()) +
                ": " + put->not_stored_reason);

  auto lookup = (*client)->Lookup(keys);
  if (!lookup.ok()) return Fail("lookup: " + lookup.status().ToString());
  if (lookup->hits != keys.size()) return Fail("lookup hits " + std::to_string(lookup->hits));

  auto got = (*client)->GetInline(keys);
  if (!got.ok()) return Fail("get: " + got.status().ToString());
  for (size_t p = 0; p < keys.size(); ++p)
    if ((*got)[p] != pages[p]) return Fail("page " + std::to_string(p) + " came back different");
  std::printf("kvtier-consumer: %zu pages of %llu bytes round-tripped through %s\n", keys.size(),
              static_cast<unsigned long long>(layout.PageBytes()), argv[1]);
  return 0;
}
