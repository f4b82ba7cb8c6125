// The servers' RAM tier (storage/spill_store.h, server/tile_cache.h): Adam
// throughput of a shard whose state is --state_ratio times its RAM budget,
// against the same shard with everything in RAM and against the disk's own
// bandwidth, measured in the same run on the same directory.
//
// A step is what a server does for one worker each step (ASP, so every
// push applies at once): every chunk pushed in backward order (Adam
// applied), then every chunk pulled in forward order, each phase with
// --in_flight requests at once, started in order, as a worker's client
// sends them (client/ps_client.h: 4 on the wire per server). The first
// step teaches the shard the order and is not timed. The tier is a
// server's by default: it spills the tile used last and reads nothing
// ahead (--evict just_used --prefetch_depth -1). With one request at a
// time, 4 read ahead did better (this bench's default until
// 2026-11-26); with 4 in flight, the learned order's read-aheads
// mispredict (the requests finish out of order) and the requests
// themselves keep the disk busy: docs/BENCHMARKS.md.
//
// The disk limit: a step must read back every tile that does not fit in
// the budget for its push (the whole tile), write it once (the push
// changed it), and read its weights again for its pull (a third of an
// Adam tile: a pull of a spilled tile reads the weights alone; the pushes
// of the backward pass and the pulls of the forward one touch each tile
// far apart, except the budget's worth around each turn): 4/3 x (state -
// budget) read and state - budget written. The bytes the tier actually
// moved are printed too.
// Disk read and write bandwidth are measured with O_DIRECT (buffered plus
// fdatasync where the file system lacks it) on a file as large as the
// state, so the page cache does not answer for the disk.
//   disk_limit_s = 4/3 x moved / read_GBps + moved / write_GBps
//   tier_ratio_to_disk = disk_limit_s / step_s   (target >= 0.8)
// A step reads and writes at once, and a disk whose reads and writes share
// its bandwidth may move less in total than either alone; so the same
// bytes are also moved at once, a step's reads from one file (O_DIRECT)
// while its writes go to another (O_DIRECT, as the tier's flushes, or
// buffered then synced: the faster), before the tier runs:
//   disk_mixed_s: the time until both are done
//   tier_ratio_to_disk_mixed = disk_mixed_s / step_s
//
// Usage: tier_bench --dir DIR [--budget_mib 256] [--state_ratio 4]
//                   [--chunk_mib 4] [--steps 3] [--in_flight 4]
//                   [--references 0]  (the tier alone: a state beyond RAM)
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/chunk_plan.h"
#include "common/consistency.h"
#include "server/shard.h"
#include "storage/spill_store.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

struct Disk {
  double read_GBps = 0, write_GBps = 0;
  double write_direct_GBps = 0, write_buffered_GBps = 0;
  bool direct = false;
};

