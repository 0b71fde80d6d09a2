// The read operation of a layer-wise GET: TierManager::ReadLayers. Pages
// below host memory are read in parts, layer-major (the part of every page
// that holds layer l is one batch of reads, in flight together and while
// earlier layers are handed over), each part verified by the page's chunk
// sums (verify_chunks.h) before any of its bytes is handed over. Pages
// recorded without chunk sums are read whole first, as ReadPages reads them.
#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "tiers/store/internal/page_move.h"
#include "tiers/store/internal/read_buffers.h"
#include "tiers/store/internal/read_checks.h"
#include "tiers/store/internal/store_core.h"
#include "tiers/store/internal/store_impl.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {

using internal::Bounce;

// ReadLayers' state. As in PageReadBatch, the tier's I/O threads only queue
// (ReadCompletions); verification, promotion and the sink run on the
// calling thread.
//
// A page promoted as it is read is read into its new slot: its units are
// disjoint runs of chunks, and layer l is ready once every byte up to its
// end is verified. Any other page is read into bounce buffers, one per
// unit: unit l holds all of layer l (the chunks that cover it, so a chunk
// two layers share is read twice), is ready once verified, and goes back to
// the thread's pool as soon as layer l was handed over. So the bounce
// memory in use stays near the reads in flight (ReadOptions.max_bounce_bytes
// bounds the units started ahead of the layer being handed over) and is
// reused from one GET to the next instead of being faulted in afresh.
class LayerReadBatch {
 public:
  LayerReadBatch(TierManager& mgr, absl::Span<PagePin> pins, uint64_t layer_bytes,
                 uint32_t layers, const ReadOptions& options, LayerSink& sink)
      : m_(*mgr.impl_), pins_(pins), layer_bytes_(layer_bytes), layers_(layers),
        options_(options), sink_(sink) {}

  LayerReadStats Run();

 private:
  using Impl = TierManager::Impl;
  // One read: bytes [begin, end) of a page.
  struct Unit {
    size_t page = 0;  // index into pages_
    uint64_t begin = 0, end = 0;
    int64_t layer = 0;  // the first layer it serves; -1: the whole page
    uint8_t* dst = nullptr;
    Bounce bounce;  // dst's memory, unless dst lies in the page's new slot
    bool ok = false;  // read and verified
  };
  // A page below host memory.
  struct Page {
    size_t i = 0;        // index into pins_
    ChunkSums sums;      // empty: one unit, the whole page
    uint8_t* slot = nullptr;             // the promotion's slot, if promoted
    std::optional<PageMove> move;        // the promotion
    std::vector<size_t> units;           // into units_, in byte order
    size_t verified_units = 0;           // leading units read and verified
    uint32_t inflight = 0;
    bool failed = false;
    absl::Status why;
  };

  PageEntry* Entry(const Page& p) const { return pins_[p.i].entry_; }
  bool Prepare(Page& p);
  void PlanUnits(size_t page);
  bool MayStart(const Unit& u, size_t window) const;
  void Start(size_t u);
  void Complete(size_t u, absl::Status st);
  void Fail(Page& p, absl::Status why);
  void Settle(Page& p);
  const uint8_t* LayerAt(const Page& p, uint32_t l) const;
  void Release(Unit& u);
  void Advance();

  Impl& m_;
  absl::Span<PagePin> pins_;
  const uint64_t layer_bytes_;
  const uint32_t layers_;
  const ReadOptions& options_;
  LayerSink& sink_;
  LayerReadStats stats_;
  std::vector<size_t> ram_;  // pins_ indices of host-addressable pages
  std::vector<Page> pages_;
  std::vector<Unit> units_;  // in the order they are started: layer-major
  size_t inflight_ = 0;
  uint64_t bounce_held_ = 0;  // bytes of bounce buffers taken and not released
  uint32_t next_layer_ = 0;   // the next layer to hand over
  internal::ReadCompletions completions_;
};

