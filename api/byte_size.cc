// Byte-size parsing (see kvtier/byte_size.h).
#include "kvtier/byte_size.h"

#include <cctype>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvtier {

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  double number = 0;
  if (i == 0 || !absl::SimpleAtod(s.substr(0, i), &number) || number < 0)
    return absl::InvalidArgumentError(absl::StrCat("not a byte size: '", text, "'"));
  const std::string unit = s.substr(i);
  uint64_t mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mult = 1ull << 10;
  else if (unit == "m" || unit == "mb" || unit == "mib") mult = 1ull << 20;
  else if (unit == "g" || unit == "gb" || unit == "gib") mult = 1ull << 30;
  else if (unit == "t" || unit == "tb" || unit == "tib") mult = 1ull << 40;
  else return absl::InvalidArgumentError(absl::StrCat("unknown size unit in '", text, "'"));
  const double bytes = number * double(mult);
  if (bytes > 9.0e18) return absl::InvalidArgumentError(absl::StrCat("size too large: '", text, "'"));
  return static_cast<uint64_t>(bytes);
}

}  // namespace kvtier
