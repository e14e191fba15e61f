// `ktune tune --spec FILE`: every key of a tuning spec (server/tuning/tuning_spec.h) tuned
// in this process on the local GPU, or by a running ktuned (--daemon), skipping keys with a
// fresh entry; a progress display per spec and per job; a summary table (or --json).
//
// Resumable: each finished key is an entry in the store, found fresh and skipped on the
// next run; a killed job resumes from its recorded trials (server/tuning/tuning_job.h).
//
// Exit status: 0 every key tuned or fresh; 1 some key failed (the others still ran, the
// summary says which) or the GPU, store or daemon could not be used; 2 a bad spec or flag,
// before anything is tuned.
#ifndef KTUNE_CLIENT_CLI_SPEC_TUNE_H_
#define KTUNE_CLIENT_CLI_SPEC_TUNE_H_

#include <string>
#include <vector>

#include "frontends/ktune/local_tuning.h"

namespace ktune::cli {

struct SpecTuneArgs {
  std::string file;    // the spec
  std::string daemon;  // empty: tune in this process
  std::string token;   // the daemon's bearer token
  bool json = false;
  bool force = false;  // re-tune keys that have a fresh entry
  std::vector<std::string> only;  // tune only the keys of these templates (empty: all)
  std::vector<std::string> skip;  // and none of these
  TuneJobFlags job;    // each key's job, as `ktune tune`'s
};

int RunSpecTune(const SpecTuneArgs& args);

}  // namespace ktune::cli

#endif  // KTUNE_CLIENT_CLI_SPEC_TUNE_H_
