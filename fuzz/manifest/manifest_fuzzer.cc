// Fuzzes the manifest loader (LoadKernelTemplate: text format parse, the validator, the
// arity check against the kernel source, the evaluation at the example shape). The input is
// a manifest; it is written as NAME/NAME.textproto beside the shipped NAME.cu, NAME being
// the input's `name: "..."` when it is a shipped template (so a mutated shipped manifest
// reaches the checks after the name), else "fz" with an empty source.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <regex>
#include <string>

#include "fuzz/fuzz_support.h"
#include "server/base/file.h"
#include "server/templates/kernel_template.h"

namespace {

std::string NameOf(const std::string& manifest) {
  static const std::regex name_field(R"re(name\s*:\s*"([a-z_0-9]{1,32})")re");
  std::smatch m;
  if (std::regex_search(manifest, m, name_field) &&
      access((KTUNE_SOURCE_DIR "/kernel_templates/" + m[1].str() + "/" + m[1].str() + ".cu")
                 .c_str(),
             R_OK) == 0) {
    return m[1].str();
  }
  return "fz";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string manifest(reinterpret_cast<const char*>(data), size);
  const std::string name = NameOf(manifest.substr(0, 4096));
  const std::string dir = ktune::fuzz::ScratchDir() + "/" + name;
  static std::string made;  // folders already written with their .cu
  if (made.find("/" + name + "/") == std::string::npos) {
    if (!ktune::MakeDirs(dir).ok()) return 0;
    const std::string cu =
        ktune::ReadFile(KTUNE_SOURCE_DIR "/kernel_templates/" + name + "/" + name + ".cu")
            .value_or("");
    if (!ktune::AtomicWriteFile(dir + "/" + name + ".cu", cu).ok()) return 0;
    made += "/" + name + "/";
  }
  if (!ktune::AtomicWriteFile(dir + "/" + name + ".textproto", manifest).ok()) return 0;
  (void)ktune::LoadKernelTemplate(dir);
  return 0;
}
