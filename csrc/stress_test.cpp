// Multi-threaded stress test of the lane allocator, for sanitizer builds. Not part of the package build.
//
//   cd csrc && g++ -std=c++17 -O1 -g -fsanitize=thread -o /tmp/fs_stress stress_test.cpp arena.cpp
//       backing.cpp allocator.cpp lane_allocator.cpp cuda_hooks.cpp -ldl -pthread   (one command line)
//   /tmp/fs_stress            # exit status 0, "ok" on the last line
//
// (-fsanitize=address,undefined works the same way.) Threads allocate and free at random in two lanes, with
// tags shared between threads, a capped tag, the stream fallback and untagged allocations outside the lanes,
// while another thread reads statistics and resets peaks; at the end every total must agree.
#include <atomic>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "lane_allocator.h"

namespace {

constexpr int kThreads = 8;
constexpr int kOps = 20000;
constexpr int64_t kCap = 64 << 10;
void* const kStream = reinterpret_cast<void*>(0x1234);

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  fs_allocator* a = fs_allocator_create(FS_BACKING_HOST);
  const int64_t lanes[2] = {fs_lane_create(a, 4 << 20, 0), fs_lane_create(a, 4 << 20, 0)};
  for (int tag = 0; tag < kThreads / 2; ++tag) fs_assign_tag(a, tag, lanes[tag % 2]);  // two threads per tag
  fs_set_tag_cap(a, 3, kCap);
  fs_bind_stream(a, kStream, lanes[0]);
  fs_set_lane_tag(a, lanes[0], 0);

  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      fs_lane_stats ls;
      fs_tag_stats ts;
      for (int64_t lane : lanes) fs_lane_stats_get(a, lane, &ls);
      for (int tag = 0; tag < kThreads / 2; ++tag) {
        fs_tag_stats_get(a, tag, &ts);
        if (tag == 3) expect(ts.live <= kCap, "capped tag stays under its cap");
        fs_reset_peak(a, tag);
      }
    }
  });

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<void*> mine;
      const int64_t tag = t % (kThreads / 2);
      fs_set_thread_tag(t == kThreads - 1 ? FS_NO_TAG : tag);  // the last thread relies on the stream
      for (int i = 0; i < kOps; ++i) {
        if (mine.empty() || rng() % 3 != 0) {
          const int64_t size = 1 + static_cast<int64_t>(rng() % 20000);
          void* p = i % 97 == 0 ? fs_malloc(a, size, FS_NO_TAG)  // outside every lane
                                : fs_malloc_current(a, size, -1, kStream);
          if (p != nullptr) {
            expect(reinterpret_cast<uintptr_t>(p) % FS_ALIGNMENT == 0, "aligned");
            mine.push_back(p);
          }
        } else {
          const std::size_t k = rng() % mine.size();
          expect(fs_free(a, mine[k]) == FS_OK, "free succeeds");
          mine[k] = mine.back();
          mine.pop_back();
        }
      }
      for (void* p : mine) expect(fs_free(a, p) == FS_OK, "final free succeeds");
    });
  }
  for (auto& th : threads) th.join();
  done.store(true);
  reader.join();

  char why[256] = {0};
  for (int64_t lane : lanes) {
    expect(fs_lane_check(a, lane, why, sizeof(why)) == FS_OK, why);
    fs_lane_stats ls;
    fs_lane_stats_get(a, lane, &ls);
    expect(ls.used == 0 && ls.free_blocks == 1 && ls.largest_free == ls.capacity, "lane empty and coalesced");
  }
  expect(fs_allocator_live_bytes(a) == 0, "no live bytes left");
  for (int64_t lane : lanes) expect(fs_lane_dissolve(a, lane) == FS_OK, "dissolve");
  fs_allocator_destroy(a);
  std::printf(failures == 0 ? "ok\n" : "%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
