// The one command-line entry point of every kvtier program: Abseil flags
// parsing plus a `--help`/`-h` that prints the program's usage and its own
// flags (not Abseil's) on stdout and exits 0, and a `--version`.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvtier {

// Parses argv with absl::ParseCommandLine after setting `usage` as the
// program's usage message. `usage` is one paragraph: what the program does
// and its synopsis; it may span lines.
//
// `--help`, `-help` and `-h` (anywhere before a `--`) print `usage` and every
// flag not defined by Abseil itself — in our programs, the flags of the
// program's own sources — with its default and help text, then exit 0;
// `--help=SUBSTRING` lists only the flags whose name contains SUBSTRING.
// `--version` prints "<program> <kvtier version>" and exits 0. Abseil's other
// flags (`--flagfile`, `--fromenv`, `--helpfull`, ...) work as usual; a bad
// flag prints Abseil's error and exits 1, as before.
//
// Returns the positional arguments, without argv[0]. Call once, first thing
// in main(); not thread-safe.
std::vector<std::string> ParseCommandLine(int argc, char* argv[], absl::string_view usage);

// The text `--help` prints (usage + own flags), for tests and for programs
// that print it on a usage error. `name_filter` keeps flags whose name
// contains it (empty: all).
std::string HelpText(absl::string_view program, absl::string_view usage,
                     absl::string_view name_filter = "");

}  // namespace kvtier
