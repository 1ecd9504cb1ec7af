// `kvgate template`: render an OpenAI chat request with the model's chat template, exactly
// as the engine would (docs/design.md §10).
#include <fmt/format.h>

#include <boost/json.hpp>
#include <fstream>
#include <iostream>
#include <sstream>

#include "chat/chat_template.h"
#include "commands.h"

namespace kvgate::app {
namespace {

namespace json = boost::json;

struct TemplateFlags {
  std::string model_dir;
  std::string request;
  bool jsonl = false;
};

Status RenderOne(const chat::ChatTemplate& t, std::string_view body, std::string* out) {
  boost::system::error_code ec;
  json::value request = json::parse(body, ec);
  if (ec) return Status::Error(fmt::format("the request is not JSON: {}", ec.message()));
  return t.Render(request, out);
}

int RenderTemplate(const TemplateFlags& f) {
  std::unique_ptr<chat::ChatTemplate> t;
  if (Status s = chat::ChatTemplate::Load(f.model_dir, &t); !s.ok()) {
    std::cerr << "kvgate template: " << s.message() << '\n';
    return 1;
  }
  std::ifstream in(f.request);
  if (!in) {
    std::cerr << "kvgate template: cannot open " << f.request << '\n';
    return 1;
  }
  if (!f.jsonl) {
    std::stringstream body;
    body << in.rdbuf();
    std::string prompt;
    if (Status s = RenderOne(*t, body.str(), &prompt); !s.ok()) {
      std::cerr << "kvgate template: " << s.message() << '\n';
      return 1;
    }
    std::cout << prompt;  // exactly the prompt: no added newline
    return 0;
  }
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::string prompt;
    Status s = RenderOne(*t, line, &prompt);
    std::cout << (s.ok() ? json::serialize(json::value(prompt))
                         : json::serialize(json::object{{"error", s.message()}}))
              << '\n';
  }
  return 0;
}

}  // namespace

void AddTemplateCommand(CLI::App& app, int& exit_code) {
  static TemplateFlags f;
  CLI::App* cmd =
      app.add_subcommand("template", "Render a chat request with the model's chat template");
  cmd->add_option("--model-dir", f.model_dir,
                  "Dir with tokenizer_config.json (chat_template) or chat_template.jinja")
      ->required();
  cmd->add_option("--request", f.request, "OpenAI chat request body (JSON file)")->required();
  cmd->add_flag("--jsonl", f.jsonl, "One request per line in, one JSON string per line out");
  cmd->callback([&exit_code] { exit_code = RenderTemplate(f); });
}

}  // namespace kvgate::app
