// What a worker does in disaggregated serving (docs/design.md §12): its record's `role`, and
// the part a simulated engine plays. Header-only, so the mocker shares it without linking
// discovery.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kvgate::discovery {

enum class WorkerRole : uint8_t { kBoth, kPrefill, kDecode };

inline constexpr std::string_view kRoleNames[] = {"both", "prefill", "decode"};

inline std::string_view RoleName(WorkerRole role) { return kRoleNames[static_cast<size_t>(role)]; }

inline std::optional<WorkerRole> ParseRole(std::string_view name) {
  for (size_t i = 0; i < std::size(kRoleNames); ++i) {
    if (kRoleNames[i] == name) return static_cast<WorkerRole>(i);
  }
  return std::nullopt;
}

}  // namespace kvgate::discovery