LayerReadStats LayerReadBatch::Run() {
  const uint64_t page_bytes = layer_bytes_ * layers_;
  for (size_t i = 0; i < pins_.size(); ++i) {
    if (!pins_[i].valid()) continue;
    if (pins_[i].bytes() != page_bytes || layers_ == 0) {
      sink_.PageFailed(i, absl::InvalidArgumentError(absl::StrCat(
                              "page of ", pins_[i].bytes(), " bytes is not ", layers_,
                              " layers of ", layer_bytes_, " bytes")));
      continue;
    }
    if (pins_[i].data() != nullptr) {
      ram_.push_back(i);
    } else {
      pages_.push_back(Page{.i = i});
    }
  }
  stats_.ram_pages = static_cast<uint32_t>(ram_.size());
  std::optional<internal::DemandScope> demand;
  if (!pages_.empty()) demand.emplace(options_.demand);
  uint64_t window = 1;
  for (size_t k = 0; k < pages_.size(); ++k) {
    window = std::max<uint64_t>(window, m_.core.tiers[Entry(pages_[k])->tier]->tier->queue_depth());
    if (Prepare(pages_[k])) PlanUnits(k);
  }
  // Whole pages first (layer 0 waits for them), then layer 0 of every
  // chunked page, layer 1, ...
  std::stable_sort(units_.begin(), units_.end(),
                   [](const Unit& a, const Unit& b) { return a.layer < b.layer; });
  for (size_t u = 0; u < units_.size(); ++u) pages_[units_[u].page].units.push_back(u);
  size_t next = 0;
  while (true) {
    for (; next < units_.size() && MayStart(units_[next], window); ++next) Start(next);
    Advance();
    if (inflight_ == 0) break;
    for (auto& [u, st] : completions_.Wait()) Complete(u, std::move(st));
  }
  for (Page& p : pages_) Settle(p);
  return stats_;
}

// Picks the page's destination and reads its chunk sums; false (the page
// failed, and the sink was told) when it cannot be read.
bool LayerReadBatch::Prepare(Page& p) {
  PageEntry* e = Entry(p);
  if (absl::Status st = m_.checks->KnownCorrupt(e); !st.ok()) {
    Fail(p, st);
    return false;
  }
  // Pinned by us: key, checksum and slot stay put.
  PageMeta meta;
  if (const NamespaceState* ns = m_.core.Ns(e->ns)) meta.ns_name = ns->name;
  meta.key = e->key;
  meta.checksum = e->checksum;
  // Only a durable index keeps chunk sums; RAM bytes never left the process.
  if (DurableIndex* index = m_.core.tiers[e->tier]->tier->durable())
    p.sums = index->ReadChunkSums(e->slot, meta);
  const std::optional<size_t> to = m_.core.PromoteTarget(options_);
  if (to && !m_.mover->CheckPromotable(e, *to).has_value() &&
      m_.core.tiers[*to]->tier->Region().first != nullptr) {
    // A GET's promotion makes room only by dropping clean pages.
    p.move.emplace(m_.mover->PrepareMove(e, *to, MoveKind::kPromote, EvictMode::kCleanOnly));
    if (p.move->dst.ok()) {
      p.slot = m_.core.tiers[*to]->tier->Address(*p.move->dst);
    } else {
      p.move.reset();
    }
  }
  ++(p.sums.empty() ? stats_.whole_pages : stats_.chunked_pages);
  return true;
}

// The page's units: the whole page; or per layer the chunks that cover it,
// minus those read for the layer before when the page goes to its slot.
void LayerReadBatch::PlanUnits(size_t page) {
  const Page& p = pages_[page];
  const uint64_t bytes = Entry(p)->slot.bytes;
  if (p.sums.empty()) {
    units_.push_back(Unit{.page = page, .begin = 0, .end = bytes, .layer = -1});
    return;
  }
  const uint64_t c = p.sums.chunk_bytes;
  uint64_t read_to = 0;
  for (uint32_t l = 0; l < layers_; ++l) {
    uint64_t begin = uint64_t{l} * layer_bytes_ / c * c;
    if (p.slot != nullptr) begin = std::max(begin, read_to);
    const uint64_t end = std::min(bytes, (uint64_t{l + 1} * layer_bytes_ + c - 1) / c * c);
    if (end <= begin) continue;
    units_.push_back(Unit{.page = page, .begin = begin, .end = end, .layer = l});
    read_to = end;
  }
}

// The device's depth bounds the reads in flight; max_bounce_bytes bounds the
// buffers of units started ahead of the layer being handed over (those of
// that layer always start: without them nothing moves).
bool LayerReadBatch::MayStart(const Unit& u, size_t window) const {
  if (inflight_ >= window) return false;
  if (pages_[u.page].slot != nullptr || u.layer <= int64_t{next_layer_}) return true;
  return bounce_held_ + internal::RoundUpToBlock(u.end - u.begin) <= options_.max_bounce_bytes;
}

void LayerReadBatch::Start(size_t u) {
  Unit& unit = units_[u];
  Page& p = pages_[unit.page];
  if (p.failed) return;
  const PageEntry* e = Entry(p);
  const uint64_t n = unit.end - unit.begin;
  // A slot holds the page (the tier bounces a tail past it); a bounce
  // buffer is whole blocks.
  uint64_t room = e->slot.bytes - unit.begin;
  if (p.slot != nullptr) {
    unit.dst = p.slot + unit.begin;
  } else {
    unit.bounce = internal::TakeBounce(internal::RoundUpToBlock(n));
    if (unit.bounce.bytes == nullptr)
      return Fail(p, absl::ResourceExhaustedError("no memory for a bounce buffer"));
    unit.dst = unit.bounce.bytes.get();
    room = unit.bounce.room;
    bounce_held_ += room;
  }
  ++p.inflight;
  ++inflight_;
  m_.core.tiers[e->tier]->tier->ReadRangeAsync(e->slot, unit.begin, n, unit.dst, room,
                                               completions_.Done(u));
}

