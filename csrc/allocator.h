// The lane allocator: lanes (arenas over backing memory), tags (per-trial accounting and caps), and
// the locking that makes them safe to use from many threads.
//
// Locking, from outermost to innermost; no path takes them in another order:
//   1. Allocator::mu_ (shared_mutex): shared for malloc/free/stats, exclusive to add, resize or remove lanes
//      (and so their segments and the device pools) and tags, to assign tags or bind streams.
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

// A piece of a lane's memory with its own arena. A lane starts as one segment and gains another when it must
// grow while blocks are live and the memory right after its last segment is taken.
struct Segment {
  Segment(const Region& region_, bool pooled_) : region(region_), arena(region_.bytes), pooled(pooled_) {}
  Region region;      // changed only under the allocator's exclusive lock (a pooled segment grows or shrinks)
  Arena arena;        // guarded by the lane's mu
  const bool pooled;  // a block of the device's pool (given back by bookkeeping), else memory from the backing
};

struct Lane {
  Lane(std::int64_t id_, std::int64_t device_, std::size_t capacity_) : id(id_), device(device_), capacity(capacity_) {}
  const std::int64_t id;
  const std::int64_t device;
  // Changed only under the allocator's exclusive lock (read under its shared lock):
  std::vector<std::unique_ptr<Segment>> segments;
  std::size_t capacity;  // the hard cap on the lane's live bytes; segments hold at least this much (unless retired)
  bool retired = false;  // dissolved while blocks were live: its memory goes back as they are freed
  std::mutex mu;
  std::size_t used = 0;                 // guarded by mu: live bytes over every segment
  std::vector<void*> freed_on_streams;  // guarded by mu: streams with frees not yet synchronised
  std::atomic<std::int64_t> active_tag{FS_NO_TAG};

  // Bytes of memory the lane holds (the sum of its segments).
  std::size_t reserved() const {
    std::size_t total = 0;
    for (const auto& s : segments) total += s->region.bytes;
    return total;
  }
};

// One region of a device's memory, obtained once, that lane segments are carved from: opening, growing,
// shrinking and dissolving a lane then costs bookkeeping only (no cudaMalloc/cudaFree).
struct Pool {
  explicit Pool(const Region& region_) : region(region_), arena(region_.bytes) {}
  Region region;
  Arena arena;  // guarded by the allocator's exclusive lock; its live blocks are segments, tagged with the lane
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

  std::int64_t set_pool(std::int64_t device, std::int64_t bytes);
  std::int64_t pool_stats(std::int64_t device, fs_pool_stats* out);

  std::int64_t create_lane(std::int64_t capacity, std::int64_t device);
  std::int64_t dissolve_lane(std::int64_t lane);
  std::int64_t retire_lane(std::int64_t lane);
  std::int64_t reap();
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

  // On failure returns nullptr and sets *status. A request within the lane's cap that no free block holds
  // (the lane's free memory is fragmented) is served from more memory for the lane (`overdraw`): the cap
  // bounds live bytes, not where they lie. LANE_FULL only when the cap would be passed or no memory is left.
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

  struct SegmentRef {
    std::shared_ptr<Lane> lane;
    Segment* segment;
  };
  using Segments = std::vector<std::unique_ptr<Segment>>;

  std::shared_ptr<Lane> find_lane(std::int64_t lane) const;        // caller holds mu_
  std::shared_ptr<TagState> find_tag(std::int64_t tag) const;      // caller holds mu_
  std::shared_ptr<TagState> tag_or_create(std::int64_t tag);       // caller holds mu_ exclusively
  SegmentRef segment_holding(std::uintptr_t address) const;        // caller holds mu_
  // The rest: the caller holds mu_ exclusively. Regions of unpooled segments that must go back to the backing are
  // appended to `release` (given back after the lock is dropped: cudaFree can take milliseconds).
  // `bytes` for a lane on `device`: carved from the device's pool, else one segment from the backing.
  bool obtain(std::int64_t device, std::size_t bytes, std::int64_t lane, Segments* out, std::string* why);
  bool carve(Pool& pool, std::size_t bytes, std::int64_t lane, std::int64_t device, Segments* out, std::string* why);
  void attach(const std::shared_ptr<Lane>& lane, std::unique_ptr<Segment> segment);
  void give_back(Lane& lane, std::size_t index, std::vector<Region>* release);
  bool grow(const std::shared_ptr<Lane>& lane, std::size_t extra, std::string* why);
  // Grow the lane's last segment by `extra` in place, if it is pooled and the pool's memory after it is free.
  bool grow_in_place(Pool& pool, Lane& lane, std::size_t extra);
  // A new segment of `bytes` from the backing (a lane without a pool).
  bool attach_from_backing(const std::shared_ptr<Lane>& lane, std::size_t bytes, std::string* why);
  // A free block of `bytes` for a lane whose free memory is all in smaller pieces: the last segment grows in
  // place by what its free tail lacks, else the lane gains a segment of `bytes` (one piece of the pool, or one
  // region from the backing). Its reserved memory then exceeds its capacity (trim gives the excess back).
  bool overdraw(const std::shared_ptr<Lane>& lane, std::size_t bytes, std::string* why);
  void trim(Lane& lane, std::vector<Region>* release);
  void erase_lane(std::int64_t lane);
  void reap_locked(std::vector<Region>* release);
  void release_all(const std::vector<Region>& regions, const std::shared_ptr<Backing>& backing);
  // One allocation attempt under the shared lock. With `may_defer`, a request the lane's cap allows but no
  // free block holds returns nullptr with *status = kFragmented, uncounted, for malloc to make room.
  void* malloc_once(std::int64_t size, std::int64_t tag, std::int64_t device, void* stream, bool may_defer,
                    std::int64_t* status);
  // Take the exclusive lock and give the tag's lane a free block of `bytes` if it still has none (overdraw).
  bool make_room(std::int64_t tag, std::size_t bytes, std::string* why);

  mutable std::shared_mutex mu_;
  std::shared_ptr<Backing> backing_;  // replaced only while there are no lanes, pools or allocations
  std::int64_t next_lane_ = 0;
  std::unordered_map<std::int64_t, std::shared_ptr<Lane>> lanes_;
  std::map<std::uintptr_t, SegmentRef> segments_by_base_;
  std::unordered_map<std::int64_t, std::unique_ptr<Pool>> pools_;  // by device
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
