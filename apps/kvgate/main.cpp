// kvgate: a KV-cache-aware gateway for LLM inference fleets. One binary, subcommands.
#include <CLI/CLI.hpp>

#include "commands.h"

int main(int argc, char** argv) {
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
