// The lane allocator: lanes (arenas over backing memory), tags (per-trial accounting and caps), and
// the locking that makes them safe to use from many threads.
//
// Locking, from outermost to innermost; no path takes them in another order:
//   1. Allocator::mu_ (shared_mutex): shared for malloc/free/stats, exclusive to add or remove lanes and
//      tags, to assign tags or bind streams.
//   2. TagState::mu: held by malloc across the cap check, the arena allocation and the accounting, so a
//      tag's live bytes never pass its cap, even with several threads allocating for the same tag.
//   3. Lane::mu: held around arena operations.
// free() takes the lane lock, releases it, then takes the tag lock (never both at once).
#ifndef FLUIDSALUS_ALLOCATOR_H_
#define FLUIDSALUS_ALLOCATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "arena.h"
#include "backing.h"
#include "lane_allocator.h"

namespace fluidsalus {

struct Lane {
  Lane(std::int64_t id_, const Region& region_) : id(id_), region(region_), arena(region_.bytes) {}
  const std::int64_t id;
  Region region;  // changed only under the allocator's exclusive lock, when the lane is empty
  std::mutex mu;
  Arena arena;                          // guarded by mu
  std::vector<void*> freed_on_streams;  // guarded by mu: streams with frees not yet synchronised
  std::atomic<std::int64_t> active_tag{FS_NO_TAG};
};

struct TagState {
  std::mutex mu;  // guards the counters below
  std::int64_t live = 0;
  std::int64_t peak = 0;
  std::int64_t allocations = 0;
  std::int64_t failures = 0;
  // Changed under the allocator's exclusive lock (and mu); read under its shared lock or mu.
  std::int64_t lane = FS_NO_LANE;
  std::int64_t cap = FS_UNLIMITED;
};

class Allocator {
 public:
  explicit Allocator(std::unique_ptr<Backing> backing);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  std::int64_t backing_kind() const;
  std::int64_t set_backing(std::int64_t kind);

  std::int64_t create_lane(std::int64_t capacity, std::int64_t device);
  std::int64_t dissolve_lane(std::int64_t lane);
  std::int64_t resize_lane(std::int64_t lane, std::int64_t capacity);
  std::int64_t lane_stats(std::int64_t lane, fs_lane_stats* out);
  std::int64_t lane_blocks(std::int64_t lane, fs_block_info* out, std::int64_t max);
  std::int64_t check_lane(std::int64_t lane, std::string* why);
  std::int64_t list_lanes(std::int64_t* out, std::int64_t max);

  std::int64_t assign_tag(std::int64_t tag, std::int64_t lane);
  std::int64_t set_tag_cap(std::int64_t tag, std::int64_t cap);
  std::int64_t tag_stats(std::int64_t tag, fs_tag_stats* out);
  std::int64_t reset_peak(std::int64_t tag);
  std::int64_t forget_tag(std::int64_t tag);

  std::int64_t bind_stream(void* stream, std::int64_t lane);
  std::int64_t set_lane_tag(std::int64_t lane, std::int64_t tag);
  // The tag fs_malloc_current charges: the thread's, else the stream's lane's active tag, else none.
  std::int64_t current_tag(void* stream);

  // On failure returns nullptr and sets *status.
  void* malloc(std::int64_t size, std::int64_t tag, std::int64_t device, void* stream, std::int64_t* status);
  std::int64_t free(void* ptr, void* stream);
  std::int64_t live_bytes();

  // A one-line account of why `tag` could not get `size` bytes, for error messages.
  std::string describe_failure(std::int64_t tag, std::int64_t size, std::int64_t status);

 private:
  struct Passthrough {
    Region region;
    std::int64_t tag;
  };

  std::shared_ptr<Lane> find_lane(std::int64_t lane) const;        // caller holds mu_
  std::shared_ptr<TagState> find_tag(std::int64_t tag) const;      // caller holds mu_
  std::shared_ptr<TagState> tag_or_create(std::int64_t tag);       // caller holds mu_ exclusively
  std::shared_ptr<Lane> lane_holding(std::uintptr_t address) const;  // caller holds mu_

  mutable std::shared_mutex mu_;
  std::shared_ptr<Backing> backing_;  // replaced only while there are no lanes and no allocations
  std::int64_t next_lane_ = 0;
  std::unordered_map<std::int64_t, std::shared_ptr<Lane>> lanes_;
  std::map<std::uintptr_t, std::shared_ptr<Lane>> lanes_by_base_;
  std::unordered_map<std::int64_t, std::shared_ptr<TagState>> tags_;
  std::unordered_map<void*, std::int64_t> stream_lanes_;

  std::mutex passthrough_mu_;
  std::unordered_map<std::uintptr_t, Passthrough> passthrough_;  // guarded by passthrough_mu_
};

// The calling thread's tag (fs_set_thread_tag).
std::int64_t thread_tag();
void set_thread_tag(std::int64_t tag);

// The process-wide allocator behind fs_global_allocator() and the CUDA entry points.
Allocator& global_allocator();
// Keep `status` as the calling thread's last error (fs_last_error); returns it.
std::int64_t record_status(std::int64_t status);
// A detail of the calling thread's last failure (fs_last_error_detail), e.g. why cudaMalloc failed.
void set_error_detail(std::string detail);
const std::string& error_detail();

}  // namespace fluidsalus

#endif  // FLUIDSALUS_ALLOCATOR_H_
