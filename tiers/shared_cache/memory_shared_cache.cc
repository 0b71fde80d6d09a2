// MemorySharedCache: a hash map of records with an LRU list through it. Each
// call does its work under the mutex and runs its callback after releasing
// it, so a callback that calls the cache again does not deadlock.
#include "tiers/shared_cache/memory_shared_cache.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvtier::tiers::shared_cache {

void MemorySharedCache::EraseLocked(absl::flat_hash_map<RecordId, Record>::iterator it) {
  used_bytes_ -= it->second.bytes.size();
  lru_.erase(it->second.lru);
  records_.erase(it);
}

bool MemorySharedCache::Publish(absl::string_view ns, const PageKey& key, const PageKey& parent,
                                const void* bytes, uint64_t n) {
  absl::MutexLock lock(&mu_);
  if (n == 0 || (capacity_bytes_ != 0 && n > capacity_bytes_)) {
    ++counters_.publish_drops;
    return false;
  }
  RecordId id{std::string(ns), key};
  if (auto it = records_.find(id); it != records_.end()) EraseLocked(it);
  lru_.push_front(id);
  Record& r = records_[std::move(id)];
  r.parent = parent;
  r.bytes.assign(static_cast<const uint8_t*>(bytes), static_cast<const uint8_t*>(bytes) + n);
  r.lru = lru_.begin();
  used_bytes_ += n;
  ++counters_.published;
  counters_.published_bytes += n;
  // The new record is the most recent and fits alone, so it is never dropped.
  while (capacity_bytes_ != 0 && used_bytes_ > capacity_bytes_) {
    EraseLocked(records_.find(lru_.back()));
    ++lru_drops_;
  }
  return true;
}

void MemorySharedCache::Contains(absl::string_view ns, std::vector<PageKey> keys,
                                 ContainsDone done) {
  std::vector<bool> present(keys.size(), false);
  {
    absl::MutexLock lock(&mu_);
    ++counters_.lookups;
    counters_.lookup_keys += keys.size();
    if (!stopped_) {
      RecordId id{std::string(ns), PageKey::Zero()};
      for (size_t i = 0; i < keys.size(); ++i) {
        id.key = keys[i];
        present[i] = records_.contains(id);
        counters_.lookup_hits += present[i] ? 1 : 0;
      }
    }
  }
  std::move(done)(std::move(present));
}

void MemorySharedCache::FetchInto(absl::string_view ns, std::vector<PageKey> keys,
                                  uint64_t page_bytes, std::vector<uint8_t*> dst, FetchDone done) {
  std::vector<FetchedPage> pages(keys.size());
  {
    absl::MutexLock lock(&mu_);
    counters_.fetch_keys += keys.size();
    RecordId id{std::string(ns), PageKey::Zero()};
    for (size_t i = 0; i < keys.size(); ++i) {
      FetchedPage& p = pages[i];
      id.key = keys[i];
      auto it = stopped_ ? records_.end() : records_.find(id);
      if (it == records_.end()) {
        p.status = absl::NotFoundError("shared cache: no such record");
        ++counters_.fetch_misses;
        continue;
      }
      const Record& r = it->second;
      if (r.bytes.size() != page_bytes) {
        // Not this page's layout: a miss for the caller, never wrong bytes.
        p.status = absl::DataLossError(absl::StrCat("shared cache: a record of ", r.bytes.size(),
                                                    " bytes for a page of ", page_bytes));
        ++(r.bytes.size() > page_bytes ? counters_.oversized : counters_.malformed);
        continue;
      }
      p.parent = r.parent;
      uint8_t* to = i < dst.size() ? dst[i] : nullptr;
      if (to == nullptr) {
        p.bytes.reset(new uint8_t[page_bytes]);
        to = p.bytes.get();
      }
      std::memcpy(to, r.bytes.data(), page_bytes);
      lru_.splice(lru_.begin(), lru_, r.lru);  // a read refreshes it, as a Redis GET does
      ++counters_.fetch_hits;
      counters_.fetched_bytes += page_bytes;
    }
  }
  std::move(done)(std::move(pages));
}

void MemorySharedCache::Forget(absl::string_view ns, std::vector<PageKey> keys, ForgetDone done) {
  uint64_t forgotten = 0;
  bool stopped;
  {
    absl::MutexLock lock(&mu_);
    stopped = stopped_;
    RecordId id{std::string(ns), PageKey::Zero()};
    for (size_t i = 0; i < keys.size() && !stopped; ++i) {
      id.key = keys[i];
      if (auto it = records_.find(id); it != records_.end()) {
        EraseLocked(it);
        ++forgotten;
      }
    }
    if (stopped) counters_.forget_errors += keys.size();
    counters_.forgotten += forgotten;
  }
  if (stopped) {
    std::move(done)(absl::UnavailableError("shared cache: stopped"), 0);
    return;
  }
  std::move(done)(absl::OkStatus(), forgotten);
}

void MemorySharedCache::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

SharedCacheCounters MemorySharedCache::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

std::string MemorySharedCache::backing() const {
  return capacity_bytes_ == 0
             ? std::string("in-memory shared cache (unbounded)")
             : absl::StrCat("in-memory shared cache (", capacity_bytes_, " bytes, LRU)");
}

size_t MemorySharedCache::records() const {
  absl::MutexLock lock(&mu_);
  return records_.size();
}

uint64_t MemorySharedCache::used_bytes() const {
  absl::MutexLock lock(&mu_);
  return used_bytes_;
}

uint64_t MemorySharedCache::lru_drops() const {
  absl::MutexLock lock(&mu_);
  return lru_drops_;
}

}  // namespace kvtier::tiers::shared_cache
