// Routing capacity as serving papers measure it: the highest arrival speed-up at which a
// run still meets its latency objective, found by bracketing (doubling or halving) and then
// bisecting on a log scale. The search only asks "does this speed meet the objective?".
#pragma once

#include <functional>

namespace kvgate::replay {

struct CapacitySearch {
  double start = 1;         // the first speed tried
  double precision = 0.02;  // stop when the failing speed is within 2% of the passing one
  double min_speed = 1.0 / 1024;
  double max_speed = 1024;
};

struct Capacity {
  double speed = 0;        // the highest speed seen to meet the objective; 0: none did
  double exceeded_at = 0;  // the lowest speed seen to miss it above `speed`; 0: none did
  int runs = 0;
};

// `meets(speed)` runs the workload at `speed` and says whether it met the objective.
Capacity FindCapacity(const std::function<bool(double speed)>& meets, const CapacitySearch& search);

}  // namespace kvgate::replay
