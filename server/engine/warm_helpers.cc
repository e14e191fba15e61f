#include "server/engine/warm_helpers.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ktune/v1/warm.pb.h"
#include "server/gpu/framing.h"

namespace ktune {

absl::StatusOr<std::unique_ptr<WarmHelpers>> WarmHelpers::Create(WarmHelperOptions options) {
  if (::access(options.program.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "idle compiles: no helper program at ", options.program, " (", std::strerror(errno),
        "); it is built beside ktune and ktuned as ktune-warm, or named by $KTUNE_WARM"));
  }
  options.max_helpers = std::max(options.max_helpers, 1);
  return std::unique_ptr<WarmHelpers>(new WarmHelpers(std::move(options)));
}

WarmHelpers::~WarmHelpers() { Shutdown(); }

void WarmHelpers::Shutdown() {
  std::vector<PipedChild> idle;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    idle.swap(idle_);
    // A busy helper's Fill sees its pipe close and stops it itself.
    for (pid_t pid : busy_) ::kill(pid, SIGKILL);
  }
  for (const PipedChild& h : idle) Stop(h);
  absl::MutexLock lock(&mu_);
  auto none_live = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return live_ == 0; };
  mu_.Await(absl::Condition(&none_live));
}

int WarmHelpers::started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

absl::Status WarmHelpers::Fill(const CompileRequest& request, const std::string& key,
                               const std::string& identity) {
  absl::StatusOr<PipedChild> taken = Take();
  if (!taken.ok()) return taken.status();
  const PipedChild h = *taken;
  v1::WarmRequest w;
  w.set_key(key);
  w.set_source(request.source);
  w.set_source_name(request.source_name);
  for (const std::string& n : request.name_expressions) w.add_name_expressions(n);
  for (const std::string& o : request.options) w.add_options(o);
  w.set_identity(identity);
  v1::WarmReply reply;
  absl::Status s = WriteFrame(h.to, w);
  if (s.ok()) s = ReadFrame(h.from, &reply, options_.timeout_ms);
  if (!s.ok()) {
    Stop(h);
    return absl::Status(s.code(), absl::StrCat("ktune-warm (pid ", h.pid, "): ", s.message()));
  }
  Give(h);
  if (!reply.error().empty()) {
    return absl::InternalError(absl::StrCat("ktune-warm: ", reply.error()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PipedChild> WarmHelpers::Take() {
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_ || !idle_.empty() || live_ < options_.max_helpers;
    };
    mu_.Await(absl::Condition(&ready));
    if (stopping_) return absl::UnavailableError("idle compiles: shut down");
    if (!idle_.empty()) {
      PipedChild h = idle_.back();
      idle_.pop_back();
      busy_.push_back(h.pid);
      return h;
    }
    ++live_;  // this slot is ours while the helper starts
  }
  absl::StatusOr<PipedChild> h = Start();
  absl::MutexLock lock(&mu_);
  if (!h.ok()) {
    --live_;
    return h.status();
  }
  ++started_;
  busy_.push_back(h->pid);
  if (stopping_) ::kill(h->pid, SIGKILL);  // Shutdown came while it started
  return h;
}

absl::StatusOr<PipedChild> WarmHelpers::Start() {
  PipedChildOptions o;
  o.program = options_.program;
  o.args = {"--cache-dir", options_.cache_dir};
  for (const std::string& dir : options_.include_dirs) {
    o.args.push_back("--include-dir");
    o.args.push_back(dir);
  }
  if (options_.pch) o.args.push_back("--pch");
  absl::StatusOr<PipedChild> child = StartPipedChild(o);
  if (!child.ok()) {
    return absl::Status(child.status().code(),
                        absl::StrCat("idle compiles: ", child.status().message()));
  }
  return child;
}

void WarmHelpers::Give(const PipedChild& h) {
  {
    absl::MutexLock lock(&mu_);
    busy_.erase(std::remove(busy_.begin(), busy_.end(), h.pid), busy_.end());
    if (!stopping_) {
      idle_.push_back(h);
      return;
    }
  }
  Stop(h);
}

void WarmHelpers::Stop(const PipedChild& h) {
  ::close(h.to);
  ::close(h.from);
  ::kill(h.pid, SIGKILL);  // its writes to the cache are whole files renamed into place
  int status = 0;
  while (::waitpid(h.pid, &status, 0) < 0 && errno == EINTR) {
  }
  absl::MutexLock lock(&mu_);
  busy_.erase(std::remove(busy_.begin(), busy_.end(), h.pid), busy_.end());
  --live_;
}

}  // namespace ktune
