// ktune: the command-line tool (templates, compile, tune, get).
#include <iostream>
#include <vector>

#include "CLI/CLI.hpp"
#include "frontends/ktune/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"ktune: autotuned CUDA kernels, compiled with NVRTC"};
  app.require_subcommand(1);
  std::vector<ktune::cli::Command> commands = {ktune::cli::AddTemplatesCommand(app),
                                               ktune::cli::AddCompileCommand(app),
                                               ktune::cli::AddTuneCommand(app),
                                               ktune::cli::AddGetCommand(app),
                                               ktune::cli::AddCacheCommand(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 has its own exit codes per parse error; ktune keeps one: 2 for bad usage.
    const int code = app.exit(e);
    return code == 0 ? 0 : ktune::cli::kExitUsage;
  }
  for (const ktune::cli::Command& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  return ktune::cli::kExitUsage;
}
