#include "server/compile/cache_key.h"

#include "absl/strings/str_cat.h"
#include "server/base/sha256.h"

namespace ktune {

std::string CompileCacheKey(const CompileRequest& request, absl::string_view compiler_identity) {
  Sha256Builder h;
  // The name is in too: device assert() embeds __FILE__ in the binary.
  h.AddField(kCompileKeyVersion).AddField(request.source_name).AddField(request.source);
  // Counts keep list boundaries unambiguous: ("a","b") names vs one name "a" + option "b".
  h.AddField(absl::StrCat(request.name_expressions.size()));
  for (const std::string& n : request.name_expressions) h.AddField(n);
  h.AddField(absl::StrCat(request.options.size()));
  for (const std::string& o : request.options) h.AddField(o);
  h.AddField(compiler_identity);
  return h.Finish();
}

}  // namespace ktune
