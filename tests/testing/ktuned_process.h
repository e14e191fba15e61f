// One ktuned process for a test (tests/testing/subprocess.h), its output in `dir`, with a wait
// for its listener.
#ifndef KTUNE_TESTS_TESTING_KTUNED_PROCESS_H_
#define KTUNE_TESTS_TESTING_KTUNED_PROCESS_H_

#include <signal.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testing/subprocess.h"

namespace ktune::testing {

class Ktuned : public Subprocess {
 public:
  Ktuned(const std::string& dir, const std::vector<std::string>& args)
      : Subprocess(KTUNE_BINARY_DIR "/bin/ktuned", args, dir) {}
  // The same under `/bin/sh -c 'ulimit LIMITS && exec ktuned ARGS'` (same pid), e.g. "-n 64"
  // (soft and hard open files limit) or "-Sn 256" (the soft one only).
  Ktuned(const std::string& dir, const std::vector<std::string>& args, const std::string& ulimit)
      : Subprocess("/bin/sh", UnderUlimit(args, ulimit), dir) {}
  void Terminate() { Signal(SIGTERM); }

  // Waits until stderr says "serving on ..." (it is printed once the listener is up);
  // returns the rest of that line ("" on timeout or exit).
  std::string WaitServing(absl::Duration timeout = absl::Seconds(30)) {
    const absl::Time end = absl::Now() + timeout;
    while (absl::Now() < end && Running()) {
      const std::string err = Stderr();
      const size_t at = err.find("serving on ");
      if (at != std::string::npos && err.find('\n', at) != std::string::npos) {
        return err.substr(at + 11, err.find('\n', at) - at - 11);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return "";
  }

 private:
  static std::vector<std::string> UnderUlimit(const std::vector<std::string>& args,
                                              const std::string& ulimit) {
    std::vector<std::string> sh = {"-c", "ulimit " + ulimit + " && exec \"$0\" \"$@\"",
                                   KTUNE_BINARY_DIR "/bin/ktuned"};
    sh.insert(sh.end(), args.begin(), args.end());
    return sh;
  }
};

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_KTUNED_PROCESS_H_
