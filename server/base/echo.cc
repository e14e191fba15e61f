#include "server/base/echo.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace ktune {

std::string Echo(absl::string_view input, size_t max) {
  if (input.size() <= max) return absl::StrCat("'", absl::CHexEscape(input), "'");
  return absl::StrCat("'", absl::CHexEscape(input.substr(0, max)), "...' (", input.size(),
                      " bytes)");
}

std::string Clip(absl::string_view text, size_t max) {
  if (text.size() <= max) return std::string(text);
  return absl::StrCat(text.substr(0, max), "\n[... ", text.size() - max, " more bytes]");
}

}  // namespace ktune
