// Directories for tests: all of a test program's under one root of its own,
// removed when the program's tests have all passed, kept (and named on
// stderr) when one failed, for its logs. Before, each test process left its
// directories in /tmp: tens of GB after a few full runs.
#ifndef STRATA_TESTING_TEMP_DIR_H_
#define STRATA_TESTING_TEMP_DIR_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "gtest/gtest.h"

namespace strata::testing {

// $TEST_TMPDIR, or /tmp.
inline std::string TempBase() {
  const char* base = std::getenv("TEST_TMPDIR");
  return base != nullptr && *base != '\0' ? base : "/tmp";
}

// This process's root, TempBase()/strata-test-<pid>, made on first use.
inline const std::string& TestRoot() {
  static const std::string root = [] {
    std::string dir = TempBase() + "/strata-test-" + std::to_string(::getpid());
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    return dir;
  }();
  return root;
}

// TestRoot()/name, absent: for code that makes its directory itself.
inline std::string TempDir(const std::string& name) {
  std::string dir = TestRoot() + "/" + name;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return dir;
}

// TestRoot()/name, made empty.
inline std::string FreshDir(const std::string& name) {
  std::string dir = TempDir(name);
  std::filesystem::create_directories(dir);
  return dir;
}

namespace internal {

class RemoveTestRoot : public ::testing::Environment {
 public:
  void TearDown() override {
    const std::string root =
        TempBase() + "/strata-test-" + std::to_string(::getpid());
    std::error_code ec;
    if (!std::filesystem::exists(root, ec)) return;
    if (::testing::UnitTest::GetInstance()->Passed()) {
      std::filesystem::remove_all(root, ec);
    } else {
      std::fprintf(stderr, "test files kept in %s\n", root.c_str());
    }
  }
};

// Registered once per program, before main (gtest runs it after the tests).
inline ::testing::Environment* const kRemoveTestRoot =
    ::testing::AddGlobalTestEnvironment(new RemoveTestRoot);

}  // namespace internal
}  // namespace strata::testing

#endif  // STRATA_TESTING_TEMP_DIR_H_
