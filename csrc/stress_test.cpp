// Multi-threaded stress test of the lane allocator, for sanitizer builds. Not part of the package build.
//
//   cd csrc && g++ -std=c++17 -O1 -g -fsanitize=thread -o /tmp/fs_stress stress_test.cpp arena.cpp
//       backing.cpp allocator.cpp lane_allocator.cpp cuda_hooks.cpp -ldl -pthread   (one command line)
//   /tmp/fs_stress            # exit status 0, "ok" on the last line
//
// (-fsanitize=address,undefined works the same way.) Threads allocate and free at random in two lanes carved
// from a device pool, with tags shared between threads, a capped tag, the stream fallback and untagged
// allocations outside the lanes, while another thread reads statistics and resets peaks and a third grows and
// shrinks the lanes under them and opens and retires a scratch lane; at the end every total must agree.
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
  expect(fs_pool_set(a, 0, 32 << 20) == FS_OK, "pool");
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

  std::thread resizer([&] {
    std::mt19937 rng(99);
    int64_t scratch = -1;
    while (!done.load()) {
      for (int64_t lane : lanes) fs_lane_resize(a, lane, (3 << 20) + static_cast<int64_t>(rng() % (3 << 20)));
      if (scratch < 0) {
        scratch = fs_lane_create(a, 1 << 20, 0);
        if (scratch >= 0) {
          fs_assign_tag(a, 100, scratch);
          fs_malloc(a, 4096, 100);  // left live: the retired lane keeps it until reaped below
        }
      } else {
        fs_lane_retire(a, scratch);
        scratch = -1;
      }
      fs_reap(a);
    }
    if (scratch >= 0) fs_lane_retire(a, scratch);
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
  resizer.join();

  char why[256] = {0};
  for (int64_t lane : lanes) {
    expect(fs_lane_check(a, lane, why, sizeof(why)) == FS_OK, why);
    fs_lane_stats ls;
    fs_lane_stats_get(a, lane, &ls);
    expect(ls.used == 0 && ls.allocated_blocks == 0, "lane empty");
    expect(fs_lane_resize(a, lane, 4 << 20) == FS_OK, "resize empty");
    fs_lane_stats_get(a, lane, &ls);
    expect(ls.segments == 1 && ls.free_blocks == 1 && ls.largest_free == ls.capacity, "one coalesced piece");
  }
  fs_tag_stats scratch_tag;
  expect(fs_tag_stats_get(a, 100, &scratch_tag) == FS_OK, "scratch tag");
  expect(fs_allocator_live_bytes(a) == scratch_tag.live, "no live bytes left but the scratch lanes'");
  for (int64_t lane : lanes) expect(fs_lane_dissolve(a, lane) == FS_OK, "dissolve");
  fs_pool_stats ps;
  fs_pool_stats_get(a, 0, &ps);
  // each retired scratch lane gave back all but the block it still holds
  expect(ps.used == scratch_tag.live, "only the retired scratch lanes' live blocks are left in the pool");
  fs_allocator_destroy(a);
  std::printf(failures == 0 ? "ok\n" : "%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
