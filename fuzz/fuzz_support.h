// What the fuzz targets share: the shipped templates' registry, loaded once per process
// from the source tree (KTUNE_SOURCE_DIR), a scratch folder of the process's own, and
// LLVMFuzzerInitialize (include this header from the one file of a target).
//
// Not thread-safe: libFuzzer runs one input at a time.
#ifndef KTUNE_FUZZ_FUZZ_SUPPORT_H_
#define KTUNE_FUZZ_FUZZ_SUPPORT_H_

#include <google/protobuf/stubs/logging.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "server/base/file.h"
#include "server/templates/registry.h"

namespace ktune::fuzz {

// The shipped templates (kernel_templates/); aborts when they do not load, since every
// input would then test nothing.
inline const TemplateRegistry& ShippedRegistry() {
  static const TemplateRegistry* registry = [] {
    absl::StatusOr<std::unique_ptr<TemplateRegistry>> r =
        LoadTemplateRegistry(KTUNE_SOURCE_DIR "/kernel_templates");
    if (!r.ok() || (*r)->templates().empty()) {
      std::fprintf(stderr, "fuzz: the shipped templates do not load\n");
      std::abort();
    }
    return r->release();
  }();
  return *registry;
}

// Drops protobuf's log lines (one per unparsable text or bad UTF-8 string: millions of them
// while fuzzing).
inline void SilenceProtobufLogs() {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int,
                                     const std::string&) {});
}

// A folder for this process's scratch files (in /dev/shm when there is one: faster),
// removed when the process exits normally.
inline const std::string& ScratchDir() {
  // Never freed: the exit handler below still reads it after static destructors ran.
  static const std::string* dir = [] {
    const std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    auto* d = new std::string(base + "/ktune-fuzz-" + std::to_string(getpid()));
    if (!MakeDirs(*d).ok()) std::abort();
    // libFuzzer ends with exit() (time up, or -runs done): the folder goes with the process.
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(ScratchDir(), ignored);
    });
    return d;
  }();
  return *dir;
}

}  // namespace ktune::fuzz

// libFuzzer calls it once before the first input.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ktune::fuzz::SilenceProtobufLogs();
  return 0;
}

#endif  // KTUNE_FUZZ_FUZZ_SUPPORT_H_
