// Helpers for storage/ tests (test-only).
#ifndef STRATA_TESTING_STORAGE_TEST_UTIL_H_
#define STRATA_TESTING_STORAGE_TEST_UTIL_H_

#include <atomic>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace strata::testing {

// A fresh directory path (not created) unique to this call, under the
// test program's root (testing/temp_dir.h), removed with its contents on
// destruction.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    static std::atomic<int> counter{0};
    const ::testing::TestInfo* test =
        ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = TempDir(
        absl::StrCat(test != nullptr ? test->name() : "test", "-", counter++));
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