void LayerReadBatch::Complete(size_t u, absl::Status st) {
  Unit& unit = units_[u];
  Page& p = pages_[unit.page];
  --p.inflight;
  --inflight_;
  if (p.failed) {
    if (p.inflight == 0) Settle(p);
    return;
  }
  PageEntry* e = Entry(p);
  if (!st.ok()) {
    // An I/O error: that page's alone.
  } else if (p.sums.empty()) {
    st = m_.checks->VerifyRead(e, e->tier,
                               unit.dst);  // drops the page on a mismatch
  } else if (!VerifyChunks(p.sums, e->slot.bytes, unit.begin, unit.end, unit.dst)) {
    st = m_.checks->CorruptRead(e, e->tier);
  }
  if (!st.ok()) return Fail(p, std::move(st));
  unit.ok = true;
  while (p.verified_units < p.units.size() && units_[p.units[p.verified_units]].ok)
    ++p.verified_units;
}

void LayerReadBatch::Fail(Page& p, absl::Status why) {
  if (p.failed) return;
  p.failed = true;
  if (p.move) {
    p.move->copied = false;
    p.move->corrupt = absl::IsDataLoss(why);
  }
  p.why = why;
  sink_.PageFailed(p.i, std::move(why));
  if (p.inflight == 0) Settle(p);
}

// Ends the page's promotion and gives back its buffers, once no read into
// them is in flight. A page read whole stays where it was handed over from
// until Run returns: this runs for it after the last layer.
void LayerReadBatch::Settle(Page& p) {
  if (p.move) {
    if (!p.failed) p.move->copied = true;  // every chunk verified
    if (p.move->copied) m_.core.CountIn(p.move->to, p.move->old.bytes);  // read into the slot
    if (m_.mover->FinishPromotion(*p.move) == PromoteOutcome::kPromoted) ++stats_.promoted_pages;
    p.move.reset();
  }
  p.slot = nullptr;
  for (size_t u : p.units) Release(units_[u]);
  if (p.failed && absl::IsDataLoss(p.why)) pins_[p.i].Reset();  // a miss
}

void LayerReadBatch::Release(Unit& u) {
  if (u.bounce.bytes == nullptr) return;
  bounce_held_ -= u.bounce.room;
  internal::GiveBounce(std::move(u.bounce));
  u.bounce = Bounce{};
}

// Layer l of page p, or nullptr while it is not verified yet.
const uint8_t* LayerReadBatch::LayerAt(const Page& p, uint32_t l) const {
  const uint64_t at = uint64_t{l} * layer_bytes_;
  if (p.sums.empty()) {
    const Unit& whole = units_[p.units[0]];
    return whole.ok ? whole.dst + at : nullptr;
  }
  if (p.slot != nullptr) {
    const uint64_t verified =
        p.verified_units == 0 ? 0 : units_[p.units[p.verified_units - 1]].end;
    return verified >= at + layer_bytes_ ? p.slot + at : nullptr;
  }
  const Unit& u = units_[p.units[l]];  // one unit per layer
  return u.ok ? u.dst + (at - u.begin) : nullptr;
}

// Hands over every layer that all pages still readable have verified, and
// gives back the bounce buffers of the layers handed over.
void LayerReadBatch::Advance() {
  for (; next_layer_ < layers_; ++next_layer_) {
    for (const Page& p : pages_)
      if (!p.failed && LayerAt(p, next_layer_) == nullptr) return;
    const uint64_t at = uint64_t{next_layer_} * layer_bytes_;
    // Layers handed from a RAM slot (a RAM page's, or a promoted page's new
    // one) leave that tier here; bounce bytes were counted by their read.
    for (size_t i : ram_) {
      sink_.Layer(i, next_layer_, pins_[i].data() + at);
      m_.core.CountOut(pins_[i].entry_->tier, layer_bytes_);
    }
    for (Page& p : pages_) {
      if (p.failed) continue;
      sink_.Layer(p.i, next_layer_, LayerAt(p, next_layer_));
      if (p.slot != nullptr) m_.core.CountOut(p.move->to, layer_bytes_);
      if (p.slot == nullptr && !p.sums.empty()) Release(units_[p.units[next_layer_]]);
    }
    sink_.LayerDone(next_layer_);
  }
}

LayerReadStats TierManager::ReadLayers(absl::Span<PagePin> pins, uint64_t layer_bytes,
                                       uint32_t layers, const ReadOptions& options,
                                       LayerSink& sink) {
  return LayerReadBatch(*this, pins, layer_bytes, layers, options, sink).Run();
}

}  // namespace kvtier::tiers
