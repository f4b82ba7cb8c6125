// The `strata` binary refuses malformed flags and configs with a clear
// message and a non-zero exit, before touching anything.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "data/gpt2_tokenizer.h"
#include "tests/process_util.h"

namespace strata {
namespace {

using testing::Child;

struct Refusal {
  std::vector<std::string> args;
  std::string says;  // part of the message
};

class CliRefuses : public ::testing::TestWithParam<Refusal> {};

TEST_P(CliRefuses, WithAClearMessage) {
  const std::string dir = testing::FreshDir("cli");
  std::vector<std::string> args = {STRATA_BINARY};
  for (const auto& a : GetParam().args) args.push_back(a);
  Child child(args, dir + "/out.log");
  const int rc = child.Wait(absl::Seconds(60));
  EXPECT_NE(rc, 0) << child.Output();
  EXPECT_NE(rc, -1) << "did not exit";
  EXPECT_NE(child.Output().find(GetParam().says), std::string::npos)
      << child.Output();
}

INSTANTIATE_TEST_SUITE_P(
    Flags, CliRefuses,
    ::testing::Values(
        Refusal{{}, "A subcommand is required"},
        Refusal{{"frobnicate"}, "frobnicate"},
        Refusal{{"scheduler", "--consistency", "ssp:x"},
                "bad consistency 'ssp:x'"},
        Refusal{
            {"scheduler", "--consistency", "auto:0"},
            "expected auto, auto:<max_staleness> or auto:<max_staleness>:ssp"},
        Refusal{
            {"server", "--scheduler", "127.0.0.1:1", "--consistency", "auto"},
            "bad consistency 'auto'"},
        Refusal{{"scheduler", "--num_shards", "0"}, "--num_shards"},
        Refusal{{"scheduler", "--lease_ms", "abc"}, "--lease_ms"},
        Refusal{{"server"}, "--scheduler is required"},
        Refusal{{"server", "--scheduler", "127.0.0.1:1", "--shard", "-1"},
                "--shard"},
        Refusal{{"toy", "--scheduler", "127.0.0.1:1", "--optimizer", "rmsprop"},
                "--optimizer"},
        // Refused as they are parsed, not after gRPC retried them.
        Refusal{{"status", "--scheduler", ":::not-an-address"},
                "IPv6 host outside brackets"},
        Refusal{{"worker", "--scheduler", "127.0.0.1"}, "has no port"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--steps", "abc"},
                "'abc' is not a positive number"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--heads", "3",
                 "--width", "64"},
                "heads"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--data",
                 "/nonexistent/strata"},
                "/nonexistent/strata"},
        Refusal{{"local", "--workers", "0"}, "--workers"},
        Refusal{{"local", "--metrics", "/tmp/m.jsonl"}, "--metrics"},
        Refusal{{"local", "--ram_budget", "12parsecs"}, "not a byte size"},
        Refusal{
            {"server", "--scheduler", "127.0.0.1:1", "--ram_budget", "1GiB"},
            "--ram_budget needs a --data_dir"},
        Refusal{
            {"server", "--scheduler", "127.0.0.1:1", "--pinned_bytes", "lots"},
            "not a byte size"},
        Refusal{
            {"worker", "--scheduler", "127.0.0.1:1", "--chunk_size", "1TiB"},
            "--chunk_size"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--sync", "gossip"},
                "--sync"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--sync", "allreduce",
                 "--compress", "onebit"},
                "not to --sync allreduce"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--compress",
                 "topk:0.1", "--compress_freeze_variance", "true"},
                "it needs both"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--compress", "onebit",
                 "--optimizer", "sgd", "--compress_freeze_variance", "true"},
                "it needs both"},
        Refusal{
            {"worker", "--scheduler", "127.0.0.1:1", "--compress", "topk:2"},
            "topk:R with R in (0, 1]"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--layers", "2",
                 "--pp", "3"},
                "--pp must be in [1, --layers (2)]"},
        Refusal{{"local", "--tp", "2", "--device", "cuda"}, "CPU threads only"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--experts", "4",
                 "--ep", "2", "--device", "cuda"},
                "--ep runs on CPU threads only"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--experts", "4",
                 "--ep", "2", "--pp", "2"},
                "--ep with --tp or --pp is not built"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--experts", "1",
                 "--top_k", "2"},
                "top_k must be 1 or 2 and at most experts"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--tp", "0"}, "--tp"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--ep", "2"},
                "--ep splits a mixture of experts: it needs --experts"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--experts", "8",
                 "--ep", "3"},
                "--ep 3 must divide --experts 8"},
        Refusal{{"local", "--experts", "8", "--ep", "65"}, "--ep"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--slowdown", "0.5"},
                "--slowdown must be in [1, 100]"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--jitter", "1"},
                "--jitter must be in [0, 1)"},
        Refusal{
            {"worker", "--scheduler", "127.0.0.1:1", "--slowdown_steps", "5:2"},
            "--slowdown_steps A:B needs"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--slowdown_steps",
                 "five"},
                "A:B (steps [A, B)"},
        // Checked before any process starts.
        Refusal{{"local", "--data", "/nonexistent/strata"},
                "/nonexistent/strata"},
        Refusal{{"local", "--dir", "/proc/strata-run"},
                "cannot create the run's directory /proc/strata-run"},
        Refusal{{"worker", "--scheduler", "127.0.0.1:1", "--steps", "1"},
                "no scheduler answered at 127.0.0.1:1"},
        Refusal{{"local", "--consistency", "sometimes"}, "bad consistency"},
        Refusal{{"local", "--consistency", "auto:2:bsp"},
                "auto:<max_staleness>:ssp"},
        Refusal{
            {"local", "--consistency", "auto:x"},
            "expected auto, auto:<max_staleness> or auto:<max_staleness>:ssp"},
        Refusal{{"generate", "--dir", "/nonexistent/strata"}, "model.json"},
        Refusal{{"--log_level", "loud", "version"}, "--log_level"},
        Refusal{{"version", "--log_level", "loud"}, "--log_level"},
        // Plaintext only on loopback; TLS files checked before serving.
        Refusal{{"scheduler", "--listen", "0.0.0.0:0"},
                "refusing to listen on 0.0.0.0:0 without TLS"},
        Refusal{
            {"server", "--scheduler", "127.0.0.1:1", "--listen", "10.1.2.3:0"},
            "--insecure"},
        Refusal{
            {"worker", "--scheduler", "127.0.0.1:1", "--listen", "0.0.0.0:0"},
            "refusing to listen"},
        Refusal{{"scheduler", "--tls_cert", "/nonexistent/s.pem"},
                "--tls_key, --tls_ca missing"},
        Refusal{{"scheduler", "--tls_cert", "/nonexistent/s.pem", "--tls_key",
                 "/nonexistent/s.key", "--tls_ca", "/nonexistent/ca.pem"},
                "--tls_cert /nonexistent/s.pem: cannot be read"},
        Refusal{{"certs"}, "--out is required"},
        Refusal{
            {"data", "--tokenizer", "words", "--input", "x", "--output", "y"},
            "--tokenizer"},
        Refusal{{"data", "--tokenizer", "gpt2", "--input", "/nonexistent",
                 "--output", "/nonexistent/y"},
                "--tokenizer gpt2 needs --vocab (encoder.json) and --merges"},
        Refusal{{"data", "--tokenizer", "gpt2", "--vocab", "/nonexistent/e",
                 "--merges", "/nonexistent/m", "--input", "/proc/version",
                 "--output", "/nonexistent/y"},
                "/nonexistent/e: cannot be read"}),
    [](const ::testing::TestParamInfo<Refusal>& info) {
      // e.g. "3_scheduler_num_shards_0": the index keeps names unique.
      std::string name = std::to_string(info.index);
      for (const std::string& a : info.param.args) {
        name += "_";
        for (char c : a)
          name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      }
      return name.substr(0, 60);
    });

