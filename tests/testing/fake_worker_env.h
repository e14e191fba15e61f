// The environment under which a ktune, ktuned or bench tool run by a test gets
// fake_ktune_worker (tests/gpu/fake_worker_main.cc) measuring every candidate ok, at a time
// fixed by its name, with no delay. The worker child's environment is scrubbed but for the
// prefixes KTUNE_WORKER_ENV names, so the fake's settings go through that.
#ifndef KTUNE_TESTS_TESTING_FAKE_WORKER_ENV_H_
#define KTUNE_TESTS_TESTING_FAKE_WORKER_ENV_H_

#include <stdlib.h>

namespace ktune::testing {

inline void UseFakeWorkerAllOk() {
  setenv("KTUNE_WORKER_ENV", "FAKE_WORKER_", 1);
  setenv("FAKE_WORKER_ANY_OK", "1", 1);
  unsetenv("FAKE_WORKER_MEASURE_MS");
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_FAKE_WORKER_ENV_H_
