// The crash loop's ledger of sent and acknowledged keys (see crash_ledger.h).
#include "tests/crash/crash_ledger.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvtier::crash {

Ledger::Ledger(std::string dir, uint32_t sessions) {
  for (uint32_t s = 0; s < sessions; ++s)
    logs_.push_back(std::make_unique<std::ofstream>(absl::StrCat(dir, "/session-", s, ".log"),
                                                    std::ios::app));
}

uint32_t Ledger::Index(const PageKey& key, KeyClass cls) {
  auto [it, inserted] = index_.try_emplace(key, static_cast<uint32_t>(records_.size()));
  if (inserted) records_.push_back(KeyRecord{key, cls});
  return it->second;
}

void Ledger::Sent(uint32_t session, uint64_t put, const PlannedPut& p) {
  std::ofstream& log = *logs_[session];
  log << "put " << put;
  for (const PageKey& k : p.keys) log << ' ' << k.ToHex();
  log << '\n';
  log.flush();
  pages_sent_ += p.keys.size();
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < p.keys.size(); ++i)
    records_[Index(p.keys[i], p.classes[i])].retired = false;
}

uint32_t Ledger::Replied(uint32_t session, uint64_t put, const PlannedPut& p, const PutResult& r) {
  const uint64_t n = p.keys.size();
  const uint32_t acked = static_cast<uint32_t>(std::min<uint64_t>(r.stored + r.deduplicated, n));
  const bool adds_up = uint64_t{r.stored} + r.deduplicated + r.not_stored == n;
  std::ofstream& log = *logs_[session];
  log << "ok " << put << " stored=" << r.stored << " deduplicated=" << r.deduplicated
      << " not_stored=" << r.not_stored << " acked=" << acked << (adds_up ? "" : " BAD") << '\n';
  log.flush();
  pages_acked_ += acked;
  absl::MutexLock lock(&mu_);
  if (!adds_up && bad_replies_++ == 0) {
    first_bad_reply_ = absl::StrCat("PUT of ", n, " keys answered stored=", r.stored,
                                    " deduplicated=", r.deduplicated, " not_stored=", r.not_stored);
  }
  for (uint32_t i = 0; i < acked; ++i) {
    KeyRecord& rec = records_[Index(p.keys[i], p.classes[i])];
    if (rec.acked) continue;
    rec.acked = rec.ever_acked = true;
    rec.retired = false;
    rec.epoch = epoch_;
  }
  return acked;
}

void Ledger::Failed(uint32_t session, uint64_t put, const absl::Status& st) {
  std::ofstream& log = *logs_[session];
  log << "err " << put << ' ' << st.ToString() << '\n';
  log.flush();
  if (!absl::IsUnavailable(st) && !absl::IsDeadlineExceeded(st)) ++puts_refused_;
}

std::string Ledger::first_bad_reply() const {
  absl::MutexLock lock(&mu_);
  return first_bad_reply_;
}

uint64_t Ledger::unique_acked() const {
  absl::MutexLock lock(&mu_);
  return std::count_if(records_.begin(), records_.end(),
                       [](const KeyRecord& r) { return r.ever_acked; });
}

}  // namespace kvtier::crash
