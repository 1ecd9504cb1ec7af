// GET /dashboard (docs/design.md §15): one self-contained page (HTML, CSS and script; no
// external assets), embedded in the binary at build time from gateway/dashboard.html. It
// polls the admin API and /metrics and draws the rest in the browser.
#pragma once

#include <string_view>

namespace kvgate::gateway {

std::string_view DashboardHtml();

}  // namespace kvgate::gateway
