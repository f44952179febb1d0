#include "allocator.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <utility>

namespace fluidsalus {
namespace {

thread_local std::int64_t t_thread_tag = FS_NO_TAG;

constexpr std::int64_t kMaxSize = std::numeric_limits<std::int64_t>::max() - static_cast<std::int64_t>(kAlignment);
// malloc_once's internal status for a request within the lane's cap that no free block holds (never returned).
constexpr std::int64_t kFragmented = std::numeric_limits<std::int64_t>::min();

std::string human_bytes(std::int64_t n) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int unit = 0;
  while (v >= 1024.0 && unit < 4) {
    v /= 1024.0;
    ++unit;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), unit == 0 ? "%.0f %s" : "%.2f %s", v, kUnits[unit]);
  return buf;
}

}  // namespace

std::int64_t thread_tag() { return t_thread_tag; }
void set_thread_tag(std::int64_t tag) { t_thread_tag = tag < 0 ? FS_NO_TAG : tag; }

Allocator::Allocator(std::unique_ptr<Backing> backing) : backing_(std::move(backing)) {
  tags_.emplace(FS_NO_TAG, std::make_shared<TagState>());  // untagged allocations are always accounted
}

Allocator::~Allocator() {
  for (auto& [id, lane] : lanes_) {
    for (auto& segment : lane->segments) {
      if (!segment->pooled) backing_->release(segment->region);
    }
  }
  for (auto& [device, pool] : pools_) backing_->release(pool->region);
  for (auto& [address, p] : passthrough_) backing_->release(p.region);
}

std::int64_t Allocator::backing_kind() const {
  std::shared_lock lock(mu_);
  return backing_->kind();
}

std::int64_t Allocator::set_backing(std::int64_t kind) {
  std::unique_ptr<Backing> backing = make_backing(kind);
  if (!backing) return FS_ERR_INVALID;
  std::unique_lock lock(mu_);
  if (backing_->kind() == kind) return FS_OK;
  std::lock_guard pt(passthrough_mu_);
  if (!lanes_.empty() || !pools_.empty() || !passthrough_.empty()) return FS_ERR_LANE_BUSY;
  backing_ = std::move(backing);
  return FS_OK;
}

// ---- lookups (the caller holds mu_) -----------------------------------------------------------------

std::shared_ptr<Lane> Allocator::find_lane(std::int64_t lane) const {
  auto it = lanes_.find(lane);
  return it == lanes_.end() ? nullptr : it->second;
}

std::shared_ptr<TagState> Allocator::find_tag(std::int64_t tag) const {
  auto it = tags_.find(tag);
  return it == tags_.end() ? nullptr : it->second;
}

std::shared_ptr<TagState> Allocator::tag_or_create(std::int64_t tag) {
  auto& slot = tags_[tag];
  if (!slot) slot = std::make_shared<TagState>();
  return slot;
}

Allocator::SegmentRef Allocator::segment_holding(std::uintptr_t address) const {
  auto it = segments_by_base_.upper_bound(address);
  if (it == segments_by_base_.begin()) return {nullptr, nullptr};
  --it;
  const Region& r = it->second.segment->region;
  return address < r.base + r.bytes ? it->second : SegmentRef{nullptr, nullptr};
}

// ---- pools and segments (the caller holds mu_ exclusively) -----------------------------------------
// Under the exclusive lock no other thread holds a lane or tag lock (they are only taken under the
// shared lock), so exclusive sections touch lanes, segments, pools and tags directly.

bool Allocator::carve(Pool& pool, std::size_t bytes, std::int64_t lane, std::int64_t device, Segments* out,
                      std::string* why) {
  const std::size_t available = pool.arena.capacity() - pool.arena.used();
  if (available < bytes) {
    *why = "the device pool has " + human_bytes(static_cast<std::int64_t>(available)) + " free, " +
           human_bytes(static_cast<std::int64_t>(bytes)) + " wanted";
    return false;
  }
  // One piece when the pool has one large enough; else the largest pieces until the request is covered.
  Segments taken;
  std::size_t remaining = bytes;
  while (remaining > 0) {
    const std::size_t piece = std::min(remaining, pool.arena.largest_free());
    auto offset = pool.arena.allocate(piece, lane);
    if (!offset) break;  // cannot happen: `available` covers the request
    Region region{nullptr, pool.region.base + *offset, piece, device};
    taken.push_back(std::make_unique<Segment>(region, true));
    remaining -= piece;
  }
  if (remaining > 0) {
    for (auto& segment : taken) pool.arena.release(segment->region.base - pool.region.base);
    *why = "the device pool could not be carved";
    return false;
  }
  for (auto& segment : taken) out->push_back(std::move(segment));
  return true;
}

