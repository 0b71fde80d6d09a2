// The read operations of GET, for copy workers (they may read the disk):
// ReadPage makes one pinned page readable from host memory; ReadPages does
// it for a GET range at once, with every read below RAM in flight together
// (the device sees the range's depth, not 1), each page handed over as its
// read completes. Both keep one set of rules (the mover's and the read checks'): promotion on
// GET, verification, dropping corrupt pages, the demand-read hook.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "tiers/store/internal/page_move.h"
#include "tiers/store/internal/read_buffers.h"
#include "tiers/store/internal/read_checks.h"
#include "tiers/store/internal/store_core.h"
#include "tiers/store/internal/store_impl.h"
#include "tiers/store/tier_manager.h"

namespace kvtier::tiers {
using internal::Bounce;
using internal::DemandScope;
using internal::GiveBounce;
using internal::kReadAlign;
using internal::TakeBounce;

namespace {
uint64_t RoundUp(uint64_t n) { return internal::RoundUpToBlock(n); }
}  // namespace

// ReadPages' state. Reads complete on the tier's I/O threads, whose
// callbacks only queue (ReadCompletions); verification, the promotion's
// switch, and `on_page` run on the calling thread.
class PageReadBatch {
 public:
  PageReadBatch(TierManager& mgr, absl::Span<PagePin> pins, const ReadOptions& options,
                PageReadFn on_page)
      : mgr_(mgr),
        m_(*mgr.impl_),
        pins_(pins),
        options_(options),
        on_page_(on_page),
        promote_to_(m_.core.PromoteTarget(options)) {}

  void Run();

 private:
  using Impl = TierManager::Impl;
  // One page below host memory: its promotion (move set) or bounce read.
  struct Read {
    size_t i = 0;  // index into pins_
    std::optional<PageMove> move;
    Bounce bounce;
    PromoteOutcome not_promoted = PromoteOutcome::kFailed;  // why StartPromotion said no
  };
  PageEntry* Entry(const Read& r) const { return pins_[r.i].entry_; }
  size_t Window() const;
  Tier::ReadDone Done(size_t r) {
    ++inflight_;
    return completions_.Done(r);
  }
  void Start(size_t r);
  static absl::Status NotPromoted(PromoteOutcome why);
  bool StartPromotion(size_t r);
  void StartBounce(size_t r);
  void Complete(size_t r, absl::Status st);
  void CompletePromotion(size_t r, absl::Status st);
  void Hand(size_t i, absl::StatusOr<const uint8_t*> bytes);

