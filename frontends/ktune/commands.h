// The `ktune` CLI's subcommands. Each Add*Command registers its flags on `app` and returns
// the function that runs it once the command line is parsed.
//
// Exit statuses, the same for every subcommand: 0 done; 1 the work failed (a compile
// error, an unreadable file); 2 bad input (an unknown template, a missing dim, a param
// outside its values, a malformed flag) with a message saying which.
#ifndef KTUNE_CLIENT_CLI_COMMANDS_H_
#define KTUNE_CLIENT_CLI_COMMANDS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/base/dtype.h"
#include "server/base/knobs.h"
#include "server/templates/registry.h"
#include "server/templates/shape.h"

namespace ktune::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command AddTemplatesCommand(CLI::App& parent);
Command AddCompileCommand(CLI::App& parent);
Command AddTuneCommand(CLI::App& parent);
// `ktune get`: GetKernel from ktuned (client/lib).
Command AddGetCommand(CLI::App& parent);
// `ktune cache`: ls, show, stats, export, import, prune, diff, report on the SQLite store.
Command AddCacheCommand(CLI::App& parent);

// Loads the templates under `dir` ("" = the default), warning on stderr about each one
// that did not load. kNotFound if the folder cannot be read.
absl::StatusOr<std::unique_ptr<TemplateRegistry>> LoadRegistryOrWarn(const std::string& dir);

// The --dtype flag: kInvalidArgument naming the flag for anything but f32, f16, bf16, f8e4m3, f8e5m2.
absl::StatusOr<DType> ParseDTypeFlag(const std::string& dtype);

// A template, dtype and shape named on the command line, checked against each other.
struct TemplateRequest {
  std::unique_ptr<TemplateRegistry> registry;
  std::shared_ptr<const KernelTemplate> tmpl;
  DType dtype = DType::kF32;
  Shape shape;
};

// Loads the registry (as LoadRegistryOrWarn) and checks the template name, the --dtype and
// the --shape; kInvalidArgument/kNotFound naming the flag or dim otherwise.
absl::StatusOr<TemplateRequest> ResolveTemplateRequest(const std::string& templates_dir,
                                                       const std::string& template_name,
                                                       const std::string& dtype,
                                                       const std::string& shape);

// Prints "ktune: <message>" to stderr and returns the exit status for `status`:
// kExitUsage for caller mistakes (invalid argument, not found, out of range), else
// kExitFailure.
int Fail(const absl::Status& status);

// A config as the CLI's tables print it: params "BLOCK=256,VEC=4"; knobs "sm_90a rreg64
// minb2 fast" with the defaults (no register cap, one block, no fast math) left out; a time
// in ns as microseconds, "12.35".
std::string ParamsText(const std::map<std::string, int64_t>& params);
std::string KnobsText(const std::string& target, int64_t maxrregcount, int64_t min_blocks,
                      bool fast_math);
std::string KnobsText(const Knobs& knobs);
std::string Us(double ns);

}  // namespace ktune::cli

#endif  // KTUNE_CLIENT_CLI_COMMANDS_H_
