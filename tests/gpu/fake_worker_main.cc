// fake_ktune_worker: a test-only stand-in for ktune-worker that speaks worker.proto over
// stdin/stdout with scripted behaviour, so the parent side (process_gpu.cc) is tested in CI
// without a GPU.
//
// MeasureCandidate: the fate is chosen by the candidate's first launch's lowered_name:
//   ok | ok_<ns>     outcome ok, time_ns <ns> (default 1000)
//   slow_<ms>        sleeps <ms>, then ok
//   hang             sleeps forever (an endless kernel)
//   hang_child       forks a child that sleeps forever (its pid to $FAKE_WORKER_PID_FILE),
//                    then hangs: killing the process group must end both
//   crash            abort(): SIGABRT, no answer
//   exit             exit(1), no answer
//   poison           answers outcome "crashed", then exit(3) (poisoned context)
//   poison_silent    answers outcome "launch_failed", then exit(3): the parent must not
//                    blame the next candidate for the exit
//   poison_late      answers outcome "launch_failed", then exit(3) on reading the next
//                    request, without answering it (the worker was already leaving)
//   garbage          answers a frame whose bytes don't parse as a Response
//   error            answers WorkerError INVALID_ARGUMENT, keeps running
//   error_poisoned   answers WorkerError INTERNAL with poisoned set, then exit(3)
//   wrong            outcome wrong_result
// SetProblem: the reference's first launch's lowered_name "hang" sleeps forever, "fault"
// answers a poisoned WorkerError and exits 3; anything else answers ProblemReady with
// reference_time_ns 5000 and an output digest of the seed (and of the contents of
// $FAKE_WORKER_SALT_FILE when it exists, so a restarted worker can be made to disagree).
//
// Environment:
//   FAKE_WORKER_NO_DRIVER=1        Hello answers WorkerError UNAVAILABLE "no CUDA driver: ..."
//   FAKE_WORKER_HELLO_DELAY_MS=N   sleeps N ms before answering Hello
//   FAKE_WORKER_IGNORE_EOF=1       on end of stdin, hangs instead of exiting
//   FAKE_WORKER_ANY_OK=1           a name without a script (a real compile's mangled name)
//                                  measures ok, 1000-1999 ns by a hash of the name
//   FAKE_WORKER_MEASURE_MS=N       with FAKE_WORKER_ANY_OK, sleeps N ms per such measurement
//   FAKE_WORKER_LOG=path           appends "<pid> <request>" per request (hello,
//                                  ceiling, set_problem <seed>, measure <name>, the latter
//                                  followed by " min_sample_us=<us>" when the request sets it
//                                  and " skip_check" when it asks for no output check)
#include <signal.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "ktune/v1/worker.pb.h"
#include "server/gpu/framing.h"

