#include "replay/capacity.h"

#include <cmath>

namespace kvgate::replay {

Capacity FindCapacity(const std::function<bool(double)>& meets, const CapacitySearch& search) {
  Capacity c;
  auto try_speed = [&](double speed) {
    ++c.runs;
    return meets(speed);
  };
  double lo = 0, hi = 0;  // lo meets, hi does not (0: not found yet)
  double speed = search.start;
  if (try_speed(speed)) {
    lo = speed;
    while (speed < search.max_speed) {
      speed = std::min(speed * 2, search.max_speed);
      if (!try_speed(speed)) {
        hi = speed;
        break;
      }
      lo = speed;
    }
  } else {
    hi = speed;
    while (speed > search.min_speed) {
      speed = std::max(speed / 2, search.min_speed);
      if (try_speed(speed)) {
        lo = speed;
        break;
      }
      hi = speed;
    }
  }
  if (lo > 0 && hi > 0) {
    while (hi > lo * (1 + search.precision)) {
      const double mid = std::sqrt(lo * hi);
      (try_speed(mid) ? lo : hi) = mid;
    }
  }
  c.speed = lo;
  c.exceeded_at = hi;
  return c;
}

}  // namespace kvgate::replay
