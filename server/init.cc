#include "server/init.h"

#include <cmath>

#include "common/splitmix.h"

namespace strata {
namespace {

// A uniform double in (0, 1).
double Unit(uint64_t bits) {
  return ((bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

}  // namespace

void FillInit(const v1::InitSpec& init, uint64_t chunk_id, float* w, size_t n) {
  const uint64_t key = SplitMix(init.seed() ^ SplitMix(chunk_id));
  const float scale = init.scale();
  switch (init.kind()) {
    case v1::InitSpec::ONES:
      for (size_t i = 0; i < n; ++i) w[i] = 1.0f;
      return;
    case v1::InitSpec::CONSTANT:
      for (size_t i = 0; i < n; ++i) w[i] = scale;
      return;
    case v1::InitSpec::UNIFORM:
      for (size_t i = 0; i < n; ++i) {
        w[i] =
            static_cast<float>((2.0 * Unit(SplitMix(key + i)) - 1.0) * scale);
      }
      return;
    case v1::InitSpec::NORMAL:
      // Box-Muller, one normal per element (the second draw is discarded to
      // keep element i a function of i alone).
      for (size_t i = 0; i < n; ++i) {
        const double u1 = Unit(SplitMix(key + 2 * i));
        const double u2 = Unit(SplitMix(key + 2 * i + 1));
        w[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                                  std::cos(6.283185307179586 * u2) * scale);
      }
      return;
    default:
      for (size_t i = 0; i < n; ++i) w[i] = 0.0f;
      return;
  }
}

}  // namespace strata