bool Allocator::obtain(std::int64_t device, std::size_t bytes, std::int64_t lane, Segments* out, std::string* why) {
  auto it = pools_.find(device);
  if (it != pools_.end()) return carve(*it->second, bytes, lane, device, out, why);
  Region region;
  if (!backing_->reserve(bytes, device, &region, why)) return false;
  try {
    out->push_back(std::make_unique<Segment>(region, false));
  } catch (...) {
    backing_->release(region);
    throw;
  }
  return true;
}

void Allocator::attach(const std::shared_ptr<Lane>& lane, std::unique_ptr<Segment> segment) {
  Segment* raw = segment.get();
  lane->segments.push_back(std::move(segment));
  segments_by_base_.emplace(raw->region.base, SegmentRef{lane, raw});
}

void Allocator::give_back(Lane& lane, std::size_t index, std::vector<Region>* release) {
  Segment& segment = *lane.segments[index];
  segments_by_base_.erase(segment.region.base);
  if (segment.pooled) {
    Pool& pool = *pools_.at(segment.region.device);
    pool.arena.release(segment.region.base - pool.region.base);
  } else {
    release->push_back(segment.region);
  }
  lane.segments.erase(lane.segments.begin() + static_cast<std::ptrdiff_t>(index));
}

bool Allocator::grow_in_place(Pool& pool, Lane& lane, std::size_t extra) {
  if (lane.segments.empty()) return false;
  Segment& last = *lane.segments.back();
  if (!last.pooled || !pool.arena.grow_block(last.region.base - pool.region.base, last.region.bytes + extra)) {
    return false;
  }
  last.region.bytes += extra;  // the arena gets free space at its end
  last.arena.set_capacity(last.region.bytes);
  return true;
}

bool Allocator::attach_from_backing(const std::shared_ptr<Lane>& lane, std::size_t bytes, std::string* why) {
  Region region;
  if (!backing_->reserve(bytes, lane->device, &region, why)) return false;
  try {
    attach(lane, std::make_unique<Segment>(region, false));
  } catch (...) {
    backing_->release(region);
    throw;
  }
  return true;
}

bool Allocator::grow(const std::shared_ptr<Lane>& lane, std::size_t extra, std::string* why) {
  auto pool_it = pools_.find(lane->device);
  if (pool_it == pools_.end()) return attach_from_backing(lane, extra, why);
  Pool& pool = *pool_it->second;
  if (grow_in_place(pool, *lane, extra)) return true;
  Segments added;
  if (!carve(pool, extra, lane->id, lane->device, &added, why)) return false;
  for (auto& segment : added) attach(lane, std::move(segment));
  return true;
}

bool Allocator::overdraw(const std::shared_ptr<Lane>& lane, std::size_t bytes, std::string* why) {
  auto pool_it = pools_.find(lane->device);
  if (pool_it == pools_.end()) return attach_from_backing(lane, bytes, why);
  Pool& pool = *pool_it->second;
  // The free tail is smaller than `bytes` (else best fit would have found it): grow by what it lacks.
  const std::size_t tail = lane->segments.empty() ? 0 : lane->segments.back()->arena.free_tail();
  if (grow_in_place(pool, *lane, bytes - std::min(tail, bytes))) return true;
  // Else one piece of the request's size (carve would take several pieces of a fragmented pool).
  auto offset = pool.arena.largest_free() >= bytes ? pool.arena.allocate(bytes, lane->id) : std::nullopt;
  if (!offset) {
    *why = "the lane's free memory is in pieces smaller than that, and the device pool has no free piece of " +
           human_bytes(static_cast<std::int64_t>(bytes)) + " (largest " +
           human_bytes(static_cast<std::int64_t>(pool.arena.largest_free())) + ")";
    return false;
  }
  attach(lane, std::make_unique<Segment>(Region{nullptr, pool.region.base + *offset, bytes, lane->device}, true));
  return true;
}