namespace {

using ktune::v1::Request;
using ktune::v1::Response;

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// Set by poison_late: the next request finds a worker on its way out.
bool exit_on_next_request = false;

[[noreturn]] void SleepForever() {
  for (;;) ::pause();
}

void Log(const std::string& line) {
  const char* path = Env("FAKE_WORKER_LOG");
  if (path == nullptr) return;
  std::ofstream out(path, std::ios::app);
  out << ::getpid() << " " << line << "\n";
}

std::string ReadFileOrEmpty(const char* path) {
  if (path == nullptr) return "";
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// FNV-1a, hex: stable across processes, which is all the fake digest needs.
std::string Digest(uint64_t seed, const std::string& salt) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](unsigned char c) {
    h ^= c;
    h *= 1099511628211ull;
  };
  for (int i = 0; i < 8; ++i) mix(static_cast<unsigned char>(seed >> (8 * i)));
  for (char c : salt) mix(static_cast<unsigned char>(c));
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void Send(const Response& response) {
  if (!ktune::WriteFrame(STDOUT_FILENO, response).ok()) std::_Exit(4);
}

std::string FirstName(const ktune::v1::KernelBinary& k) {
  return k.launches_size() > 0 ? k.launches(0).lowered_name() : "";
}

Response Ok(double time_ns) {
  Response r;
  ktune::v1::Measurement* m = r.mutable_measurement();
  m->set_outcome("ok");
  m->set_time_ns(time_ns);
  m->set_spread_ns(time_ns / 100);
  m->set_repeats(10);
  m->set_batch(1);
  m->set_l2_flushed(true);
  m->set_registers(32);
  m->set_blocks_per_sm(8);
  m->set_occupancy(0.5);
  m->set_waves(1.0);
  return r;
}

void Measure(const ktune::v1::MeasureCandidate& request) {
  const std::string name = FirstName(request.candidate());
  Log(absl::StrCat("measure ", name,
                   request.timing().min_sample_us() > 0
                       ? absl::StrCat(" min_sample_us=", request.timing().min_sample_us())
                       : "",
                   request.skip_check() ? " skip_check" : ""));
  int64_t n = 0;
  if (name == "ok") {
    Send(Ok(1000));
  } else if (absl::StartsWith(name, "ok_") && absl::SimpleAtoi(name.substr(3), &n)) {
    Send(Ok(static_cast<double>(n)));
  } else if (absl::StartsWith(name, "slow_") && absl::SimpleAtoi(name.substr(5), &n)) {
    ::usleep(static_cast<useconds_t>(n * 1000));
    Send(Ok(1000));
  } else if (name == "hang") {
    SleepForever();
  } else if (name == "hang_child") {
    pid_t child = ::fork();
    if (child == 0) SleepForever();
    if (const char* path = Env("FAKE_WORKER_PID_FILE")) {
      std::ofstream(path) << child << "\n";
    }
    SleepForever();
  } else if (name == "crash") {
    std::abort();
  } else if (name == "exit") {
    std::exit(1);
  } else if (name == "poison_late") {
    Response r;
    r.mutable_measurement()->set_outcome("launch_failed");
    r.mutable_measurement()->set_detail("CUDA_ERROR_LAUNCH_FAILED");
    Send(r);
    exit_on_next_request = true;
  } else if (name == "poison" || name == "poison_silent") {
    Response r;
    ktune::v1::Measurement* m = r.mutable_measurement();
    m->set_outcome(name == "poison" ? "crashed" : "launch_failed");
    m->set_detail("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered");
    Send(r);
    std::exit(3);
  } else if (name == "garbage") {
    const unsigned char frame[] = {5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff};
    if (::write(STDOUT_FILENO, frame, sizeof(frame)) != sizeof(frame)) std::_Exit(4);
  } else if (name == "error") {
    Response r;
    r.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
    r.mutable_error()->set_message("launch 0 names argument 7 of 2");
    Send(r);
  } else if (name == "error_poisoned") {
    Response r;
    r.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kInternal));
    r.mutable_error()->set_message("cuMemcpyDtoH: CUDA_ERROR_LAUNCH_FAILED");
    r.mutable_error()->set_poisoned(true);
    Send(r);
    std::exit(3);
  } else if (name == "wrong") {
    Response r;
    r.mutable_measurement()->set_outcome("wrong_result");
    r.mutable_measurement()->set_detail("out[3] = 1.5, reference 2.5");
    r.mutable_measurement()->set_mismatches(1);
    Send(r);
  } else if (Env("FAKE_WORKER_ANY_OK") != nullptr) {
    // A real compiler's mangled names: ok, at a time that differs per candidate but is the
    // same on every run, so a winner is reproducible.
    if (const char* delay = Env("FAKE_WORKER_MEASURE_MS"); delay != nullptr) {
      ::usleep(static_cast<useconds_t>(std::atoi(delay) * 1000));
    }
    Send(Ok(1000.0 + static_cast<double>(std::hash<std::string>{}(name) % 1000)));
  } else {
    Response r;
    r.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
    r.mutable_error()->set_message(absl::StrCat("fake worker has no script for '", name, "'"));
    Send(r);
  }
}

void SetProblem(const ktune::v1::Problem& problem) {
  const std::string name = FirstName(problem.reference());
  Log(absl::StrCat("set_problem ", problem.seed()));
  if (name == "hang") SleepForever();
  Response r;
  if (name == "fault") {
    r.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kInternal));
    r.mutable_error()->set_message("reference faulted: CUDA_ERROR_ILLEGAL_ADDRESS");
    r.mutable_error()->set_poisoned(true);
    Send(r);
    std::exit(3);
  }
  r.mutable_problem_ready()->set_reference_time_ns(5000);
  r.mutable_problem_ready()->set_output_digest(
      Digest(problem.seed(), ReadFileOrEmpty(Env("FAKE_WORKER_SALT_FILE"))));
  Send(r);
}

// A GPU fallen off the bus: once FAKE_WORKER_DIE_ORDINAL's worker has died (below), every
// worker started for it finds no driver, as on a host whose GPU is gone.
bool GpuLost(int ordinal) {
  const char* die = Env("FAKE_WORKER_DIE_ORDINAL");
  const char* mark = Env("FAKE_WORKER_DIE_MARK");
  return die != nullptr && mark != nullptr && std::atoi(die) == ordinal &&
         ::access(mark, F_OK) == 0;
}

