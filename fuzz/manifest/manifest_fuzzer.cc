// Fuzzes the manifest loader (LoadKernelTemplate: text format parse, the validator, the
// arity check against the kernel source, the evaluation at the example shape). The input is
// a manifest; it is written as NAME/NAME.textproto beside the shipped NAME.cu, NAME being
// the input's `name: "..."` when it is a shipped template (so a mutated shipped manifest
// reaches the checks after the name), else "fz" with an empty source.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>

#include "fuzz/fuzz_support.h"
#include "server/base/file.h"
#include "server/templates/kernel_template.h"

namespace {

// NAME has a shipped NAME/NAME.cu. The folders are listed once: they do not change while
// the fuzzer runs, and a file system call per input was a cost of its own.
bool IsShipped(const std::string& name) {
  static const std::set<std::string>* shipped = [] {
    auto* names = new std::set<std::string>;
    std::error_code ignored;
    for (const auto& entry :
         std::filesystem::directory_iterator(KTUNE_SOURCE_DIR "/kernel_templates", ignored)) {
      const std::string n = entry.path().filename().string();
      if (access((entry.path() / (n + ".cu")).c_str(), R_OK) == 0) names->insert(n);
    }
    return names;
  }();
  return shipped->count(name) != 0;
}

// The first `name\s*:\s*"([a-z_0-9]{1,32})"` in `text`, or "". A scan, not std::regex:
// the regex, instrumented with the harness, took most of each execution and swelled the
// coverage libFuzzer tracks with its own branches.
std::string FirstNameField(const std::string& text) {
  auto is_name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || c == '_' || (c >= '0' && c <= '9');
  };
  for (size_t at = text.find("name"); at != std::string::npos; at = text.find("name", at + 1)) {
    size_t i = at + 4;
    auto skip_space = [&] {  // \s: space, \t \n \v \f \r
      while (i < text.size() && (text[i] == ' ' || (text[i] >= '\t' && text[i] <= '\r'))) ++i;
    };
    skip_space();
    if (i >= text.size() || text[i] != ':') continue;
    ++i;
    skip_space();
    if (i >= text.size() || text[i] != '"') continue;
    const size_t begin = ++i;
    while (i < text.size() && i - begin < 33 && is_name_char(text[i])) ++i;
    const size_t length = i - begin;
    if (length >= 1 && length <= 32 && i < text.size() && text[i] == '"') {
      return text.substr(begin, length);
    }
  }
  return "";
}

std::string NameOf(const std::string& manifest) {
  const std::string name = FirstNameField(manifest);
  return !name.empty() && IsShipped(name) ? name : "fz";
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