void Allocator::trim(Lane& lane, std::vector<Region>* release) {
  // Newest segments first: a lane's first segment is the one it keeps longest.
  for (std::size_t i = lane.segments.size(); i-- > 0;) {
    std::size_t reserved = lane.reserved();
    if (reserved <= lane.capacity) return;
    Segment& segment = *lane.segments[i];
    const std::size_t excess = reserved - lane.capacity;
    if (segment.arena.used() == 0 && segment.region.bytes <= excess) {
      give_back(lane, i, release);
      continue;
    }
    if (!segment.pooled) continue;  // memory from the backing goes back only as a whole
    const std::size_t cut = std::min(excess, segment.arena.free_tail());
    if (cut == 0) continue;
    Pool& pool = *pools_.at(segment.region.device);
    const std::size_t new_bytes = segment.region.bytes - cut;
    pool.arena.shrink_block(segment.region.base - pool.region.base, new_bytes);
    segment.arena.set_capacity(new_bytes);
    segment.region.bytes = new_bytes;
  }
}

void Allocator::erase_lane(std::int64_t lane_id) {
  lanes_.erase(lane_id);
  for (auto& [tag, ts] : tags_) {
    if (ts->lane == lane_id) ts->lane = FS_NO_LANE;
  }
  for (auto it = stream_lanes_.begin(); it != stream_lanes_.end();) {
    it = it->second == lane_id ? stream_lanes_.erase(it) : std::next(it);
  }
}

void Allocator::reap_locked(std::vector<Region>* release) {
  std::vector<std::int64_t> emptied;
  for (auto& [id, lane] : lanes_) {
    // Retired (capacity 0): every free segment and free pooled tail goes back. Else what an overdraw or a
    // shrink left above the capacity goes back once the blocks that held it are freed.
    if (lane->reserved() > lane->capacity) trim(*lane, release);
    if (lane->retired && lane->used == 0) emptied.push_back(id);
  }
  for (std::int64_t id : emptied) {
    auto lane = lanes_.at(id);
    while (!lane->segments.empty()) give_back(*lane, lane->segments.size() - 1, release);
    erase_lane(id);
  }
}

void Allocator::release_all(const std::vector<Region>& regions, const std::shared_ptr<Backing>& backing) {
  for (const Region& region : regions) backing->release(region);
}

std::int64_t Allocator::set_pool(std::int64_t device, std::int64_t bytes) {
  if (bytes < 0 || bytes > kMaxSize) return FS_ERR_INVALID;
  std::unique_lock lock(mu_);
  for (const auto& [id, lane] : lanes_) {
    if (lane->device == device) return FS_ERR_LANE_BUSY;
  }
  auto it = pools_.find(device);
  if (it != pools_.end()) {
    backing_->release(it->second->region);
    pools_.erase(it);
  }
  const std::size_t rounded = round_down(static_cast<std::size_t>(bytes), kAlignment);
  if (rounded == 0) return FS_OK;
  Region region;
  std::string why;
  if (!backing_->reserve(rounded, device, &region, &why)) {
    set_error_detail(why);
    return FS_ERR_BACKING;
  }
  try {
    pools_.emplace(device, std::make_unique<Pool>(region));
  } catch (...) {
    backing_->release(region);
    throw;
  }
  return FS_OK;
}

std::int64_t Allocator::pool_stats(std::int64_t device, fs_pool_stats* out) {
  if (out == nullptr) return FS_ERR_INVALID;
  std::shared_lock lock(mu_);
  auto it = pools_.find(device);
  if (it == pools_.end()) return FS_ERR_NO_LANE;
  const Pool& pool = *it->second;
  *out = fs_pool_stats{device,
                       static_cast<std::int64_t>(pool.arena.capacity()),
                       static_cast<std::int64_t>(pool.arena.used()),
                       static_cast<std::int64_t>(pool.arena.largest_free()),
                       static_cast<std::int64_t>(pool.arena.free_blocks()),
                       static_cast<std::int64_t>(pool.arena.allocated_blocks()),
                       static_cast<std::int64_t>(pool.region.base)};
  return FS_OK;
}

// ---- lanes ------------------------------------------------------------------------------------------