// --log_level (before or after the subcommand) hides the less severe lines.
TEST(Cli, LogLevelHidesLessSevereLines) {
  const std::string dir = testing::FreshDir("cli_log_level");
  Child scheduler({STRATA_BINARY, "scheduler", "--listen", "127.0.0.1:0",
                   "--address_file", dir + "/addr", "--log_level", "warn"},
                  dir + "/scheduler.log");
  ASSERT_FALSE(testing::WaitForLine(dir + "/addr").empty())
      << scheduler.Output();
  EXPECT_EQ(scheduler.Stop(), 0);
  EXPECT_EQ(scheduler.Output().find("serving on"), std::string::npos)
      << scheduler.Output();
}

TEST(Cli, SchedulerRefusesADataDirThatIsNotOurs) {
  const std::string dir = testing::FreshDir("cli_foreign");
  std::ofstream(dir + "/thesis.tex") << "precious";
  Child child({STRATA_BINARY, "scheduler", "--listen", "127.0.0.1:0",
               "--data_dir", dir},
              dir + "/../cli_foreign.log");
  EXPECT_EQ(child.Wait(absl::Seconds(30)), 1) << child.Output();
  EXPECT_TRUE(std::filesystem::exists(dir + "/thesis.tex"));
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(Cli, StatusShowsTheViewShardMapAndServerCounters) {
  const std::string dir = testing::FreshDir("cli_status");
  Child scheduler(
      {STRATA_BINARY, "scheduler", "--listen", "127.0.0.1:0", "--num_shards",
       "2", "--consistency", "ssp:3", "--address_file", dir + "/addr"},
      dir + "/scheduler.log");
  const std::string address = testing::WaitForLine(dir + "/addr");
  ASSERT_FALSE(address.empty()) << scheduler.Output();
  Child server({STRATA_BINARY, "server", "--scheduler", address, "--shard", "1",
                "--address_file", dir + "/server.addr"},
               dir + "/server.log");
  const std::string server_address = testing::WaitForLine(dir + "/server.addr");
  ASSERT_FALSE(server_address.empty()) << server.Output();
  Child status({STRATA_BINARY, "status", "--scheduler", address},
               dir + "/status.log");
  ASSERT_EQ(status.Wait(absl::Seconds(30)), 0) << status.Output();
  const std::string out = status.Output();
  EXPECT_NE(out.find("consistency ssp:3"), std::string::npos) << out;
  EXPECT_NE(out.find("shard 0  (no server)"), std::string::npos) << out;
  EXPECT_NE(out.find("shard 1  " + server_address + "  SERVING  chunks 0"),
            std::string::npos)
      << out;
  EXPECT_EQ(server.Stop(), 0);
  EXPECT_EQ(scheduler.Stop(), 0);
  // Logs go to stderr through spdlog, at info by default.
  EXPECT_NE(scheduler.Output().find("[info] scheduler: serving on"),
            std::string::npos)
      << scheduler.Output();

  Child unreachable({STRATA_BINARY, "status", "--scheduler", "127.0.0.1:1"},
                    dir + "/none.log");
  EXPECT_EQ(unreachable.Wait(absl::Seconds(30)), 1);
  EXPECT_NE(unreachable.Output().find("strata status:"), std::string::npos);
}

// The same cluster under mutual TLS with `strata certs`' files: status
// and health answer a client certificate, and refuse a caller without one.
TEST(Cli, UnderTlsStatusAndHealthNeedACertificateFromTheCa) {
  const std::string dir = testing::FreshDir("cli_tls");
  Child certs({STRATA_BINARY, "certs", "--out", dir + "/certs"},
              dir + "/certs.log");
  ASSERT_EQ(certs.Wait(absl::Seconds(30)), 0) << certs.Output();
  auto tls = [&dir](const std::string& role) {
    return std::vector<std::string>{
        "--tls_cert", dir + "/certs/" + role + ".pem",
        "--tls_key",  dir + "/certs/" + role + ".key",
        "--tls_ca",   dir + "/certs/ca.pem"};
  };
  auto with = [](std::vector<std::string> a, std::vector<std::string> b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  Child scheduler(with({STRATA_BINARY, "scheduler", "--listen", "127.0.0.1:0",
                        "--address_file", dir + "/addr"},
                       tls("scheduler")),
                  dir + "/scheduler.log");
  const std::string address = testing::WaitForLine(dir + "/addr");
  ASSERT_FALSE(address.empty()) << scheduler.Output();
  Child server(with({STRATA_BINARY, "server", "--scheduler", address,
                     "--address_file", dir + "/server.addr"},
                    tls("server")),
               dir + "/server.log");
  const std::string server_address = testing::WaitForLine(dir + "/server.addr");
  ASSERT_FALSE(server_address.empty()) << server.Output();

  Child status(
      with({STRATA_BINARY, "status", "--scheduler", address}, tls("client")),
      dir + "/status.log");
  ASSERT_EQ(status.Wait(absl::Seconds(30)), 0) << status.Output();
  EXPECT_NE(status.Output().find("shard 0  " + server_address +
                                 "  SERVING  chunks 0"),
            std::string::npos)
      << status.Output();
  Child health(with({STRATA_BINARY, "health", "--address", server_address,
                     "--role", "server"},
                    tls("client")),
               dir + "/health.log");
  EXPECT_EQ(health.Wait(absl::Seconds(30)), 0) << health.Output();
  // The server's own certificate checks itself, as a container does.
  Child self(
      with({STRATA_BINARY, "health", "--address_file", dir + "/server.addr"},
           tls("server")),
      dir + "/self.log");
  EXPECT_EQ(self.Wait(absl::Seconds(30)), 0) << self.Output();

  Child plain({STRATA_BINARY, "status", "--scheduler", address},
              dir + "/plain.log");
  EXPECT_EQ(plain.Wait(absl::Seconds(30)), 1) << plain.Output();
  Child posing(
      with({STRATA_BINARY, "server", "--scheduler", address, "--shard", "0"},
           tls("worker")),
      dir + "/posing.log");
  EXPECT_EQ(posing.Wait(absl::Seconds(30)), 1);
  EXPECT_NE(posing.Output().find("is a worker's certificate"),
            std::string::npos)
      << posing.Output();
  EXPECT_EQ(server.Stop(), 0);
  EXPECT_EQ(scheduler.Stop(), 0);
}

// `strata local --tls` runs every role with certificates it makes.
TEST(Cli, LocalWithTlsTrainsOverMutualTls) {
  const std::string dir = testing::FreshDir("cli_local_tls");
  Child local({STRATA_BINARY, "local", "--toy", "--tls", "--steps", "20",
               "--dir", dir + "/run"},
              dir + "/local.log");
  ASSERT_EQ(local.Wait(absl::Minutes(2)), 0) << local.Output();
  EXPECT_TRUE(std::filesystem::exists(dir + "/run/certs/worker.pem"));
  std::ifstream plan(dir + "/run/local.json");
  std::string text((std::istreambuf_iterator<char>(plan)), {});
  EXPECT_NE(text.find("\"tls\": true"), std::string::npos) << text;
  EXPECT_NE(local.Output().find("(mutual TLS;"), std::string::npos)
      << local.Output();
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// `strata local` starts its processes through $STRATA_SELF_EXEC when set
// (how the GPU bundle runs strata through its own loader), and says which
// program it could not start.
TEST(Cli, LocalStartsItsProcessesThroughStrataSelfExec) {
  const std::string dir = testing::FreshDir("cli_self_exec");
  {
    std::ofstream corpus(dir + "/corpus.txt");
    for (int i = 0; i < 50; ++i) corpus << "a small corpus of text. ";
  }
  const std::string launcher = dir + "/launcher.sh";
  {
    std::ofstream f(launcher);
    f << "#!/bin/sh\necho \"$1\" >> " << dir << "/launched.log\nexec "
      << STRATA_BINARY << " \"$@\"\n";
  }
  std::filesystem::permissions(launcher, std::filesystem::perms::owner_all);
  const std::vector<std::string> args = {STRATA_BINARY, "local",
                                         "--dir",       dir + "/run",
                                         "--servers",   "1",
                                         "--workers",   "1",
                                         "--steps",     "2",
                                         "--layers",    "1",
                                         "--heads",     "1",
                                         "--width",     "8",
                                         "--context",   "8",
                                         "--batch",     "2",
                                         "--data",      dir + "/corpus.txt"};
  setenv("STRATA_SELF_EXEC", launcher.c_str(), 1);
  Child local(args, dir + "/local.log");
  const int rc = local.Wait(absl::Minutes(2));
  unsetenv("STRATA_SELF_EXEC");
  ASSERT_EQ(rc, 0) << local.Output();
  std::ifstream log(dir + "/launched.log");
  std::string all, line;
  while (std::getline(log, line)) all += line + " ";
  EXPECT_NE(all.find("scheduler"), std::string::npos) << all;
  EXPECT_NE(all.find("server"), std::string::npos) << all;
  EXPECT_NE(all.find("worker"), std::string::npos) << all;

  setenv("STRATA_SELF_EXEC", (dir + "/no-such-launcher").c_str(), 1);
  std::vector<std::string> broken_args = args;
  broken_args[3] = dir + "/run2";  // after "--dir"
  Child broken(broken_args, dir + "/broken.log");
  const int broken_rc = broken.Wait(absl::Minutes(1));
  unsetenv("STRATA_SELF_EXEC");
  EXPECT_NE(broken_rc, 0);
  EXPECT_NE(broken.Output().find("no-such-launcher"), std::string::npos)
      << broken.Output();
}

// The tokens of the Strata shard at `path` (data/dataset.h's format), read
// here so the test checks the bytes on disk; empty on a bad header.
std::vector<uint16_t> ShardTokens(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  uint32_t version = 0;
  uint64_t count = 0;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&version), 4);
  in.read(reinterpret_cast<char*>(&count), 8);
  if (!in || std::string(magic, 8) != "STRATOK1" || version != 1) return {};
  std::vector<uint16_t> tokens(count);
  in.read(reinterpret_cast<char*>(tokens.data()), 2 * count);
  return in ? tokens : std::vector<uint16_t>{};
}

// `strata data --tokenizer gpt2` on a folder: each file is a document, in
// path order, its ids (as the library gives them) after <|endoftext|>.
TEST(Cli, DataTokenizesAFolderWithGpt2) {
  const std::string vocab = STRATA_GPT2_DIR;
  if (!std::filesystem::exists(vocab + "/encoder.json")) {
    GTEST_SKIP() << "GPT-2's files are not in " << vocab
                 << ": run scripts/gpt2-vocab.sh build/npm";
  }
  const std::string dir = testing::FreshDir("cli_data_gpt2");
  std::filesystem::create_directories(dir + "/docs/b");
  const std::vector<std::string> texts = {"Hello world. I'll tokenize this.\n",
                                          "<|endoftext|> is text here.",
                                          "  caf\u00e9 \u4e2d\u6587\n\n"};
  std::ofstream(dir + "/docs/a.txt") << texts[0];
  std::ofstream(dir + "/docs/b/c.txt") << texts[1];
  std::ofstream(dir + "/docs/b/d.txt") << texts[2];
  Child child({STRATA_BINARY, "data", "--tokenizer", "gpt2", "--vocab",
               vocab + "/encoder.json", "--merges", vocab + "/vocab.bpe",
               "--input", dir + "/docs", "--output", dir + "/docs.tok"},
              dir + "/data.log");
  ASSERT_EQ(child.Wait(absl::Seconds(60)), 0) << child.Output();

  auto tok = Gpt2Tokenizer::Load(vocab + "/encoder.json", vocab + "/vocab.bpe");
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::vector<int32_t> ids;
  for (const std::string& text : texts) {
    ids.push_back(Gpt2Tokenizer::kEndOfText);
    (*tok)->Encode(text, &ids);
  }
  const std::vector<uint16_t> want(ids.begin(), ids.end());
  EXPECT_EQ(ShardTokens(dir + "/docs.tok"), want);
  EXPECT_EQ(std::count(want.begin(), want.end(), Gpt2Tokenizer::kEndOfText), 3);
  EXPECT_NE(child.Output().find(
                absl::StrCat("wrote 3 documents, ", want.size(), " tokens")),
            std::string::npos)
      << child.Output();
}

// The default stays one token per byte.
TEST(Cli, DataWritesBytesByDefault) {
  const std::string dir = testing::FreshDir("cli_data_bytes");
  std::ofstream(dir + "/a.txt") << "abc";
  Child child({STRATA_BINARY, "data", "--input", dir + "/a.txt", "--output",
               dir + "/a.tok"},
              dir + "/data.log");
  ASSERT_EQ(child.Wait(absl::Seconds(60)), 0) << child.Output();
  EXPECT_EQ(ShardTokens(dir + "/a.tok"), (std::vector<uint16_t>{97, 98, 99}));
  EXPECT_NE(child.Output().find("wrote 1 documents, 3 tokens"),
            std::string::npos)
      << child.Output();
}

}  // namespace
}  // namespace strata
