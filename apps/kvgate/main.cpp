// kvgate: a KV-cache-aware gateway for LLM inference fleets. One binary, subcommands.
#include <execinfo.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>

#include "commands.h"
#include "common/malloc_tuning.h"

namespace {

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)  // they report better
// A crash leaves its stack in the log (addresses resolve with `addr2line -e kvgate`), then
// ends the process as the signal would have.
void ReportCrash(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  constexpr char kHead[] = "kvgate: fatal signal; stack:\n";
  (void)!write(STDERR_FILENO, kHead, sizeof(kHead) - 1);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void ReportCrashes() {
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, ReportCrash);
}
#else
void ReportCrashes() {}
#endif

}  // namespace

int main(int argc, char** argv) {
  ReportCrashes();
  kvgate::KeepLargeBlocksInHeap();
  CLI::App app{"kvgate: KV-cache-aware gateway for LLM inference fleets (vLLM, SGLang)"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  int exit_code = 0;
  kvgate::app::AddEventsCommand(app, exit_code);
  kvgate::app::AddHashCommand(app, exit_code);
  kvgate::app::AddMockerCommand(app, exit_code);
  kvgate::app::AddReplayCommand(app, exit_code);
  kvgate::app::AddTokenizeCommand(app, exit_code);
  kvgate::app::AddTemplateCommand(app, exit_code);
  kvgate::app::AddServeCommand(app, exit_code);
  kvgate::app::AddRegisterCommand(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the error and usage
    return 2;
  }
  return exit_code;
}
