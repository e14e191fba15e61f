#include "server/base/paths.h"

#include <limits.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "server/base/file.h"

#ifndef KTUNE_SOURCE_TEMPLATES_DIR
#error "KTUNE_SOURCE_TEMPLATES_DIR must be defined by the build"
#endif

namespace ktune {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

std::string ProgramDir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.find_last_of('/'));
}

}  // namespace

std::string DefaultTemplatesDir() {
  if (std::string env = Env("KTUNE_TEMPLATES"); !env.empty()) return env;
  if (std::string dir = ProgramDir(); !dir.empty()) {
    std::string installed = absl::StrCat(dir, "/../share/ktune/kernel_templates");
    if (IsDir(installed)) return installed;
  }
  return KTUNE_SOURCE_TEMPLATES_DIR;
}

std::string DefaultCacheDir() {
  if (std::string xdg = Env("XDG_CACHE_HOME"); !xdg.empty()) return absl::StrCat(xdg, "/ktune");
  if (std::string home = Env("HOME"); !home.empty()) return absl::StrCat(home, "/.cache/ktune");
  return absl::StrCat("/tmp/ktune-", ::getuid());
}

bool IsDefaultKtuneDir(const std::string& dir) {
  if (dir == DefaultCacheDir()) return true;
  const std::string runtime = Env("XDG_RUNTIME_DIR");
  return !runtime.empty() && dir == absl::StrCat(runtime, "/ktune");
}

std::string DefaultDbPath() { return absl::StrCat(DefaultCacheDir(), "/ktune.db"); }

std::string DefaultDaemonTarget() {
  if (std::string env = Env("KTUNE_DAEMON"); !env.empty()) return env;
  if (std::string run = Env("XDG_RUNTIME_DIR"); !run.empty()) {
    return absl::StrCat("unix://", run, "/ktune/ktuned.sock");
  }
  return absl::StrCat("unix://", DefaultCacheDir(), "/ktuned.sock");
}

std::string DefaultWorkerPath() {
  if (std::string env = Env("KTUNE_WORKER"); !env.empty()) return env;
  return absl::StrCat(ProgramDir(), "/ktune-worker");
}

std::string DefaultWarmPath() {
  if (std::string env = Env("KTUNE_WARM"); !env.empty()) return env;
  return absl::StrCat(ProgramDir(), "/ktune-warm");
}

}  // namespace ktune
