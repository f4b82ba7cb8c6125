// Directories for tests: all of a test program's under one root of its own,
// removed when the program ends with every test passed (over all
// --gtest_repeat iterations), kept and named on stderr when one failed, for
// its logs. Before, each test process left its directories in /tmp: tens of
// GB after a few full runs.
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

namespace internal {

// The root, once made ("" before).
inline std::string& Root() {
  static std::string root;
  return root;
}

// Removes the root at the program's end if every iteration passed.
class RemoveTestRoot : public ::testing::EmptyTestEventListener {
 public:
  void OnTestIterationEnd(const ::testing::UnitTest& unit, int) override {
    if (!unit.Passed()) failed_ = true;
  }
  void OnTestProgramEnd(const ::testing::UnitTest&) override {
    const std::string& root = Root();
    if (root.empty()) return;
    if (failed_) {
      std::fprintf(stderr, "test files kept in %s\n", root.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }

 private:
  bool failed_ = false;
};

// Registered once per program, before main (gtest owns it).
inline const bool kRemoveTestRootAdded = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new RemoveTestRoot);
  return true;
}();

}  // namespace internal

// This process's root, TempBase()/strata-test-<pid>-XXXXXX (unique, so a
// root kept after a failure is never another process's), made on first
// use.
inline const std::string& TestRoot() {
  std::string& root = internal::Root();
  if (root.empty()) {
    std::string pattern =
        TempBase() + "/strata-test-" + std::to_string(::getpid()) + "-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror(pattern.c_str());
      std::abort();
    }
    root = pattern;
  }
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

// TempDir(name), removed with its contents when this goes: declared before
// what opens files in it, so those close first.
struct ScopedDir {
  explicit ScopedDir(const std::string& name) : path(TempDir(name)) {}
  ~ScopedDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScopedDir(const ScopedDir&) = delete;
  ScopedDir& operator=(const ScopedDir&) = delete;
  const std::string path;
};

}  // namespace strata::testing

#endif  // STRATA_TESTING_TEMP_DIR_H_