std::int64_t Allocator::create_lane(std::int64_t capacity, std::int64_t device) {
  if (capacity < static_cast<std::int64_t>(kAlignment) || capacity > kMaxSize) return FS_ERR_INVALID;
  const std::size_t bytes = round_down(static_cast<std::size_t>(capacity), kAlignment);
  std::vector<Region> release;
  std::string why;
  bool pooled = false;
  std::shared_ptr<Backing> backing;
  {
    std::shared_lock lock(mu_);
    pooled = pools_.count(device) > 0;
    backing = backing_;
  }
  Region region;
  if (!pooled) {
    // Obtain the memory without blocking the other lanes (cudaMalloc can take milliseconds).
    if (!backing->reserve(bytes, device, &region, &why)) {
      set_error_detail(why);
      return FS_ERR_BACKING;
    }
  }
  std::unique_lock lock(mu_);
  if (backing != backing_ || (pools_.count(device) > 0) != pooled) {
    lock.unlock();
    if (!pooled) backing->release(region);
    set_error_detail("the allocator's backing or pools changed while the lane was being created");
    return FS_ERR_LANE_BUSY;
  }
  reap_locked(&release);
  const std::int64_t id = next_lane_;
  auto lane = std::make_shared<Lane>(id, device, bytes);
  Segments segments;
  if (pooled) {
    if (!carve(*pools_.at(device), bytes, id, device, &segments, &why)) {
      lock.unlock();
      release_all(release, backing);
      set_error_detail(why);
      return FS_ERR_BACKING;
    }
  } else {
    segments.push_back(std::make_unique<Segment>(region, false));
  }
  ++next_lane_;
  lanes_.emplace(id, lane);
  for (auto& segment : segments) attach(lane, std::move(segment));
  lock.unlock();
  release_all(release, backing);
  return id;
}

std::int64_t Allocator::dissolve_lane(std::int64_t lane_id) {
  std::vector<Region> release;
  std::shared_ptr<Backing> backing;
  {
    std::unique_lock lock(mu_);
    auto lane = find_lane(lane_id);
    if (!lane) return FS_ERR_NO_LANE;
    if (lane->used > 0) return FS_ERR_LANE_BUSY;
    backing = backing_;
    while (!lane->segments.empty()) give_back(*lane, lane->segments.size() - 1, &release);
    erase_lane(lane_id);
    reap_locked(&release);
  }
  release_all(release, backing);  // outside the lock: cudaFree can take milliseconds
  return FS_OK;
}

std::int64_t Allocator::retire_lane(std::int64_t lane_id) {
  std::vector<Region> release;
  std::shared_ptr<Backing> backing;
  {
    std::unique_lock lock(mu_);
    auto lane = find_lane(lane_id);
    if (!lane) return FS_ERR_NO_LANE;
    backing = backing_;
    if (!lane->retired) {
      lane->retired = true;
      lane->capacity = 0;  // nothing more is allocated here
      lane->active_tag.store(FS_NO_TAG);
      for (auto& [tag, ts] : tags_) {
        if (ts->lane == lane_id) ts->lane = FS_NO_LANE;
      }
      for (auto it = stream_lanes_.begin(); it != stream_lanes_.end();) {
        it = it->second == lane_id ? stream_lanes_.erase(it) : std::next(it);
      }
    }
    reap_locked(&release);
  }
  release_all(release, backing);
  return FS_OK;
}

std::int64_t Allocator::reap() {
  std::vector<Region> release;
  std::shared_ptr<Backing> backing;
  const std::size_t dissolved = [&] {
    std::unique_lock lock(mu_);
    backing = backing_;
    const std::size_t before = lanes_.size();
    reap_locked(&release);
    return before - lanes_.size();
  }();
  release_all(release, backing);
  return static_cast<std::int64_t>(dissolved);
}

std::int64_t Allocator::resize_lane(std::int64_t lane_id, std::int64_t capacity) {
  if (capacity < static_cast<std::int64_t>(kAlignment) || capacity > kMaxSize) return FS_ERR_INVALID;
  const std::size_t bytes = round_down(static_cast<std::size_t>(capacity), kAlignment);
  std::vector<Region> release;
  std::shared_ptr<Backing> backing;
  std::int64_t status = FS_OK;
  {
    std::unique_lock lock(mu_);
    backing = backing_;
    reap_locked(&release);
    auto lane = find_lane(lane_id);
    if (!lane || lane->retired) {
      status = FS_ERR_NO_LANE;
    } else if (lane->used == 0 && (lane->segments.size() > 1 || lane->reserved() != bytes)) {
      // Empty: start over in one piece where possible. The old memory goes back first (under the lock, as
      // it must really be free before it is asked for again: on a device, old and new may not fit side by side).
      std::vector<Region> old;
      while (!lane->segments.empty()) give_back(*lane, lane->segments.size() - 1, &old);
      release_all(old, backing_);
      lane->freed_on_streams.clear();  // releasing the old memory synchronised with its work
      std::string why;
      Segments fresh;
      if (obtain(lane->device, bytes, lane->id, &fresh, &why)) {
        lane->capacity = bytes;
      } else {
        status = FS_ERR_BACKING;
        set_error_detail(why + "; the lane keeps its old capacity");
        if (!obtain(lane->device, lane->capacity, lane->id, &fresh, &why)) {
          // Not even the old size is available any more: the lane is gone.
          set_error_detail(why + "; the old capacity is not available either: the lane is dissolved");
          erase_lane(lane_id);
        }
      }
      for (auto& segment : fresh) attach(lane, std::move(segment));
    } else {
      const std::size_t reserved = lane->reserved();
      std::string why;
      if (bytes > reserved && !grow(lane, bytes - reserved, &why)) {
        status = FS_ERR_BACKING;
        set_error_detail(why + "; the lane keeps its capacity");
      } else {
        lane->capacity = bytes;
        trim(*lane, &release);
      }
    }
  }
  release_all(release, backing);
  return status;
}

