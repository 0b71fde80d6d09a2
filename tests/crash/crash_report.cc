// The crash loop's running totals and its summary (RunTotals in crash_workload.h).
#include <algorithm>
#include <cstdio>

#include "tests/crash/crash_workload.h"

namespace kvtier::crash {
namespace {

unsigned long long U(uint64_t v) { return static_cast<unsigned long long>(v); }
double Pct(uint64_t part, uint64_t whole) { return whole ? 100.0 * part / whole : 100.0; }

}  // namespace

void RunTotals::Add(const CheckResult& r) {
  corrupt += r.corrupt;
  phantom += r.phantom;
  ++checks;
  // A check cut short by a kill point still saw what it saw.
  acked_checked += r.acked_checked;
  acked_present += r.acked_present;
  if (r.acked_present < r.acked_checked) ++checks_with_loss;
  if (!r.complete) {
    ++incomplete_checks;
    return;
  }
  checksum_errors += r.checksum_errors;
  recovered_pages += r.recovered_pages;
  dropped_records += r.dropped_records;
  acked_before_kill += r.pending_acked;
  survivors += r.pending_survived;
  max_nvme_used = std::max(max_nvme_used, r.nvme_used);
  nvme_capacity = r.nvme_capacity;
  last = r;
}

void RunTotals::Print(const Workload& w, const std::map<std::string, int>& point_kills,
                      double secs) const {
  const Ledger& l = w.ledger();
  const uint64_t unique_acked = l.unique_acked();
  uint64_t lost_by[kKeyClasses];
  const uint64_t lost = w.pages_ever_lost(lost_by);
  std::printf("crash-driver summary (%.1f s)\n", secs);
  std::printf("  kills                 %d (by kill point:", kills);
  for (const auto& [name, n] : point_kills) std::printf(" %s=%d", name.c_str(), n);
  if (point_kills.empty()) std::printf(" none");
  std::printf(")\n  restarts              %d (checks %llu, cut short by a kill point %llu, "
              "reading every acked page %llu)\n",
              restarts, U(checks), U(incomplete_checks), U(full_checks));
  std::printf("  pages sent / acked    %llu / %llu (summed over PUT replies); "
              "distinct pages acked %llu\n",
              U(l.pages_sent()), U(l.pages_acked()), U(unique_acked));
  std::printf("  PUTs refused          %llu (error replies); replies not adding up %llu%s%s\n",
              U(l.puts_refused()), U(l.bad_replies()), l.bad_replies() ? ": " : "",
              l.first_bad_reply().c_str());
  std::printf("  acked, then killed    %llu; present after the restart %llu (%.1f%%)\n",
              U(acked_before_kill), U(survivors), Pct(survivors, acked_before_kill));
  std::printf("  acked pages checked   %llu; present %llu (%.2f%%), missing %llu; checks finding "
              "acked pages missing %llu of %llu\n",
              U(acked_checked), U(acked_present), Pct(acked_present, acked_checked),
              U(acked_checked - acked_present), U(checks_with_loss), U(checks));
  std::printf("  acked pages missing   %llu distinct of %llu acked (%.1f%%) at some check: "
              "system %llu, pair %llu, private %llu, repeat %llu\n",
              U(lost), U(unique_acked), unique_acked ? 100.0 * lost / unique_acked : 0.0,
              U(lost_by[int(KeyClass::kSystem)]), U(lost_by[int(KeyClass::kPair)]),
              U(lost_by[int(KeyClass::kPrivate)]), U(lost_by[int(KeyClass::kRepeat)]));
  if (w.retired() > 0)
    std::printf("  pages retired         %llu (DELETEd by the checker to bound the store)\n",
                U(w.retired()));
  std::printf("  last check            %llu of %llu sampled pages present, nvme pages %llu\n",
              U(last.present), U(last.checked), U(last.nvme_pages));
  std::printf("  nvme used             at most %llu of %llu bytes (%.0f%%)\n", U(max_nvme_used),
              U(nvme_capacity), Pct(max_nvme_used, nvme_capacity));
  std::printf("  corrupt reads         %llu (must be 0)\n", U(corrupt));
  std::printf("  never-PUT pages hit   %llu (must be 0)\n", U(phantom));
  std::printf("  nvme checksum_errors  %llu, recovered_pages %llu, dropped_records %llu "
              "(sums over restarts)\n",
              U(checksum_errors), U(recovered_pages), U(dropped_records));
  std::fflush(stdout);
}

}  // namespace kvtier::crash
