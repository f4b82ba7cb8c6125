// STRATA_CHECK: aborts on a broken invariant of our own code (a bug), never
// on input from a peer, the disk or the user (those get an absl::Status).
// The Abseil release in Debian 12 predates absl/log, hence this macro.
#ifndef STRATA_COMMON_CHECK_H_
#define STRATA_COMMON_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define STRATA_CHECK(cond)                                                  \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                  \
      std::abort();                                                         \
    }                                                                       \
  } while (0)

#endif  // STRATA_COMMON_CHECK_H_