std::int64_t Allocator::lane_stats(std::int64_t lane_id, fs_lane_stats* out) {
  if (out == nullptr) return FS_ERR_INVALID;
  std::shared_lock lock(mu_);
  auto lane = find_lane(lane_id);
  if (!lane) return FS_ERR_NO_LANE;
  std::int64_t tags = 0;
  for (const auto& [tag, ts] : tags_) tags += ts->lane == lane_id ? 1 : 0;
  std::lock_guard lane_lock(lane->mu);
  std::size_t largest = 0, allocated = 0, free_blocks = 0;
  for (const auto& segment : lane->segments) {
    largest = std::max(largest, segment->arena.largest_free());
    allocated += segment->arena.allocated_blocks();
    free_blocks += segment->arena.free_blocks();
  }
  // The largest allocation that can succeed now: a free block, within the cap.
  const std::size_t room = lane->capacity > lane->used ? lane->capacity - lane->used : 0;
  *out = fs_lane_stats{lane_id,
                       lane->device,
                       static_cast<std::int64_t>(lane->capacity),
                       static_cast<std::int64_t>(lane->used),
                       static_cast<std::int64_t>(std::min(largest, round_down(room, kAlignment))),
                       static_cast<std::int64_t>(allocated),
                       static_cast<std::int64_t>(free_blocks),
                       tags,
                       lane->active_tag.load(),
                       lane->segments.empty() ? 0 : static_cast<std::int64_t>(lane->segments.front()->region.base),
                       static_cast<std::int64_t>(lane->reserved()),
                       static_cast<std::int64_t>(lane->segments.size()),
                       lane->retired ? 1 : 0};
  return FS_OK;
}

std::int64_t Allocator::lane_blocks(std::int64_t lane_id, fs_block_info* out, std::int64_t max) {
  if (max < 0 || (max > 0 && out == nullptr)) return FS_ERR_INVALID;
  std::shared_lock lock(mu_);
  auto lane = find_lane(lane_id);
  if (!lane) return FS_ERR_NO_LANE;
  std::lock_guard lane_lock(lane->mu);
  std::int64_t i = 0;
  for (std::size_t s = 0; s < lane->segments.size(); ++s) {
    const Segment& segment = *lane->segments[s];
    for (const auto& [offset, block] : segment.arena.blocks()) {
      if (i < max) {
        out[i] = fs_block_info{static_cast<std::int64_t>(offset),
                               static_cast<std::int64_t>(block.size),
                               block.tag,
                               block.free ? 1 : 0,
                               static_cast<std::int64_t>(s),
                               static_cast<std::int64_t>(segment.region.base + offset)};
      }
      ++i;
    }
  }
  return i;
}

