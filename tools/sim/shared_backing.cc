// SharedBacking: an LRU list of record names with a hash index into it.
#include "tools/sim/shared_backing.h"

#include "absl/strings/str_cat.h"

namespace kvtier::sim {

std::string RecordName(absl::string_view ns, const PageKey& key) {
  return absl::StrCat(ns, ":", key.ToHex());
}

void SharedBacking::Set(const std::string& name) {
  ++counters_.sets;
  if (auto it = index_.find(name); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);  // replaced: newest again
    return;
  }
  lru_.push_front(name);
  index_[name] = lru_.begin();
  while (index_.size() > capacity_) {
    index_.erase(lru_.back());
    lru_.pop_back();
    ++counters_.lru_drops;
  }
}

bool SharedBacking::Get(const std::string& name) {
  ++counters_.gets;
  auto it = index_.find(name);
  if (it == index_.end()) {
    ++counters_.get_misses;
    return false;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return true;
}

bool SharedBacking::Exists(const std::string& name) {
  ++counters_.exists;
  return index_.contains(name);
}

bool SharedBacking::Delete(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) return false;
  ++counters_.deletes;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

}  // namespace kvtier::sim
