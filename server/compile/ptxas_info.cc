#include "server/compile/ptxas_info.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ktune {
namespace {

// The text between the first pair of single quotes at or after `from`; "" if none.
absl::string_view Quoted(absl::string_view line, size_t from) {
  const size_t open = line.find('\'', from);
  if (open == absl::string_view::npos) return "";
  const size_t close = line.find('\'', open + 1);
  if (close == absl::string_view::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

// Sets the field named by one comma-separated piece of a resource line, such as
// "ptxas info    : Used 29 registers", "used 1 barriers", "400 bytes cmem[0]" or
// "ptxas         .     8 bytes stack frame": the first number whose following words are a
// known unit. Pieces with no known unit ("4 bytes cmem[2]", "0 bytes gmem") change nothing.
void ApplyField(absl::string_view piece, KernelResources* k) {
  const std::vector<absl::string_view> words =
      absl::StrSplit(piece, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    int64_t value;
    if (!absl::SimpleAtoi(words[i], &value)) continue;
    const std::string unit = absl::StrJoin(words.begin() + i + 1, words.end(), " ");
    static constexpr struct {
      absl::string_view unit;
      int64_t KernelResources::*field;
    } kUnits[] = {
        {"registers", &KernelResources::registers},
        {"register", &KernelResources::registers},
        {"barriers", &KernelResources::barriers},
        {"barrier", &KernelResources::barriers},
        {"bytes smem", &KernelResources::static_smem},
        {"bytes cmem[0]", &KernelResources::const_bytes},
        {"bytes lmem", &KernelResources::local_bytes},
        {"bytes stack frame", &KernelResources::stack_frame},
        {"bytes spill stores", &KernelResources::spill_stores},
        {"bytes spill loads", &KernelResources::spill_loads},
    };
    for (const auto& u : kUnits) {
      if (unit == u.unit) {
        k->*u.field = value;
        return;
      }
    }
  }
}

void ApplyFields(absl::string_view line, KernelResources* k) {
  for (absl::string_view piece : absl::StrSplit(line, ',')) ApplyField(piece, k);
}

}  // namespace

std::vector<KernelResources> ParsePtxasInfo(absl::string_view log) {
  std::vector<KernelResources> out;
  // The function the last "Function properties for" line named, since the current entry
  // began. Non-inlined device functions get their own block (stack frame, spills and, with
  // -rdc, a "Compile time"), printed after the entry's (CUDA 13.0); those figures must not
  // land on the kernel.
  std::string properties_of;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    line = absl::StripTrailingAsciiWhitespace(line);  // also "\r" of a CRLF log

    static constexpr absl::string_view kEntry = "Compiling entry function";
    if (const size_t at = line.find(kEntry); at != absl::string_view::npos) {
      KernelResources k;
      const size_t name_at = at + kEntry.size();
      k.mangled_name = std::string(Quoted(line, name_at));
      const size_t for_at = line.find(" for ", name_at + k.mangled_name.size());
      if (for_at != absl::string_view::npos) k.arch = std::string(Quoted(line, for_at));
      out.push_back(std::move(k));
      properties_of.clear();
      continue;
    }
    if (out.empty()) continue;  // "bytes gmem", front-end warnings, ...
    KernelResources& k = out.back();
    const bool about_kernel = properties_of.empty() || properties_of == k.mangled_name;

    static constexpr absl::string_view kProperties = "Function properties for";
    if (const size_t at = line.find(kProperties); at != absl::string_view::npos) {
      absl::string_view name = absl::StripAsciiWhitespace(line.substr(at + kProperties.size()));
      if (name.size() >= 2 && name.front() == '\'' && name.back() == '\'') {
        name = name.substr(1, name.size() - 2);
      }
      properties_of = std::string(name);
      continue;
    }
    if (line.find("bytes stack frame") != absl::string_view::npos ||
        line.find("bytes spill") != absl::string_view::npos) {
      if (about_kernel) ApplyFields(line, &k);
      continue;
    }
    if (line.find("ptxas") != absl::string_view::npos &&
        line.find(": Used ") != absl::string_view::npos) {
      if (about_kernel) ApplyFields(line, &k);
      continue;
    }
    static constexpr absl::string_view kTime = "Compile time =";
    if (const size_t at = line.find(kTime); at != absl::string_view::npos && about_kernel) {
      absl::string_view rest = absl::StripAsciiWhitespace(line.substr(at + kTime.size()));
      if (absl::ConsumeSuffix(&rest, "ms")) {
        double ms;
        if (absl::SimpleAtod(absl::StripAsciiWhitespace(rest), &ms)) k.ptxas_ms = ms;
      }
    }
  }
  return out;
}

}  // namespace ktune