std::int64_t Allocator::check_lane(std::int64_t lane_id, std::string* why) {
  std::shared_lock lock(mu_);
  auto lane = find_lane(lane_id);
  if (!lane) return FS_ERR_NO_LANE;
  std::lock_guard lane_lock(lane->mu);
  auto fail = [why](const std::string& msg) {
    *why = msg;
    return FS_ERR_INTERNAL;
  };
  if (!lane->retired && lane->segments.empty()) return fail("a live lane has no memory");
  if (!lane->retired && lane->reserved() < lane->capacity) {
    return fail("the lane holds " + std::to_string(lane->reserved()) + " bytes, less than its capacity " +
                std::to_string(lane->capacity));
  }
  std::size_t used = 0;
  for (std::size_t s = 0; s < lane->segments.size(); ++s) {
    const Segment& segment = *lane->segments[s];
    const std::string at = "segment " + std::to_string(s) + ": ";
    if (segment.region.base % kAlignment != 0) return fail(at + "base is not aligned");
    if (segment.arena.capacity() != segment.region.bytes) return fail(at + "arena capacity differs from its memory");
    auto indexed = segments_by_base_.find(segment.region.base);
    if (indexed == segments_by_base_.end() || indexed->second.segment != &segment || indexed->second.lane != lane) {
      return fail(at + "missing from the address index");
    }
    if (segment.pooled) {
      auto pool = pools_.find(lane->device);
      if (pool == pools_.end()) return fail(at + "pooled, but the device has no pool");
      const auto& blocks = pool->second->arena.blocks();
      auto block = blocks.find(segment.region.base - pool->second->region.base);
      if (block == blocks.end() || block->second.free || block->second.size != segment.region.bytes ||
          block->second.tag != lane->id) {
        return fail(at + "does not match its block of the device pool");
      }
    }
    if (!segment.arena.check(why)) {
      *why = at + *why;
      return FS_ERR_INTERNAL;
    }
    used += segment.arena.used();
  }
  if (used != lane->used) {
    return fail("used counter " + std::to_string(lane->used) + " != live bytes of the segments " + std::to_string(used));
  }
  return FS_OK;
}