  TierManager& mgr_;
  Impl& m_;
  absl::Span<PagePin> pins_;
  const ReadOptions& options_;
  PageReadFn on_page_;
  const std::optional<size_t> promote_to_;
  std::vector<Read> reads_;
  size_t inflight_ = 0;
  internal::ReadCompletions completions_;
};

void PageReadBatch::Run() {
  std::vector<size_t> ram;
  for (size_t i = 0; i < pins_.size(); ++i) {
    if (!pins_[i].valid()) continue;
    if (pins_[i].data() != nullptr) {
      ram.push_back(i);
    } else {
      reads_.push_back(Read{i});
    }
  }
  std::optional<DemandScope> demand;
  if (!reads_.empty()) demand.emplace(options_.demand);
  const size_t window = Window();
  size_t next = 0;
  for (; next < reads_.size() && inflight_ < window; ++next) Start(next);
  // RAM pages are copied while the disk works.
  for (size_t i : ram) Hand(i, pins_[i].data());
  while (inflight_ > 0) {
    for (auto& [r, st] : completions_.Wait()) {
      --inflight_;
      Complete(r, std::move(st));
    }
    for (; next < reads_.size() && inflight_ < window; ++next) Start(next);
  }
}

size_t PageReadBatch::Window() const {
  uint64_t depth = 1, room = kReadAlign;
  for (const Read& r : reads_) {
    depth = std::max<uint64_t>(depth, m_.core.tiers[Entry(r)->tier]->tier->queue_depth());
    room = std::max(room, RoundUp(Entry(r)->slot.bytes));
  }
  const uint64_t by_bytes = std::max<uint64_t>(1, options_.max_bounce_bytes / room);
  return static_cast<size_t>(std::min(depth, by_bytes));
}

void PageReadBatch::Start(size_t r) {
  if (promote_to_ && StartPromotion(r)) return;
  // Already found corrupt (by a promotion attempt): no second read.
  if (absl::Status st = m_.checks->KnownCorrupt(Entry(reads_[r])); !st.ok())
    return Hand(reads_[r].i, st);
  if (options_.promote_only) return Hand(reads_[r].i, NotPromoted(reads_[r].not_promoted));
  StartBounce(r);
}

absl::Status PageReadBatch::NotPromoted(PromoteOutcome why) {
  switch (why) {
    case PromoteOutcome::kMissing: return absl::NotFoundError("deleted before its promotion");
    case PromoteOutcome::kBusy: return absl::UnavailableError("another reader holds the page");
    case PromoteOutcome::kNoRoom: return absl::ResourceExhaustedError("no room in the target tier");
    default: return absl::InternalError("not promoted");
  }
}

// True when the page is being promoted (its read into the target slot is
// in flight) or was handed over; false: read it into a bounce buffer.
bool PageReadBatch::StartPromotion(size_t r) {
  Read& rd = reads_[r];
  PageEntry* e = Entry(rd);
  if (std::optional<PromoteOutcome> no = m_.mover->CheckPromotable(e, *promote_to_)) {
    rd.not_promoted = *no;
    return false;
  }
  // The read is issued with the token of whoever may join it later.
  IoUrgencyScope urgent(rd.i < options_.urgency.size() ? options_.urgency[rd.i] : nullptr);
  Tier& target = *m_.core.tiers[*promote_to_]->tier;
  if (target.Region().first == nullptr) {
    // A target that is not host memory (an HBM prefetch target): the
    // synchronous move, as ReadPage does it.
    rd.not_promoted = mgr_.PromoteTo(pins_[rd.i], *promote_to_, options_.promote_evict);
    if (rd.not_promoted != PromoteOutcome::kPromoted) return false;
    if (pins_[rd.i].data() == nullptr) return false;
    Hand(rd.i, pins_[rd.i].data());
    return true;
  }
  rd.move.emplace(
      m_.mover->PrepareMove(e, *promote_to_, MoveKind::kPromote, options_.promote_evict));
  if (!rd.move->dst.ok()) {
    rd.move.reset();
    rd.not_promoted = PromoteOutcome::kNoRoom;
    return false;
  }
  uint8_t* dst = target.Address(*rd.move->dst);
  m_.core.tiers[rd.move->from]->tier->ReadAsync(rd.move->old, dst, rd.move->dst->bytes, Done(r));
  return true;
}

void PageReadBatch::StartBounce(size_t r) {
  Read& rd = reads_[r];
  const PageEntry* e = Entry(rd);
  rd.bounce = TakeBounce(RoundUp(e->slot.bytes));
  if (rd.bounce.bytes == nullptr)
    return Hand(rd.i, absl::ResourceExhaustedError("no memory for a bounce buffer"));
  m_.core.tiers[e->tier]->tier->ReadAsync(e->slot, rd.bounce.bytes.get(), rd.bounce.room, Done(r));
}

void PageReadBatch::Complete(size_t r, absl::Status st) {
  Read& rd = reads_[r];
  if (rd.move.has_value()) return CompletePromotion(r, std::move(st));
  PageEntry* e = Entry(rd);
  const uint8_t* bytes = rd.bounce.bytes.get();
  if (st.ok()) st = m_.checks->VerifyRead(e, e->tier, bytes);
  if (st.ok()) {
    Hand(rd.i, bytes);
  } else {
    Hand(rd.i, std::move(st));
  }
  GiveBounce(std::move(rd.bounce));
}

void PageReadBatch::CompletePromotion(size_t r, absl::Status st) {
  Read& rd = reads_[r];
  PageMove& move = *rd.move;
  move.copied = st.ok();
  if (move.copied) {
    m_.core.CountIn(move.to, move.old.bytes);  // read straight into the slot
    const uint8_t* dst = m_.core.tiers[move.to]->tier->Address(*move.dst);
    m_.mover->CheckMovedBytes(move, XXH3_64bits(dst, move.old.bytes));
  }
  const PromoteOutcome outcome = m_.mover->FinishPromotion(move);
  rd.move.reset();
  if (outcome == PromoteOutcome::kPromoted && pins_[rd.i].data() != nullptr)
    return Hand(rd.i, pins_[rd.i].data());
  // As ReadPage after a promotion that did not happen (busy, deleted, read
  // error): a bounce read. A page found corrupt is a miss without one.
  if (absl::Status known = m_.checks->KnownCorrupt(Entry(rd)); !known.ok())
    return Hand(rd.i, known);
  if (options_.promote_only) return Hand(rd.i, st.ok() ? NotPromoted(outcome) : st);
  StartBounce(r);
}

void PageReadBatch::Hand(size_t i, absl::StatusOr<const uint8_t*> bytes) {
  if (absl::IsDataLoss(bytes.status())) pins_[i].Reset();  // a miss
  // A page handed from its RAM slot leaves that tier here (the reader copies
  // all of it); bounce bytes were counted by the read that filled them. A
  // promotion alone hands nothing over.
  if (bytes.ok() && !options_.promote_only && *bytes == pins_[i].data())
    m_.core.CountOut(pins_[i].entry_->tier, pins_[i].bytes());
  on_page_(i, std::move(bytes));
}

void TierManager::ReadPages(absl::Span<PagePin> pins, const ReadOptions& options,
                            PageReadFn on_page) {
  PageReadBatch(*this, pins, options, on_page).Run();
}

absl::StatusOr<const uint8_t*> TierManager::ReadPage(PagePin& pin, std::vector<uint8_t>& bounce,
                                                     const ReadOptions& options) {
  if (!pin.valid()) return absl::FailedPreconditionError("ReadPage on an empty PagePin");
  if (const uint8_t* p = pin.data()) {
    impl_->core.CountOut(pin.entry_->tier,
                         pin.bytes());  // as PageReadBatch::Hand
    return p;
  }
  DemandScope demand(options.demand);
  const std::optional<size_t> to = impl_->core.PromoteTarget(options);
  if (to && PromoteTo(pin, *to) == PromoteOutcome::kPromoted) {
    if (const uint8_t* p = pin.data()) {
      impl_->core.CountOut(pin.entry_->tier, pin.bytes());
      return p;
    }
  }
  bounce.resize(pin.bytes());
  absl::Status st = pin.CopyTo(bounce.data());  // reads, and verifies bytes from disk
  if (absl::IsDataLoss(st)) pin.Reset();
  if (!st.ok()) return st;
  return bounce.data();
}

void TierManager::PromotePinned(absl::Span<PagePin> pins, size_t to, EvictMode mode,
                                absl::FunctionRef<void(size_t, PromoteOutcome)> on_done,
                                absl::Span<const IoUrgency> urgency) {
  Impl& m = *impl_;
  const bool host_target =
      to < m.core.tiers.size() && m.core.tiers[to]->tier->Region().first != nullptr;
  std::vector<PagePin> below;  // read together; below_of[k]: its index in pins
  std::vector<size_t> below_of;
  std::vector<IoUrgency> below_urgency;
  for (size_t i = 0; i < pins.size(); ++i) {
    if (!pins[i].valid()) {
      on_done(i, PromoteOutcome::kMissing);
    } else if (pins[i].entry_->tier <= to) {  // pinned: its tier stays put
      on_done(i, PromoteOutcome::kAlreadyThere);
    } else if (!host_target || pins[i].data() != nullptr || pins[i].is_hold()) {
      IoUrgencyScope urgent(i < urgency.size() ? urgency[i] : nullptr);
      const PromoteOutcome o = PromoteTo(pins[i], to, mode);
      if (o != PromoteOutcome::kPromoted && o != PromoteOutcome::kAlreadyThere) pins[i].Reset();
      on_done(i, o);
    } else {
      below.push_back(std::move(pins[i]));
      below_of.push_back(i);
      below_urgency.push_back(i < urgency.size() ? urgency[i] : nullptr);
    }
  }
  if (below.empty()) return;
  const ReadOptions options{.promote_to = static_cast<int>(to), .promote_only = true,
                            .promote_evict = mode, .urgency = below_urgency};
  ReadPages(absl::MakeSpan(below), options,
            [&](size_t k, absl::StatusOr<const uint8_t*> bytes) {
              const size_t i = below_of[k];
              PromoteOutcome o = PromoteOutcome::kPromoted;
              if (!bytes.ok()) {
                const absl::Status& st = bytes.status();
                o = absl::IsNotFound(st)            ? PromoteOutcome::kMissing
                    : absl::IsUnavailable(st)       ? PromoteOutcome::kBusy
                    : absl::IsResourceExhausted(st) ? PromoteOutcome::kNoRoom
                                                    : PromoteOutcome::kFailed;
              }
              if (o == PromoteOutcome::kPromoted) pins[i] = std::move(below[k]);
              below[k].Reset();
              on_done(i, o);
            });
}

bool TierManager::Promote(PagePin& pin) {
  if (pin.entry_ == nullptr || !impl_->core.config.promote_on_get) return false;
  return PromoteTo(pin, impl_->core.promote_to) == PromoteOutcome::kPromoted;
}

}  // namespace kvtier::tiers