void Hello(const ktune::v1::Hello& hello, int ordinal) {
  Log("hello");
  if (const char* delay = Env("FAKE_WORKER_HELLO_DELAY_MS")) ::usleep(std::atoi(delay) * 1000);
  Response r;
  if (Env("FAKE_WORKER_NO_DRIVER") || GpuLost(ordinal)) {
    r.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kUnavailable));
    r.mutable_error()->set_message(
        "no CUDA driver: libcuda.so.1: cannot open shared object file: No such file or "
        "directory");
    Send(r);
    return;
  }
  ktune::v1::DeviceInfo* d = r.mutable_device();
  d->set_ordinal(ordinal);
  d->set_name("Fake GPU");
  d->set_cc_major(9);
  d->set_cc_minor(0);
  d->set_sm_count(4);
  d->set_l2_bytes(4 << 20);
  d->set_memory_bus_bits(256);
  d->set_memory_clock_khz(1000000);
  d->set_total_memory_bytes(int64_t{1} << 30);
  d->set_max_threads_per_sm(2048);
  d->set_max_threads_per_block(1024);
  d->set_max_shared_per_block_optin(227 << 10);
  d->set_registers_per_sm(65536);
  d->set_uuid(absl::StrCat("GPU-fake-", ordinal));
  d->set_driver_version("13.0");
  if (hello.ordinal() != ordinal) d->set_name("Fake GPU (Hello and --ordinal disagree)");
  Send(r);
}

}  // namespace

int main(int argc, char** argv) {
  int ordinal = -1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--ordinal") == 0) ordinal = std::atoi(argv[i + 1]);
  }
  if (ordinal < 0) {
    std::fprintf(stderr, "fake_ktune_worker: --ordinal N is required\n");
    return 2;
  }
  if (const char* path = Env("FAKE_WORKER_ENV_TO")) {
    // Its environment, one NAME=VALUE a line.
    if (FILE* f = std::fopen(path, "w")) {
      for (char** e = environ; *e != nullptr; ++e) std::fprintf(f, "%s\n", *e);
      std::fclose(f);
    }
  }
  if (const char* path = Env("FAKE_WORKER_FDS")) {
    // The descriptors it was started with, one number a line (read before opening any).
    std::string fds;
    if (DIR* d = ::opendir("/proc/self/fd")) {
      const int own = ::dirfd(d);
      while (const struct dirent* e = ::readdir(d)) {
        if (e->d_name[0] != '.' && std::atoi(e->d_name) != own) {
          fds += std::string(e->d_name) + "\n";
        }
      }
      ::closedir(d);
    }
    if (FILE* f = std::fopen(path, "w")) {
      std::fputs(fds.c_str(), f);
      std::fclose(f);
    }
  }
  for (;;) {
    Request request;
    absl::Status s = ktune::ReadFrame(STDIN_FILENO, &request, -1);
    if (!s.ok()) {
      if (absl::IsUnavailable(s)) {
        if (Env("FAKE_WORKER_IGNORE_EOF")) SleepForever();
        return 0;
      }
      std::fprintf(stderr, "fake_ktune_worker: %s\n", s.ToString().c_str());
      return 2;
    }
    if (exit_on_next_request) std::exit(3);
    switch (request.kind_case()) {
      case Request::kHello:
        Hello(request.hello(), ordinal);
        break;
      case Request::kCeiling: {
        Log("ceiling");
        Response r;
        r.mutable_ceiling()->set_copy_gbps(1000);
        r.mutable_ceiling()->set_spread_gbps(5);
        Send(r);
        break;
      }
      case Request::kSetProblem:
        SetProblem(request.set_problem());
        break;
      case Request::kMeasure: {
        // A GPU lost mid-job: the worker of FAKE_WORKER_DIE_ORDINAL exits after
        // FAKE_WORKER_DIE_AFTER measurements, leaving FAKE_WORKER_DIE_MARK behind (GpuLost).
        static int measures = 0;
        const char* die = Env("FAKE_WORKER_DIE_ORDINAL");
        const char* after = Env("FAKE_WORKER_DIE_AFTER");
        if (die != nullptr && std::atoi(die) == ordinal &&
            ++measures > (after != nullptr ? std::atoi(after) : 0)) {
          Log(absl::StrCat("dying on GPU ", ordinal));
          if (const char* mark = Env("FAKE_WORKER_DIE_MARK")) std::ofstream(mark) << "lost\n";
          std::exit(4);
        }
        Log(absl::StrCat("gpu ", ordinal));
        Measure(request.measure());
        break;
      }
      case Request::KIND_NOT_SET: {
        Response r;
        r.mutable_error()->set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
        r.mutable_error()->set_message("empty Request");
        Send(r);
        break;
      }
    }
  }
}