std::int64_t Allocator::list_lanes(std::int64_t* out, std::int64_t max) {
  if (max < 0 || (max > 0 && out == nullptr)) return FS_ERR_INVALID;
  std::shared_lock lock(mu_);
  std::vector<std::int64_t> ids;
  ids.reserve(lanes_.size());
  for (const auto& [id, lane] : lanes_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (std::size_t i = 0; i < ids.size() && static_cast<std::int64_t>(i) < max; ++i) out[i] = ids[i];
  return static_cast<std::int64_t>(ids.size());
}

// ---- tags -------------------------------------------------------------------------------------------

std::int64_t Allocator::assign_tag(std::int64_t tag, std::int64_t lane_id) {
  if (tag < FS_NO_TAG || lane_id < FS_NO_LANE) return FS_ERR_INVALID;
  std::unique_lock lock(mu_);
  if (lane_id != FS_NO_LANE) {
    auto lane = find_lane(lane_id);
    if (!lane || lane->retired) return FS_ERR_NO_LANE;
  }
  tag_or_create(tag)->lane = lane_id;
  return FS_OK;
}

std::int64_t Allocator::set_tag_cap(std::int64_t tag, std::int64_t cap) {
  if (tag < FS_NO_TAG || cap < FS_UNLIMITED) return FS_ERR_INVALID;
  std::unique_lock lock(mu_);
  tag_or_create(tag)->cap = cap;
  return FS_OK;
}

std::int64_t Allocator::tag_stats(std::int64_t tag, fs_tag_stats* out) {
  if (out == nullptr) return FS_ERR_INVALID;
  std::shared_lock lock(mu_);
  auto ts = find_tag(tag);
  if (!ts) return FS_ERR_NO_TAG;
  std::lock_guard tag_lock(ts->mu);
  *out = fs_tag_stats{tag, ts->lane, ts->cap, ts->live, ts->peak, ts->allocations, ts->failures};
  return FS_OK;
}

std::int64_t Allocator::reset_peak(std::int64_t tag) {
  std::shared_lock lock(mu_);
  auto ts = find_tag(tag);
  if (!ts) return FS_ERR_NO_TAG;
  std::lock_guard tag_lock(ts->mu);
  ts->peak = ts->live;
  return FS_OK;
}

std::int64_t Allocator::forget_tag(std::int64_t tag) {
  if (tag < 0) return FS_ERR_INVALID;  // the untagged account always exists
  std::unique_lock lock(mu_);
  auto it = tags_.find(tag);
  if (it == tags_.end()) return FS_ERR_NO_TAG;
  if (it->second->live > 0) return FS_ERR_LANE_BUSY;
  tags_.erase(it);
  for (auto& [id, lane] : lanes_) {
    std::int64_t expected = tag;
    lane->active_tag.compare_exchange_strong(expected, FS_NO_TAG);
  }
  return FS_OK;
}

// ---- streams ----------------------------------------------------------------------------------------

std::int64_t Allocator::bind_stream(void* stream, std::int64_t lane_id) {
  if (lane_id < FS_NO_LANE) return FS_ERR_INVALID;
  std::unique_lock lock(mu_);
  if (lane_id == FS_NO_LANE) {
    stream_lanes_.erase(stream);
    return FS_OK;
  }
  auto lane = find_lane(lane_id);
  if (!lane || lane->retired) return FS_ERR_NO_LANE;
  stream_lanes_[stream] = lane_id;
  return FS_OK;
}

std::int64_t Allocator::set_lane_tag(std::int64_t lane_id, std::int64_t tag) {
  if (tag < FS_NO_TAG) return FS_ERR_INVALID;
  std::shared_lock lock(mu_);
  auto lane = find_lane(lane_id);
  if (!lane) return FS_ERR_NO_LANE;
  lane->active_tag.store(tag);
  return FS_OK;
}

std::int64_t Allocator::current_tag(void* stream) {
  const std::int64_t tag = thread_tag();
  if (tag != FS_NO_TAG) return tag;
  std::shared_lock lock(mu_);
  if (stream_lanes_.empty()) return FS_NO_TAG;
  auto it = stream_lanes_.find(stream);
  if (it == stream_lanes_.end()) return FS_NO_TAG;
  auto lane = find_lane(it->second);
  return lane ? lane->active_tag.load() : FS_NO_TAG;
}

// ---- allocation -------------------------------------------------------------------------------------

void* Allocator::malloc(std::int64_t size, std::int64_t tag, std::int64_t device, void* stream,
                        std::int64_t* status) {
  void* ptr = malloc_once(size, tag, device, stream, true, status);
  if (ptr != nullptr || *status != kFragmented) return ptr;
  std::string why;
  const std::size_t bytes = round_up(std::max<std::size_t>(static_cast<std::size_t>(size), 1), kAlignment);
  if (!make_room(tag, bytes, &why)) set_error_detail(why);
  return malloc_once(size, tag, device, stream, false, status);  // counts the failure if it still has no room
}

bool Allocator::make_room(std::int64_t tag, std::size_t bytes, std::string* why) {
  std::unique_lock lock(mu_);
  auto ts = find_tag(tag);
  auto lane = ts && ts->lane != FS_NO_LANE ? find_lane(ts->lane) : nullptr;
  if (!lane || lane->retired || lane->used + bytes > lane->capacity) return false;  // malloc_once says why
  for (const auto& segment : lane->segments) {
    if (segment->arena.best_fit(bytes)) return true;  // freed meanwhile
  }
  return overdraw(lane, bytes, why);
}

void* Allocator::malloc_once(std::int64_t size, std::int64_t tag, std::int64_t device, void* stream, bool may_defer,
                             std::int64_t* status) {
  if (size < 0 || size > kMaxSize || tag < FS_NO_TAG) {
    *status = FS_ERR_INVALID;
    return nullptr;
  }
  const std::size_t bytes = round_up(std::max<std::size_t>(static_cast<std::size_t>(size), 1), kAlignment);
  const auto signed_bytes = static_cast<std::int64_t>(bytes);

  std::shared_lock lock(mu_);
  auto ts = find_tag(tag);
  if (!ts) {  // a tag that was never assigned (FS_NO_TAG always exists)
    *status = FS_ERR_NO_LANE;
    return nullptr;
  }
  std::shared_ptr<Lane> lane = ts->lane == FS_NO_LANE ? nullptr : find_lane(ts->lane);

  std::lock_guard tag_lock(ts->mu);
  auto refuse = [&](std::int64_t why) -> void* {
    ++ts->failures;
    *status = why;
    return nullptr;
  };
  if (!lane && tag != FS_NO_TAG) return refuse(FS_ERR_NO_LANE);
  if (lane && device >= 0 && lane->device >= 0 && lane->device != device) {
    return refuse(FS_ERR_WRONG_DEVICE);
  }
  if (ts->cap != FS_UNLIMITED && ts->live + signed_bytes > ts->cap) return refuse(FS_ERR_TAG_CAP);

  std::uintptr_t address = 0;
  if (lane) {
    std::lock_guard lane_lock(lane->mu);
    if (!lane->freed_on_streams.empty()) {
      // Blocks freed on another stream may still be in use by its queued work: wait for it first.
      bool own = false;
      for (void* s : lane->freed_on_streams) {
        if (s == stream) {
          own = true;
        } else {
          backing_->synchronize(s);
        }
      }
      lane->freed_on_streams.clear();
      if (own) lane->freed_on_streams.push_back(stream);
    }
    if (lane->used + bytes > lane->capacity) return refuse(FS_ERR_LANE_FULL);
    // Best fit over the lane's segments: the smallest adequate free block, the earlier segment among equals.
    Segment* best = nullptr;
    std::size_t best_size = 0;
    for (const auto& segment : lane->segments) {
      auto fit = segment->arena.best_fit(bytes);
      if (fit && (best == nullptr || fit->first < best_size)) {
        best = segment.get();
        best_size = fit->first;
      }
    }
    if (best == nullptr && may_defer) {
      *status = kFragmented;  // within the cap, but in pieces: malloc makes room under the exclusive lock
      return nullptr;
    }
    if (best == nullptr) return refuse(FS_ERR_LANE_FULL);
    auto offset = best->arena.allocate(bytes, tag);
    if (!offset) return refuse(FS_ERR_LANE_FULL);
    lane->used += bytes;
    address = best->region.base + *offset;
  } else {
    // Untagged and unassigned: straight from the backing, outside every lane.
    Region region;
    std::string why;
    if (!backing_->reserve(bytes, device, &region, &why)) {
      set_error_detail(why);
      return refuse(FS_ERR_BACKING);
    }
    try {
      std::lock_guard pt(passthrough_mu_);
      passthrough_.emplace(region.base, Passthrough{region, tag});
    } catch (...) {
      backing_->release(region);
      throw;
    }
    address = region.base;
  }
  ts->live += signed_bytes;
  ts->peak = std::max(ts->peak, ts->live);
  ++ts->allocations;
  *status = FS_OK;
  return reinterpret_cast<void*>(address);
}

std::int64_t Allocator::free(void* ptr, void* stream) {
  if (ptr == nullptr) return FS_OK;
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  std::shared_lock lock(mu_);
  std::int64_t tag = FS_NO_TAG;
  std::int64_t bytes = 0;
  if (const SegmentRef held = segment_holding(address); held.lane) {
    Lane* lane = held.lane.get();
    std::lock_guard lane_lock(lane->mu);
    auto freed = held.segment->arena.release(address - held.segment->region.base);
    if (!freed) return FS_ERR_NOT_OURS;
    tag = freed->tag;
    bytes = static_cast<std::int64_t>(freed->size);
    lane->used -= freed->size;
    if (backing_->stream_ordered() &&
        std::find(lane->freed_on_streams.begin(), lane->freed_on_streams.end(), stream) ==
            lane->freed_on_streams.end()) {
      lane->freed_on_streams.push_back(stream);
    }
  } else {
    Region region;
    {
      std::lock_guard pt(passthrough_mu_);
      auto it = passthrough_.find(address);
      if (it == passthrough_.end()) return FS_ERR_NOT_OURS;
      region = it->second.region;
      tag = it->second.tag;
      passthrough_.erase(it);
    }
    backing_->release(region);
    bytes = static_cast<std::int64_t>(region.bytes);
  }
  // The tag exists: forget_tag refuses tags with live bytes, and needs the exclusive lock.
  if (auto ts = find_tag(tag)) {
    std::lock_guard tag_lock(ts->mu);
    ts->live -= bytes;
    --ts->allocations;
  }
  return FS_OK;
}

std::int64_t Allocator::live_bytes() {
  std::shared_lock lock(mu_);
  std::int64_t total = 0;
  for (const auto& [tag, ts] : tags_) {
    std::lock_guard tag_lock(ts->mu);
    total += ts->live;
  }
  return total;
}

std::string Allocator::describe_failure(std::int64_t tag, std::int64_t size, std::int64_t status) {
  std::string msg = "fluidsalus lane allocator: ";
  msg += tag == FS_NO_TAG ? std::string("untagged allocation") : "tag " + std::to_string(tag);
  msg += " could not get " + human_bytes(size) + " (" + std::to_string(size) + " bytes): " +
         fs_status_string(status) + ".";
  if (!error_detail().empty()) msg += " " + error_detail() + ".";
  fs_tag_stats ts{};
  if (tag_stats(tag, &ts) == FS_OK) {
    msg += " Tag: live " + human_bytes(ts.live) + ", peak " + human_bytes(ts.peak) + ", cap " +
           (ts.cap == FS_UNLIMITED ? std::string("none") : human_bytes(ts.cap)) + ".";
    fs_lane_stats ls{};
    if (ts.lane != FS_NO_LANE && lane_stats(ts.lane, &ls) == FS_OK) {
      msg += " Lane " + std::to_string(ls.lane) + " (device " + std::to_string(ls.device) + "): capacity " +
             human_bytes(ls.capacity) + ", used " + human_bytes(ls.used) + ", largest free block " +
             human_bytes(ls.largest_free) + ".";
    }
  }
  return msg;
}

}  // namespace fluidsalus
