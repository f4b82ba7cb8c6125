// `strata export` and `--init_from` through the real binary: an export taken
// while the job trains, and files that do not fit refused before anything
// starts.
#include <signal.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"
#include "tests/process_util.h"

namespace strata {
namespace {

// A small byte-level run's flags (the default data, every step snapshotted
// every 5 steps).
std::vector<std::string> LocalRun(const std::string& dir, int steps) {
  return {STRATA_BINARY,
          "local",
          "--dir",
          dir,
          "--layers",
          "1",
          "--heads",
          "2",
          "--width",
          "16",
          "--context",
          "16",
          "--batch",
          "2",
          "--workers",
          "1",
          "--steps",
          std::to_string(steps),
          "--snapshot_every",
          "5",
          "--eval_every",
          "0"};
}

int RunStrata(const std::vector<std::string>& args, const std::string& log) {
  testing::Child c(args, log);
  return c.Wait(absl::Minutes(2));
}

TEST(Export, TakesTheNewestCommonSnapshotWhileTheJobTrains) {
  const std::string dir = testing::FreshDir("export-live");
  testing::Child job(LocalRun(dir + "/run", 100000), dir + "/job.log");
  ASSERT_TRUE(job.started());
  // Once the servers hold a snapshot, an export succeeds with the job on.
  int rc = -1;
  for (int i = 0; i < 600 && rc != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    rc = RunStrata(
        {STRATA_BINARY, "export", "--dir", dir + "/run", "--out", dir + "/out"},
        dir + "/export.log");
  }
  ASSERT_EQ(rc, 0) << testing::ReadFile(dir + "/export.log") << "\n"
                   << testing::ReadFile(dir + "/job.log");
  EXPECT_NE(testing::ReadFile(dir + "/export.log").find("exported step "),
            std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir + "/out/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/out/config.json"));
  // The job was not disturbed: it is still training, and a second export
  // a moment later works as well.
  EXPECT_EQ(job.Wait(absl::Milliseconds(200)), -1) << "the job stopped";
  EXPECT_EQ(RunStrata({STRATA_BINARY, "export", "--dir", dir + "/run", "--out",
                       dir + "/out2"},
                      dir + "/export2.log"),
            0)
      << testing::ReadFile(dir + "/export2.log");
  // Ctrl-C: the cluster stops cleanly, exit 128 + SIGINT.
  EXPECT_EQ(job.Stop(SIGINT), 130) << testing::ReadFile(dir + "/job.log");
  // Nothing of the reads is left beside the servers' directories.
  for (const auto& e : std::filesystem::directory_iterator(dir + "/run"))
    EXPECT_EQ(e.path().filename().string().find(".read-"), std::string::npos);
}

TEST(Export, InitFromAFileThatDoesNotFitIsRefusedBeforeAnythingStarts) {
  const std::string dir = testing::FreshDir("export-bad-init");
  // A real export to break.
  ASSERT_EQ(RunStrata(LocalRun(dir + "/run", 5), dir + "/first.log"), 0)
      << testing::ReadFile(dir + "/first.log");
  ASSERT_EQ(RunStrata({STRATA_BINARY, "export", "--dir", dir + "/run", "--out",
                       dir + "/good"},
                      dir + "/export.log"),
            0);
  const std::string good = dir + "/good/model.safetensors";
  struct Case {
    std::string what;
    std::vector<std::string> extra;
    std::string file;
    std::string message;
  };
  std::filesystem::create_directories(dir + "/cut");
  std::filesystem::copy_file(good, dir + "/cut/model.safetensors");
  std::filesystem::resize_file(dir + "/cut/model.safetensors",
                               std::filesystem::file_size(good) - 4);
  const std::vector<Case> cases = {
      {"truncated", {}, dir + "/cut/model.safetensors", "bytes"},
      {"other width", {"--width", "32"}, good, "does not fit"},
      {"more layers", {"--layers", "2"}, good, "has no tensor"},
      {"longer context", {"--context", "32"}, good, "fewer than the model's"},
  };
  for (const Case& c : cases) {
    const std::string run = dir + "/run-" + std::to_string(&c - &cases[0]);
    std::vector<std::string> args = {STRATA_BINARY, "local", "--dir",   run,
                                     "--init_from", c.file,  "--steps", "2",
                                     "--batch",     "2"};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    const std::string log = run + ".log";
    EXPECT_EQ(RunStrata(args, log), 1)
        << c.what << ": " << testing::ReadFile(log);
    const std::string out = testing::ReadFile(log);
    EXPECT_NE(out.find(c.message), std::string::npos) << c.what << ": " << out;
    EXPECT_NE(out.find(c.file), std::string::npos) << c.what << ": " << out;
    EXPECT_FALSE(std::filesystem::exists(run + "/local.json")) << c.what;
  }
  // generate --model without a config.json, and export asked for more
  // token ids than the model has: refused, naming what to give.
  std::filesystem::create_directories(dir + "/bare");
  std::filesystem::copy_file(good, dir + "/bare/model.safetensors");
  EXPECT_EQ(RunStrata({STRATA_BINARY, "generate", "--model",
                       dir + "/bare/model.safetensors"},
                      dir + "/bare.log"),
            1);
  EXPECT_NE(testing::ReadFile(dir + "/bare.log").find("give --heads"),
            std::string::npos)
      << testing::ReadFile(dir + "/bare.log");
  EXPECT_EQ(RunStrata({STRATA_BINARY, "export", "--dir", dir + "/run", "--out",
                       dir + "/wide", "--vocab_size", "1000"},
                      dir + "/wide.log"),
            1);
  EXPECT_NE(testing::ReadFile(dir + "/wide.log").find("--vocab_size 1000"),
            std::string::npos)
      << testing::ReadFile(dir + "/wide.log");
}

}  // namespace
}  // namespace strata
