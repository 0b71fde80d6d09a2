// PagedKvCache: the decoder's KV cache. One arena of pages in POSIX shared
// memory (so kvtierd can GET/PUT pages in place once it is registered), or
// in CUDA memory shared with kvtierd by IPC handle (on_gpu), laid out as kvtier::Layout describes a daemon page. Each sequence owns a
// block table of page indices; pages come from a free list.
//
// Thread-safety: not thread-safe; one decoder thread drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "kvtier/gpu_arena.h"
#include "kvtier/kernels/paged_kv.h"
#include "kvtier/layout.h"
#include "kvtier/shm_buffer.h"

namespace kvtier::decoder {

using SeqId = uint32_t;
inline constexpr int32_t kNoPage = -1;  // a block-table entry freed by the sliding window
// The arena starts with a header that holds no page (the layer-wise GET's
// progress word lives there); 4 KiB keeps every page as aligned as the mapping.
inline constexpr uint64_t kArenaHeaderBytes = 4096;

struct KvCacheOptions {
  Layout layout;
  uint32_t num_pages = 0;
  // 0: full attention. Else each query sees its last `sliding_window`
  // positions, and pages wholly behind that window are freed.
  uint32_t sliding_window = 0;
  // The arena in GPU memory (GpuArena, CUDA device `gpu`) for the CUDA
  // decoder; FailedPrecondition from Create without a usable device.
  bool on_gpu = false;
  int gpu = 0;
  // The shared-memory arena's pages (not on_gpu): kAuto takes 2 MiB hugetlb
  // pages when the machine has enough free (vm.nr_hugepages), which brings a
  // fresh process's first restore close to what later ones cost (ShmBuffer's
  // HugePages).
  HugePages huge_pages = HugePages::kAuto;

  absl::Status Validate() const;
};

class PagedKvCache {
 public:
  static absl::StatusOr<std::unique_ptr<PagedKvCache>> Create(const KvCacheOptions& options);

  const Layout& layout() const { return options_.layout; }
  uint32_t tokens_per_page() const { return options_.layout.tokens_per_page; }
  uint32_t sliding_window() const { return options_.sliding_window; }
  uint32_t num_pages() const { return options_.num_pages; }
  uint32_t free_pages() const { return uint32_t(free_.size()); }
  // The whole registered region: a header of kArenaHeaderBytes, then the
  // pages. arena() is the shared-memory one (not on_gpu()); gpu_arena() the
  // GPU one (on_gpu()).
  ShmBuffer& arena() { return *arena_; }
  bool on_gpu() const { return gpu_arena_ != nullptr; }
  GpuArena* gpu_arena() { return gpu_arena_.get(); }
  uint64_t PageOffset(int32_t page) const {
    return kArenaHeaderBytes + uint64_t(page) * options_.layout.PageBytes();
  }
  // 8 bytes in the header, outside every page, where the daemon's layer-wise
  // GET counts the layers it has delivered (docs/PROTOCOL.md, "Layer-wise GET").
  static constexpr uint64_t kProgressOffset = 0;
  // The kernels' view of the arena (layer 0 selected).
  kernels::PagedKv View() const { return view_; }

  SeqId AddSequence();
  bool HasSequence(SeqId seq) const { return seqs_.contains(seq); }
  // Frees the sequence's pages. NotFound for an unknown id.
  absl::Status RemoveSequence(SeqId seq);
  // Drops every sequence and frees every page (between sessions).
  void Reset();

  // Tokens whose K/V are in the cache.
  uint32_t Length(SeqId seq) const;
  // The sequence's pages in order: token t is in block t / tokens_per_page.
  const std::vector<int32_t>& BlockTable(SeqId seq) const;

  // Makes sure pages exist for `n` more tokens after Length(seq).
  // ResourceExhausted (and nothing allocated) when the arena has too few.
  absl::Status Reserve(SeqId seq, uint32_t n);
  // Records `n` more tokens as written (after Reserve and the kernels'
  // scatter), then frees pages wholly behind the sliding window.
  absl::Status Commit(SeqId seq, uint32_t n);
  // With a sliding window and a store, a page must be PUT before the window
  // frees it. HoldForStore makes the window free only blocks below a release
  // mark (0 at first); Release(seq, blocks) raises the mark once blocks
  // [0, blocks) are stored (or given up on) and frees what is behind the
  // window by then. No-ops without a window.
  absl::Status HoldForStore(SeqId seq);
  absl::Status Release(SeqId seq, uint32_t blocks);
  // For an empty sequence being restored with a sliding window: reserves
  // pages for blocks [first_block, ceil(tokens / tokens_per_page)) and marks
  // the blocks before as freed, so only the pages the window needs at
  // `tokens` are fetched. Commit the tokens once their pages are filled.
  // InvalidArgument when the window at `tokens` would still see block
  // first_block - 1.
  absl::Status ReserveWindowTail(SeqId seq, uint32_t tokens, uint32_t first_block);
  // First block the window needs once a sequence holds `length` tokens (0
  // without a window).
  uint32_t FirstNeededBlock(uint32_t length) const { return WindowStart(length) / tokens_per_page(); }
  // Rolls the sequence back to `length` tokens (e.g. a rejected speculative
  // draft) and frees pages past it. FailedPrecondition when the sliding window
  // already freed a page the shorter sequence would need again.
  absl::Status Truncate(SeqId seq, uint32_t length);

 private:
  struct Sequence {
    uint32_t length = 0;
    std::vector<int32_t> blocks;
    uint32_t release_mark = UINT32_MAX;  // the window frees only blocks below it
  };
  explicit PagedKvCache(const KvCacheOptions& options) : options_(options) {}
  // First position a query at `length` still sees.
  uint32_t WindowStart(uint32_t length) const;
  void FreeBehindWindow(Sequence& s);
  absl::StatusOr<Sequence*> Find(SeqId seq);

  KvCacheOptions options_;
  std::unique_ptr<ShmBuffer> arena_;
  std::unique_ptr<GpuArena> gpu_arena_;
  kernels::PagedKv view_;
  std::vector<int32_t> free_;  // a stack: recently freed pages are reused first
  absl::flat_hash_map<SeqId, Sequence> seqs_;
  SeqId next_id_ = 1;
};

}  // namespace kvtier::decoder
