#pragma once

// T5's relative-position bucket, in plain C++ that the CPU and the CUDA kernels of
// posenc::relative_position_bucket (and the TorchScript export's bucket table) share.

#include <c10/macros/Macros.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace posenc {
namespace detail {

/// T5's bucket of a relative position (key position - query position): half the buckets (per
/// direction when bidirectional) hold the distances 0 .. n/2 - 1 exactly, the others
/// logarithmically larger ranges up to max_distance; bidirectional adds num_buckets / 2 for keys
/// after the query; causal (bidirectional false) maps keys after the query to bucket 0. The
/// logarithm is evaluated in double precision (on a GPU by CUDA's log, within one ulp of libm's:
/// a bucket can differ only for a distance whose scaled logarithm lies within ~1e-15 of an
/// integer; none does for T5's configurations but the exact powers, where both agree).
///
/// `log_range`: log(max_distance / max_exact) in double, as relative_position_bucket_log_range
/// gives it (a kernel computes it once per call, not once per element). Distances of max_distance
/// and more land in the last bucket without a logarithm: their scaled logarithm is at least
/// buckets - max_exact (less at most a rounding, which the truncation then takes to
/// buckets - max_exact - 1), so the clamp below gives buckets - 1 for every one of them.
C10_HOST_DEVICE inline int64_t relative_position_bucket(int64_t relative_position,
                                                        bool bidirectional, int64_t num_buckets,
                                                        int64_t max_distance, double log_range) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t bucket = 0;
  int64_t buckets = num_buckets;
  int64_t distance = 0;
  if (bidirectional) {
    buckets /= 2;
    bucket = relative_position > 0 ? buckets : 0;
    // |INT64_MIN| does not fit: every distance past max_distance lands in the last bucket anyway
    distance = relative_position == kMin ? kMax
               : relative_position < 0   ? -relative_position
                                         : relative_position;
  } else {
    distance = relative_position >= 0 ? 0 : relative_position == kMin ? kMax : -relative_position;
  }
  const int64_t max_exact = buckets / 2;
  if (distance < max_exact) {
    return bucket + distance;
  }
  if (distance >= max_distance) {
    return bucket + buckets - 1;
  }
  const double scaled = ::log(static_cast<double>(distance) / static_cast<double>(max_exact)) /
                        log_range * static_cast<double>(buckets - max_exact);
  // scaled >= 0 here; clamp before converting so that huge distances cannot overflow int64
  const double last = static_cast<double>(buckets - 1 - max_exact);
  const int64_t large = max_exact + static_cast<int64_t>(scaled < last ? scaled : last);
  return bucket + (large < buckets - 1 ? large : buckets - 1);
}

/// log(max_distance / max_exact) of relative_position_bucket's arguments, in double.
C10_HOST_DEVICE inline double relative_position_bucket_log_range(bool bidirectional,
                                                                 int64_t num_buckets,
                                                                 int64_t max_distance) {
  const int64_t max_exact = (bidirectional ? num_buckets / 2 : num_buckets) / 2;
  return ::log(static_cast<double>(max_distance) / static_cast<double>(max_exact));
}

C10_HOST_DEVICE inline int64_t relative_position_bucket(int64_t relative_position,
                                                        bool bidirectional, int64_t num_buckets,
                                                        int64_t max_distance) {
  return relative_position_bucket(
      relative_position, bidirectional, num_buckets, max_distance,
      relative_position_bucket_log_range(bidirectional, num_buckets, max_distance));
}

} // namespace detail
} // namespace posenc
