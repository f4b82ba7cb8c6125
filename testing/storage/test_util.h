// Helpers for storage/ tests (test-only).
#ifndef STRATA_TESTING_STORAGE_TEST_UTIL_H_
#define STRATA_TESTING_STORAGE_TEST_UTIL_H_

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace strata::testing {

// A fresh directory path (not created) unique to this process and call,
// under $TEST_TMPDIR or /tmp, removed with its contents on destruction.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    static std::atomic<int> counter{0};
    const char* root = std::getenv("TEST_TMPDIR");
    const ::testing::TestInfo* test =
        ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = absl::StrCat(root != nullptr ? root : "/tmp", "/strata-",
                         test != nullptr ? test->name() : "test", "-",
                         ::getpid(), "-", counter++);
    std::filesystem::remove_all(path_);
  }
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace strata::testing

#endif  // STRATA_TESTING_STORAGE_TEST_UTIL_H_
