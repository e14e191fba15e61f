#include "server/compile/cache_key.h"

#include "absl/strings/str_cat.h"

namespace ktune {

std::string CompileCacheKey(const CompileRequest& request, absl::string_view compiler_identity) {
  return CompileCacheKeyer(request.source_name, request.source)
      .Key(request.name_expressions, request.options, compiler_identity);
}

CompileCacheKeyer::CompileCacheKeyer(absl::string_view source_name, absl::string_view source) {
  // The name is in too: device assert() embeds __FILE__ in the binary.
  source_.AddField(kCompileKeyVersion).AddField(source_name).AddField(source);
}

std::string CompileCacheKeyer::Key(const std::vector<std::string>& name_expressions,
                                   const std::vector<std::string>& options,
                                   absl::string_view compiler_identity) const {
  Sha256Builder h = source_;
  // Counts keep list boundaries unambiguous: ("a","b") names vs one name "a" + option "b".
  h.AddField(absl::StrCat(name_expressions.size()));
  for (const std::string& n : name_expressions) h.AddField(n);
  h.AddField(absl::StrCat(options.size()));
  for (const std::string& o : options) h.AddField(o);
  h.AddField(compiler_identity);
  return h.Finish();
}

}  // namespace ktune
