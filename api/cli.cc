// kvtier::ParseCommandLine: Abseil flags with a help that lists the
// program's own flags and exits 0. Abseil's builtin --help exits 1 and only
// lists flags from files named like the program ("No flags matched" for
// kvtier-generate, whose flags live in generate_main.cc).
#include "kvtier/cli.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#ifndef KVTIER_VERSION
#define KVTIER_VERSION "unknown"
#endif

namespace kvtier {
namespace {

constexpr size_t kWrapColumn = 80;
constexpr absl::string_view kIndent = "      ";

// A flag is Abseil's own (--flagfile, --helpfull, ...) when a directory of
// its defining file is named "absl"; every other flag linked into a kvtier
// program is defined in that program's sources.
bool IsAbseilFile(absl::string_view file) {
  for (absl::string_view part : absl::StrSplit(file, '/'))
    if (part == "absl") return true;
  return false;
}

absl::string_view Basename(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// The placeholder after "--name=" in the listing.
std::string ValueName(const absl::CommandLineFlag& f) {
  if (f.IsOfType<int32_t>() || f.IsOfType<int64_t>() || f.IsOfType<uint32_t>() ||
      f.IsOfType<uint64_t>() || f.IsOfType<int16_t>() || f.IsOfType<uint16_t>())
    return "N";
  if (f.IsOfType<double>() || f.IsOfType<float>()) return "X";
  if (f.IsOfType<std::string>()) return "STRING";
  if (f.IsOfType<std::vector<std::string>>()) return "A,B,...";
  return "VALUE";
}

// Appends `text` word-wrapped at kWrapColumn, each line after `indent`.
void AppendWrapped(absl::string_view text, absl::string_view indent, std::string* out) {
  size_t column = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (column == 0) {
      absl::StrAppend(out, indent, word);
      column = indent.size() + word.size();
    } else if (column + 1 + word.size() > kWrapColumn) {
      absl::StrAppend(out, "\n", indent, word);
      column = indent.size() + word.size();
    } else {
      absl::StrAppend(out, " ", word);
      column += 1 + word.size();
    }
  }
  out->push_back('\n');
}

// The usage paragraph: prose lines wrapped, indented (synopsis) lines as given.
std::string FormatUsage(absl::string_view program, absl::string_view usage) {
  std::string out;
  bool first = true;
  for (absl::string_view line : absl::StrSplit(usage, '\n')) {
    if (absl::StartsWith(line, " ")) {
      absl::StrAppend(&out, first ? absl::StrCat(program, ":\n") : "", line, "\n");
    } else {
      AppendWrapped(first ? absl::StrCat(program, ": ", line) : std::string(line), "", &out);
    }
    first = false;
  }
  return out;
}

std::string FlagEntry(const absl::CommandLineFlag& f) {
  std::string out;
  if (f.IsOfType<bool>()) {
    absl::StrAppend(&out, "  --[no]", f.Name(), " (default: ", f.DefaultValue(), ")\n");
  } else {
    const std::string def = f.IsOfType<std::string>() ? absl::StrCat("\"", f.DefaultValue(), "\"")
                                                      : f.DefaultValue();
    absl::StrAppend(&out, "  --", f.Name(), "=", ValueName(f), " (default: ", def, ")\n");
  }
  AppendWrapped(f.Help(), kIndent, &out);
  return out;
}

// What the command line asks for before any real work.
struct HelpRequest {
  bool help = false;
  std::string filter;  // --help=SUBSTRING
};

HelpRequest FindHelp(int argc, char* argv[]) {
  HelpRequest r;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view a = argv[i];
    if (a == "--") break;  // everything after is positional
    if (a == "--help" || a == "-help" || a == "-h") {
      r.help = true;
    } else if (absl::StartsWith(a, "--help=") || absl::StartsWith(a, "-help=")) {
      r.help = true;
      r.filter = std::string(a.substr(a.find('=') + 1));
    }
  }
  return r;
}

}  // namespace

std::string HelpText(absl::string_view program, absl::string_view usage,
                     absl::string_view name_filter) {
  // Sorted by name so the listing is stable across builds.
  std::map<std::string, const absl::CommandLineFlag*> own;
  for (const auto& [name, flag] : absl::GetAllFlags())
    if (!IsAbseilFile(flag->Filename()) && absl::StrContains(name, name_filter))
      own.emplace(std::string(name), flag);
  std::string out = absl::StrCat(FormatUsage(program, usage), "\n");
  if (own.empty()) {
    absl::StrAppend(&out, name_filter.empty() ? "No flags.\n"
                                              : absl::StrCat("No flag matches '", name_filter, "'.\n"));
  } else {
    absl::StrAppend(&out, "Flags:\n");
    for (const auto& [name, flag] : own) absl::StrAppend(&out, FlagEntry(*flag));
  }
  absl::StrAppend(&out,
                  "\nAlso: --flagfile=FILE (flags from a file, one per line), --version, "
                  "--helpfull (Abseil's flags too).\n");
  return out;
}

std::vector<std::string> ParseCommandLine(int argc, char* argv[], absl::string_view usage) {
  const std::string program(Basename(argc > 0 ? argv[0] : "kvtier"));
  absl::SetProgramUsageMessage(usage);
  absl::FlagsUsageConfig config;
  // Abseil's own --helpshort/--helpon then also show this program's flags.
  config.contains_help_flags = [](absl::string_view file) { return !IsAbseilFile(file); };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.version_string = [program] { return absl::StrCat(program, " ", KVTIER_VERSION, "\n"); };
  absl::SetFlagsUsageConfig(config);

  const HelpRequest help = FindHelp(argc, argv);
  if (help.help) {
    const std::string text = HelpText(program, usage, help.filter);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    std::exit(0);
  }
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> positional;
  for (size_t i = 1; i < rest.size(); ++i) positional.emplace_back(rest[i]);
  return positional;
}

}  // namespace kvtier
