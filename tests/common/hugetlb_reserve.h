// HugetlbReserve: makes `pages` 2 MiB hugetlb pages free for a test, raising
// vm.nr_hugepages when fewer are free and the test may (root), and putting
// the old value back when it ends. Machines reserve none by default, so
// without root a test that needs them skips (why() says so).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace kvtier::testing {

class HugetlbReserve {
 public:
  explicit HugetlbReserve(long pages) {
    const long free = Free();
    if (free >= pages) return;
    std::ifstream in(kSysctl);
    long total = -1;
    in >> total;
    std::ofstream out(kSysctl);
    if (total < 0 || !out) {
      why_ = "no free hugetlb pages and " + std::string(kSysctl) + " is not writable";
      return;
    }
    before_ = total;
    out << total + pages - free << std::flush;
    if (Free() < pages)
      why_ = "asked for " + std::to_string(pages) + " hugetlb pages, the kernel gave " +
             std::to_string(Free()) + " (memory too fragmented?)";
  }
  ~HugetlbReserve() {
    if (before_ >= 0) std::ofstream(kSysctl) << before_ << std::flush;
  }
  HugetlbReserve(const HugetlbReserve&) = delete;
  HugetlbReserve& operator=(const HugetlbReserve&) = delete;

  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }

  // HugePages_Free of /proc/meminfo.
  static long Free() {
    std::ifstream meminfo("/proc/meminfo");
    for (std::string line; std::getline(meminfo, line);) {
      if (line.rfind("HugePages_Free:", 0) != 0) continue;
      std::istringstream s(line.substr(15));
      long n = 0;
      s >> n;
      return n;
    }
    return 0;
  }

 private:
  static constexpr const char* kSysctl = "/proc/sys/vm/nr_hugepages";
  long before_ = -1;
  std::string why_;
};

}  // namespace kvtier::testing
