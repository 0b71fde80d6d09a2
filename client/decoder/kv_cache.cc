// The paged KV arena: free list, block tables, truncation and the sliding
// window's page release.
#include "kvtier/decoder/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kvtier/kernels/attention.h"
#include "kvtier/status_macros.h"

namespace kvtier::decoder {

absl::Status KvCacheOptions::Validate() const {
  RETURN_IF_ERROR(layout.Validate());
  if (num_pages == 0) return absl::InvalidArgumentError("kv cache: num_pages must be > 0");
  if (num_pages > (1u << 30)) return absl::InvalidArgumentError("kv cache: num_pages too large");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::Create(const KvCacheOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<PagedKvCache> c(new PagedKvCache(options));
  const uint64_t bytes = kArenaHeaderBytes + uint64_t(options.num_pages) * options.layout.PageBytes();
  uint8_t* base = nullptr;
  if (options.on_gpu) {
    ASSIGN_OR_RETURN(c->gpu_arena_, GpuArena::Create(bytes, ArenaKind::kCuda, options.gpu));
    base = c->gpu_arena_->data();  // a device pointer; the CUDA backend clears it
  } else {
    ASSIGN_OR_RETURN(c->arena_, ShmBuffer::Create(bytes, "", options.huge_pages));
    // Touch the arena now so the first prefill (and the first GET into it)
    // measures work, not page faults.
    std::memset(c->arena_->data(), 0, c->arena_->size());
    base = c->arena_->data();
  }
  c->view_ = kernels::MakePagedKv(options.layout, base + kArenaHeaderBytes, options.num_pages);
  c->free_.reserve(options.num_pages);
  for (int32_t p = int32_t(options.num_pages) - 1; p >= 0; --p) c->free_.push_back(p);
  return c;
}

SeqId PagedKvCache::AddSequence() {
  SeqId id = next_id_++;
  seqs_[id] = Sequence{};
  return id;
}

absl::StatusOr<PagedKvCache::Sequence*> PagedKvCache::Find(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("kv cache: no sequence ", seq));
  return &it->second;
}

absl::Status PagedKvCache::RemoveSequence(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("kv cache: no sequence ", seq));
  for (int32_t p : it->second.blocks)
    if (p != kNoPage) free_.push_back(p);
  seqs_.erase(it);
  return absl::OkStatus();
}

void PagedKvCache::Reset() {
  seqs_.clear();
  free_.clear();
  for (int32_t p = int32_t(options_.num_pages) - 1; p >= 0; --p) free_.push_back(p);
}

uint32_t PagedKvCache::Length(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

const std::vector<int32_t>& PagedKvCache::BlockTable(SeqId seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? kEmpty : it->second.blocks;
}

absl::Status PagedKvCache::Reserve(SeqId seq, uint32_t n) {
  ASSIGN_OR_RETURN(Sequence * sp, Find(seq));
  Sequence& s = *sp;
  const uint32_t tpp = tokens_per_page();
  const uint64_t need_blocks = (uint64_t(s.length) + n + tpp - 1) / tpp;
  const uint64_t more = need_blocks > s.blocks.size() ? need_blocks - s.blocks.size() : 0;
  if (more > free_.size())
    return absl::ResourceExhaustedError(absl::StrCat(
        "kv cache: sequence ", seq, " needs ", more, " more pages for ", n, " tokens but only ",
        free_.size(), " of ", options_.num_pages, " are free"));
  for (uint64_t i = 0; i < more; ++i) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return absl::OkStatus();
}

absl::Status PagedKvCache::Commit(SeqId seq, uint32_t n) {
  ASSIGN_OR_RETURN(Sequence * sp, Find(seq));
  Sequence& s = *sp;
  if (uint64_t(s.length) + n > uint64_t(s.blocks.size()) * tokens_per_page())
    return absl::FailedPreconditionError(
        absl::StrCat("kv cache: commit of ", n, " tokens past the reserved pages of sequence ", seq));
  s.length += n;
  FreeBehindWindow(s);
  return absl::OkStatus();
}

uint32_t PagedKvCache::WindowStart(uint32_t length) const {
  const uint32_t w = options_.sliding_window;
  // The next query sits at position `length` and sees [length - w + 1, length].
  return (w == 0 || length + 1 <= w) ? 0 : length + 1 - w;
}

void PagedKvCache::FreeBehindWindow(Sequence& s) {
  if (options_.sliding_window == 0) return;
  const uint32_t dead_blocks = std::min(WindowStart(s.length) / tokens_per_page(), s.release_mark);
  for (uint32_t b = 0; b < dead_blocks && b < s.blocks.size(); ++b) {
    if (s.blocks[b] == kNoPage) continue;
    free_.push_back(s.blocks[b]);
    s.blocks[b] = kNoPage;
  }
}

absl::Status PagedKvCache::HoldForStore(SeqId seq) {
  ASSIGN_OR_RETURN(Sequence * s, Find(seq));
  s->release_mark = 0;
  return absl::OkStatus();
}

absl::Status PagedKvCache::Release(SeqId seq, uint32_t blocks) {
  ASSIGN_OR_RETURN(Sequence * s, Find(seq));
  if (s->release_mark == UINT32_MAX) return absl::OkStatus();  // not held
  s->release_mark = std::max(s->release_mark, blocks);
  FreeBehindWindow(*s);
  return absl::OkStatus();
}

absl::Status PagedKvCache::ReserveWindowTail(SeqId seq, uint32_t tokens, uint32_t first_block) {
  ASSIGN_OR_RETURN(Sequence * s, Find(seq));
  if (s->length != 0 || !s->blocks.empty())
    return absl::FailedPreconditionError(absl::StrCat("kv cache: sequence ", seq, " is not empty"));
  if (first_block > FirstNeededBlock(tokens))
    return absl::InvalidArgumentError(
        absl::StrCat("kv cache: ", tokens, " tokens need block ", FirstNeededBlock(tokens),
                     " but the reservation starts at ", first_block));
  s->blocks.assign(first_block, kNoPage);
  absl::Status st = Reserve(seq, tokens);  // counts from the empty length: every block
  if (!st.ok()) s->blocks.clear();
  return st;
}

absl::Status PagedKvCache::Truncate(SeqId seq, uint32_t length) {
  ASSIGN_OR_RETURN(Sequence * sp, Find(seq));
  Sequence& s = *sp;
  if (length > s.length)
    return absl::InvalidArgumentError(absl::StrCat("kv cache: cannot truncate sequence ", seq,
                                                   " of ", s.length, " tokens to ", length));
  const uint32_t tpp = tokens_per_page();
  const uint32_t first_needed = WindowStart(length) / tpp;
  for (uint32_t b = first_needed; b < s.blocks.size() && b * tpp < length; ++b)
    if (s.blocks[b] == kNoPage)
      return absl::FailedPreconditionError(absl::StrCat(
          "kv cache: cannot roll sequence ", seq, " back to ", length,
          " tokens: the sliding window already freed block ", b));
  const size_t keep = (size_t(length) + tpp - 1) / tpp;
  while (s.blocks.size() > keep) {
    if (s.blocks.back() != kNoPage) free_.push_back(s.blocks.back());
    s.blocks.pop_back();
  }
  s.length = length;
  return absl::OkStatus();
}

}  // namespace kvtier::decoder

