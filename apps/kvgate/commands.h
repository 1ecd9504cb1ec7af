// Registration of kvgate's subcommands; each lives in its own file and sets `exit_code`
// when it runs.
#pragma once

#include <CLI/CLI.hpp>

namespace kvgate::app {

void AddEventsCommand(CLI::App& app, int& exit_code);
void AddHashCommand(CLI::App& app, int& exit_code);
void AddReplayCommand(CLI::App& app, int& exit_code);
void AddMockerCommand(CLI::App& app, int& exit_code);
void AddTokenizeCommand(CLI::App& app, int& exit_code);
void AddTemplateCommand(CLI::App& app, int& exit_code);
void AddServeCommand(CLI::App& app, int& exit_code);
void AddRegisterCommand(CLI::App& app, int& exit_code);

}  // namespace kvgate::app