// Writes `bytes` of `block` to a new file at `path` (O_DIRECT when
// `direct`, else through the page cache), then fdatasync: GB/s to the disk.
double TimeWrite(const std::string& path, size_t bytes, const void* block,
                 size_t block_bytes, bool direct) {
  int fd = open(path.c_str(),
                O_CREAT | O_TRUNC | O_WRONLY | (direct ? O_DIRECT : 0), 0600);
  if (fd < 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
  const auto t0 = Clock::now();
  for (size_t done = 0; done < bytes; done += block_bytes) {
    if (write(fd, block, block_bytes) != static_cast<ssize_t>(block_bytes)) {
      std::perror("write");
      std::exit(1);
    }
  }
  fdatasync(fd);
  const double gbps = bytes / Seconds(t0) / 1e9;
  close(fd);
  return gbps;
}

// The reference's I/O size: 4 MiB.
constexpr size_t kBlock = 4 << 20;

// A block for O_DIRECT I/O (page-aligned), filled.
std::unique_ptr<void, decltype(&std::free)> AlignedBlock() {
  void* raw = nullptr;
  if (posix_memalign(&raw, 4096, kBlock) != 0) std::abort();
  std::memset(raw, 0x5a, kBlock);
  return {raw, &std::free};
}

// Reads the first `bytes` of `path` in blocks of `block_bytes` into `buf`
// (O_DIRECT when `direct`, else after dropping its cached pages).
void ReadAll(const std::string& path, size_t bytes, void* buf,
             size_t block_bytes, bool direct) {
  int fd = open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
  if (fd < 0) {
    std::perror(path.c_str());
    std::exit(1);
  }
  if (!direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  for (size_t done = 0; done < bytes; done += block_bytes) {
    if (read(fd, buf, block_bytes) != static_cast<ssize_t>(block_bytes)) {
      std::perror("read");
      std::exit(1);
    }
  }
  close(fd);
}

// Writes then reads back `bytes` in 4 MiB blocks at `path`. Writes both
// ways, O_DIRECT and buffered with a final fdatasync, and the faster is
// the disk's write bandwidth (the tier's flushes write with O_DIRECT, and
// wrote buffered and synced until 2026-11-26:
// the reference is the best the disk does, not one way of asking it).
Disk MeasureDisk(const std::string& path, size_t bytes) {
  const auto buf = AlignedBlock();
  void* raw = buf.get();
  Disk d;
  int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_DIRECT, 0600);
  d.direct = fd >= 0;
  if (fd >= 0) close(fd);
  d.write_buffered_GBps = TimeWrite(path, bytes, raw, kBlock, false);
  if (d.direct) d.write_direct_GBps = TimeWrite(path, bytes, raw, kBlock, true);
  d.write_GBps = std::max(d.write_direct_GBps, d.write_buffered_GBps);
  const auto t0 = Clock::now();
  ReadAll(path, bytes, raw, kBlock, d.direct);
  d.read_GBps = bytes / Seconds(t0) / 1e9;
  unlink(path.c_str());
  return d;
}

// Seconds to read `read_bytes` of a file (O_DIRECT where the file system
// has it) while `write_bytes` are written to another one (O_DIRECT when
// `direct_writes`, else buffered; then fdatasync).
double TimeMixed(const std::string& dir, size_t read_bytes, size_t write_bytes,
                 bool direct, bool direct_writes) {
  const auto rbuf = AlignedBlock(), wbuf = AlignedBlock();
  const std::string rpath = dir + "/mixed-read", wpath = dir + "/mixed-write";
  TimeWrite(rpath, read_bytes, rbuf.get(), kBlock, direct);
  const auto t0 = Clock::now();
  std::thread reader(
      [&] { ReadAll(rpath, read_bytes, rbuf.get(), kBlock, direct); });
  TimeWrite(wpath, write_bytes, wbuf.get(), kBlock, direct_writes);
  reader.join();
  const double s = Seconds(t0);
  unlink(rpath.c_str());
  unlink(wpath.c_str());
  return s;
}

// Bytes this process has had the kernel read from and write to storage
// (/proc/self/io; O_DIRECT included): the tier's real disk traffic.
std::pair<double, double> ProcessIo() {
  std::ifstream f("/proc/self/io");
  std::string key;
  double value = 0, read = 0, write = 0;
  while (f >> key >> value) {
    if (key == "read_bytes:") read = value;
    if (key == "write_bytes:") write = value;
  }
  return {read, write};
}

v1::RegisterChunksRequest Model(int chunks, size_t numel) {
  v1::RegisterChunksRequest req;
  auto* g = req.add_groups();
  g->set_name("g");
  g->mutable_optimizer()->set_kind(v1::OptimizerConfig::ADAMW);
  g->mutable_optimizer()->set_lr(1e-3f);
  for (int i = 0; i < chunks; ++i) {
    auto* c = req.add_chunks();
    const std::string name = absl::StrCat("t", i);
    c->set_chunk_id(ChunkId(name, 0));
    c->set_tensor(name);
    c->set_numel(numel);
    c->set_group("g");
    c->add_tensor_shape(numel);
    c->mutable_init()->set_kind(v1::InitSpec::NORMAL);
    c->mutable_init()->set_scale(0.02f);
  }
  return req;
}

// Calls `call(i)` for i in `order`, at most `in_flight` at once, each
// started in order as one before it returns: what a worker's client does
// with one server (client/ps_client.h: submission order, at most
// max_in_flight_per_server on the wire).
void InOrder(const std::vector<int>& order, int in_flight,
             const std::function<void(int)>& call) {
  std::atomic<size_t> next{0};
  auto run = [&] {
    for (size_t k; (k = next.fetch_add(1)) < order.size();) call(order[k]);
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < in_flight; ++t) threads.emplace_back(run);
  run();
  for (auto& t : threads) t.join();
}

// Seconds per timed step (the mean of `steps` after one untimed step), and
// of those the pushes' (the pulls' are the rest).
struct StepTimes {
  double step_s = 0, push_s = 0;
};
StepTimes RunSteps(Shard& shard, int chunks, size_t numel, int steps,
                   int in_flight) {
  const std::string grad(numel * 4, '\0');
  std::vector<int> backward, forward;
  for (int i = chunks - 1; i >= 0; --i) backward.push_back(i);
  for (int i = 0; i < chunks; ++i) forward.push_back(i);
  Clock::time_point start;
  double push_s = 0;
  for (int step = 0; step <= steps; ++step) {
    if (step == 1) start = Clock::now();
    const Clock::time_point pushes = Clock::now();
    InOrder(backward, in_flight, [&](int i) {
      v1::PushRequest p;
      p.set_member_id(1);
      p.set_epoch(1);
      p.set_chunk_id(ChunkId(absl::StrCat("t", i), 0));
      p.set_step(step);
      p.set_num_samples(1);
      auto r = shard.Push(p, grad);
      if (!r.ok()) {
        std::fprintf(stderr, "push: %s\n", r.status().ToString().c_str());
        std::fflush(stderr);
        std::_Exit(1);  // other threads are still in the shard
      }
    });
    if (step >= 1) push_s += Seconds(pushes);
    InOrder(forward, in_flight, [&](int i) {
      thread_local std::string out;  // reused, as a server's buffers are
      v1::PullRequest r;
      r.set_member_id(1);
      r.set_chunk_id(ChunkId(absl::StrCat("t", i), 0));
      r.set_clock(-1);
      auto got = shard.Pull(r, &out);
      if (!got.ok()) {
        std::fprintf(stderr, "pull: %s\n", got.status().ToString().c_str());
        std::fflush(stderr);
        std::_Exit(1);
      }
    });
  }
  return {Seconds(start) / steps, push_s / steps};
}

std::unique_ptr<Shard> NewShard(std::shared_ptr<SpillStore> spill, int chunks,
                                size_t numel) {
  ShardOptions o;
  o.consistency = *ParseConsistency("asp");
  o.spill = std::move(spill);
  auto shard = std::make_unique<Shard>(o);
  if (!shard->Register(Model(chunks, numel)).ok()) std::abort();
  v1::View v;
  v.set_epoch(1);
  v.set_workers_epoch(1);
  auto* m = v.add_workers();
  m->set_id(1);
  m->set_joined_epoch(1);
  shard->UpdateView(v);
  return shard;
}

int Main(int argc, char** argv) {
  CLI::App app("RAM-tier Adam throughput against in-RAM and the disk");
  std::string dir;
  uint64_t budget_mib = 256, chunk_mib = 4;
  double state_ratio = 4;
  int steps = 3;
  int in_flight = 4;
  bool references = true;
  // A server's tier: spilling the tile used last is Belady's choice when
  // the tiles are used in about the same order every step.
  SpillOptions so;
  so.eviction = SpillOptions::Eviction::kJustUsed;
  uint64_t write_buffer_mib = 0;
  app.add_option("--dir", dir, "directory on the disk to spill to")->required();
  app.add_option("--budget_mib", budget_mib, "RAM budget")
      ->capture_default_str();
  app.add_option("--state_ratio", state_ratio, "state / budget")
      ->capture_default_str();
  app.add_option("--chunk_mib", chunk_mib, "weights per chunk")
      ->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->capture_default_str();
  app.add_option("--in_flight", in_flight,
                 "requests at once, started in order (a client's "
                 "max_in_flight_per_server)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--references", references,
                 "measure the disk and the same shard in RAM (0: the tier "
                 "alone, for a state larger than RAM; prints its peak RSS)")
      ->capture_default_str();
  app.add_option("--prefetch_depth", so.prefetch_depth,
                 "tiles read ahead (-1: the policy's default)")
      ->capture_default_str();
  app.add_option("--io_threads", so.io_threads, "read-ahead threads")
      ->capture_default_str();
  app.add_option("--write_behind", so.write_behind,
                 "write changed cold tiles on a thread of their own (0: each "
                 "spill writes its tile)")
      ->capture_default_str();
  std::map<std::string, SpillOptions::Eviction> evictions = {
      {"lru", SpillOptions::Eviction::kLeastRecent},
      {"farthest", SpillOptions::Eviction::kFarthest},
      {"just_used", SpillOptions::Eviction::kJustUsed}};
  app.add_option("--evict", so.eviction,
                 "which tile to spill first: lru, farthest (next use "
                 "farthest), just_used (used last; no write-behind)")
      ->transform(CLI::CheckedTransformer(evictions))
      ->capture_default_str();
  uint64_t write_behind_mib = 0;
  app.add_option("--write_behind_mib", write_behind_mib,
                 "coldest tiles kept written out (0: the store's default; "
                 "none with just_used, which writes nothing behind)")
      ->capture_default_str();
  app.add_option("--write_buffer_mib", write_buffer_mib,
                 "spill database memtable (0: the store's default)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const size_t numel = (chunk_mib << 20) / 4;
  const size_t tile = numel * 4 * 3;  // weights, Adam's m and v
  const uint64_t budget = budget_mib << 20;
  const int chunks = static_cast<int>(state_ratio * budget / tile);
  const double params = static_cast<double>(chunks) * numel;
  const double state = static_cast<double>(chunks) * tile;
  std::filesystem::create_directories(dir);

  // The same disk moving a step's minimum bytes (`moved`: the tiles
  // beyond the budget), reads and writes at once, before the tier is open.
  const double moved = state - budget;
  Disk disk;
  double mixed_s = 0, mixed_buffered = 0, mixed_direct = 0, ram_s = 0;
  if (references) {
    disk = MeasureDisk(dir + "/disk-probe", static_cast<size_t>(state));
    std::printf(
        "disk_read_GBps %.3f\ndisk_write_GBps %.3f (direct %.3f, buffered "
        "and synced %.3f)\ndisk_direct_io %d\n",
        disk.read_GBps, disk.write_GBps, disk.write_direct_GBps,
        disk.write_buffered_GBps, disk.direct ? 1 : 0);
    // Rounded to whole blocks, as the tier's tiles are.
    const size_t mixed_read =
        static_cast<size_t>(4.0 / 3.0 * moved) / kBlock * kBlock;
    const size_t mixed_write = static_cast<size_t>(moved) / kBlock * kBlock;
    mixed_buffered =
        TimeMixed(dir, mixed_read, mixed_write, disk.direct, false);
    mixed_direct = disk.direct
                       ? TimeMixed(dir, mixed_read, mixed_write, true, true)
                       : 1e30;
    mixed_s = std::min(mixed_buffered, mixed_direct);
    auto shard = NewShard(nullptr, chunks, numel);
    ram_s = RunSteps(*shard, chunks, numel, steps, in_flight).step_s;
    std::printf("inram_params_per_s %.4g\n", params / ram_s);
  }

  so.ram_budget = budget;
  so.write_buffer_bytes = write_buffer_mib << 20;
  so.write_behind_bytes = write_behind_mib << 20;
  so.dir = dir + "/spill";
  auto spill = SpillStore::Open(so);
  if (!spill.ok()) {
    std::fprintf(stderr, "%s\n", spill.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<SpillStore> store = *std::move(spill);
  auto shard = NewShard(store, chunks, numel);
  const uint64_t read0 = store->counters().read_bytes;
  const uint64_t read_ns0 = store->counters().read_ns;
  const auto io0 = ProcessIo();
  const uint64_t write_ns0 = store->counters().write_ns;
  const uint64_t write0 = store->counters().write_bytes;
  const uint64_t behind0 = store->counters().written_behind;
  const uint64_t inline0 = store->counters().spills_written;
  const StepTimes tier = RunSteps(*shard, chunks, numel, steps, in_flight);
  const double tier_s = tier.step_s;
  const auto io1 = ProcessIo();
  // (Includes the untimed step's I/O: per step it is the same.)
  const double read_step =
      (store->counters().read_bytes - read0) / static_cast<double>(steps + 1);
  const double write_step =
      (store->counters().write_bytes - write0) / static_cast<double>(steps + 1);
  const double limit_s = references
                             ? 4.0 / 3.0 * moved / (disk.read_GBps * 1e9) +
                                   moved / (disk.write_GBps * 1e9)
                             : 0;
  std::printf("state_MiB %.0f\nbudget_MiB %llu\nchunks %d\n", state / 1048576.0,
              static_cast<unsigned long long>(budget_mib), chunks);
  std::printf("tier_direct_io %d\n", store->direct_io() ? 1 : 0);
  std::printf("tier_read_MiB_per_step %.0f\ntier_write_MiB_per_step %.0f\n",
              read_step / 1048576.0, write_step / 1048576.0);
  // What reached the disk, RocksDB's flushes and compactions included.
  std::printf("disk_read_MiB_per_step %.0f\ndisk_write_MiB_per_step %.0f\n",
              (io1.first - io0.first) / 1048576.0 / (steps + 1),
              (io1.second - io0.second) / 1048576.0 / (steps + 1));
  std::printf("tier_params_per_s %.4g\n", params / tier_s);
  // Seconds per step in reads and writes (summed over threads; reads also
  // run on the read-ahead threads, overlapping the updates).
  std::printf("tier_read_s_per_step %.3f\ntier_write_s_per_step %.3f\n",
              (store->counters().read_ns - read_ns0) * 1e-9 / (steps + 1),
              (store->counters().write_ns - write_ns0) * 1e-9 / (steps + 1));
  // Tile writes made on the writer thread, and those a use or read-ahead
  // had to make itself before it had room.
  std::printf(
      "tier_written_behind_per_step %.1f\ntier_spills_written_per_step "
      "%.1f\n",
      (store->counters().written_behind - behind0) /
          static_cast<double>(steps + 1),
      (store->counters().spills_written - inline0) /
          static_cast<double>(steps + 1));
  std::printf("tier_read_aheads_unused %llu\ntier_read_aheads_skipped %llu\n",
              static_cast<unsigned long long>(
                  store->counters().read_ahead_unused.load()),
              static_cast<unsigned long long>(
                  store->counters().read_aheads_skipped.load()));
  std::printf("tier_step_s %.3f\n", tier_s);
  // The step's pushes (backward order) and pulls (forward order).
  std::printf("tier_push_s_per_step %.3f\ntier_pull_s_per_step %.3f\n",
              tier.push_s, tier_s - tier.push_s);
  if (references) {
    std::printf("tier_ratio_to_inram %.3f\n", ram_s / tier_s);
    std::printf("disk_limit_s %.3f\n", limit_s);
    std::printf("tier_ratio_to_disk %.3f\n", limit_s / tier_s);
    std::printf("disk_mixed_s %.3f (buffered writes %.3f, direct %.3f)\n",
                mixed_s, mixed_buffered, disk.direct ? mixed_direct : 0.0);
    std::printf("tier_ratio_to_disk_mixed %.3f\n", mixed_s / tier_s);
  } else {
    // The most this process held, against the machine's RAM: with no
    // in-RAM run beside it, the tier's own (its budget and overhead).
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    std::printf("tier_peak_rss_MiB %.0f\nmachine_ram_MiB %.0f\n",
                usage.ru_maxrss / 1024.0,
                static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                    sysconf(_SC_PAGESIZE) / 1048576.0);
  }
  uint64_t on_disk = 0;
  std::error_code walk;
  for (auto it = std::filesystem::recursive_directory_iterator(so.dir, walk);
       !walk && it != std::filesystem::recursive_directory_iterator();
       it.increment(walk)) {
    std::error_code size;  // RocksDB may delete a file meanwhile
    if (it->is_regular_file(size)) on_disk += it->file_size(size);
  }
  std::printf("spill_dir_MiB %.0f\n", on_disk / 1048576.0);
  std::fflush(stdout);
  shard.reset();
  store.reset();  // closed before its files go
  std::error_code ec;
  std::filesystem::remove_all(so.dir, ec);
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
