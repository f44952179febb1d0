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
  for (auto& [id, lane] : lanes_) backing_->release(lane->region);
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
  if (!lanes_.empty() || !passthrough_.empty()) return FS_ERR_LANE_BUSY;
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

std::shared_ptr<Lane> Allocator::lane_holding(std::uintptr_t address) const {
  auto it = lanes_by_base_.upper_bound(address);
  if (it == lanes_by_base_.begin()) return nullptr;
  --it;
  const Region& r = it->second->region;
  return address < r.base + r.bytes ? it->second : nullptr;
}

// ---- lanes ------------------------------------------------------------------------------------------
// Under the exclusive lock no other thread holds a lane or tag lock (they are only taken under the
// shared lock), so exclusive sections touch lanes and tags directly.

std::int64_t Allocator::create_lane(std::int64_t capacity, std::int64_t device) {
  if (capacity < static_cast<std::int64_t>(kAlignment) || capacity > kMaxSize) return FS_ERR_INVALID;
  const std::size_t bytes = round_down(static_cast<std::size_t>(capacity), kAlignment);
  Region region;
  std::string why;
  std::shared_ptr<Backing> backing;
  {
    // Obtain the memory without blocking the other lanes (cudaMalloc can take milliseconds).
    std::shared_lock lock(mu_);
    backing = backing_;
  }
  if (!backing->reserve(bytes, device, &region, &why)) {
    set_error_detail(why);
    return FS_ERR_BACKING;
  }
  std::unique_lock lock(mu_);
  if (backing != backing_) {  // set_backing() ran meanwhile: this memory is from the old backing
    lock.unlock();
    backing->release(region);
    set_error_detail("the allocator's backing changed while the lane was being created");
    return FS_ERR_LANE_BUSY;
  }
  const std::int64_t id = next_lane_++;
  auto lane = std::make_shared<Lane>(id, region);
  lanes_.emplace(id, lane);
  lanes_by_base_.emplace(region.base, lane);
  return id;
}

std::int64_t Allocator::dissolve_lane(std::int64_t lane_id) {
  Region region;
  std::shared_ptr<Backing> backing;
  {
    std::unique_lock lock(mu_);
    auto lane = find_lane(lane_id);
    if (!lane) return FS_ERR_NO_LANE;
    if (lane->arena.allocated_blocks() > 0) return FS_ERR_LANE_BUSY;
    region = lane->region;
    backing = backing_;
    lanes_.erase(lane_id);
    lanes_by_base_.erase(region.base);
    for (auto& [tag, ts] : tags_) {
      if (ts->lane == lane_id) ts->lane = FS_NO_LANE;
    }
    for (auto it = stream_lanes_.begin(); it != stream_lanes_.end();) {
      it = it->second == lane_id ? stream_lanes_.erase(it) : std::next(it);
    }
  }
  backing->release(region);  // outside the lock: cudaFree can take milliseconds
  return FS_OK;
}

std::int64_t Allocator::resize_lane(std::int64_t lane_id, std::int64_t capacity) {
  if (capacity < static_cast<std::int64_t>(kAlignment) || capacity > kMaxSize) return FS_ERR_INVALID;
  const std::size_t bytes = round_down(static_cast<std::size_t>(capacity), kAlignment);
  std::unique_lock lock(mu_);
  auto lane = find_lane(lane_id);
  if (!lane) return FS_ERR_NO_LANE;
  if (lane->arena.allocated_blocks() > 0) return FS_ERR_LANE_BUSY;
  if (bytes == lane->region.bytes) return FS_OK;
  // Give the old memory back first: on a device, old and new may not fit side by side.
  const Region old = lane->region;
  lanes_by_base_.erase(old.base);
  backing_->release(old);
  Region fresh;
  std::string why;
  std::int64_t status = FS_OK;
  if (!backing_->reserve(bytes, old.device, &fresh, &why)) {
    status = FS_ERR_BACKING;
    set_error_detail(why + "; the lane keeps its old capacity");
    if (!backing_->reserve(old.bytes, old.device, &fresh, &why)) {
      set_error_detail(why + "; the old capacity is not available either: the lane is dissolved");
      // Not even the old size is available any more: the lane is gone.
      lanes_.erase(lane_id);
      for (auto& [tag, ts] : tags_) {
        if (ts->lane == lane_id) ts->lane = FS_NO_LANE;
      }
      for (auto it = stream_lanes_.begin(); it != stream_lanes_.end();) {
        it = it->second == lane_id ? stream_lanes_.erase(it) : std::next(it);
      }
      return FS_ERR_BACKING;
    }
  }
  lane->region = fresh;
  lane->arena.reset(fresh.bytes);
  lane->freed_on_streams.clear();  // releasing the old memory synchronised with its work
  lanes_by_base_.emplace(fresh.base, lane);
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
  const Arena& a = lane->arena;
  *out = fs_lane_stats{lane_id,
                       lane->region.device,
                       static_cast<std::int64_t>(a.capacity()),
                       static_cast<std::int64_t>(a.used()),
                       static_cast<std::int64_t>(a.largest_free()),
                       static_cast<std::int64_t>(a.allocated_blocks()),
                       static_cast<std::int64_t>(a.free_blocks()),
                       tags,
                       lane->active_tag.load(),
                       static_cast<std::int64_t>(lane->region.base)};
  return FS_OK;
}

std::int64_t Allocator::lane_blocks(std::int64_t lane_id, fs_block_info* out, std::int64_t max) {
  if (max < 0 || (max > 0 && out == nullptr)) return FS_ERR_INVALID;
  std::shared_lock lock(mu_);
  auto lane = find_lane(lane_id);
  if (!lane) return FS_ERR_NO_LANE;
  std::lock_guard lane_lock(lane->mu);
  std::int64_t i = 0;
  for (const auto& [offset, block] : lane->arena.blocks()) {
    if (i < max) {
      out[i] = fs_block_info{static_cast<std::int64_t>(offset), static_cast<std::int64_t>(block.size), block.tag,
                             block.free ? 1 : 0};
    }
    ++i;
  }
  return i;
}

std::int64_t Allocator::check_lane(std::int64_t lane_id, std::string* why) {
  std::shared_lock lock(mu_);
  auto lane = find_lane(lane_id);
  if (!lane) return FS_ERR_NO_LANE;
  std::lock_guard lane_lock(lane->mu);
  if (lane->region.base % kAlignment != 0) {
    *why = "lane base is not aligned";
    return FS_ERR_INTERNAL;
  }
  if (lane->arena.capacity() != lane->region.bytes) {
    *why = "arena capacity differs from the lane's memory";
    return FS_ERR_INTERNAL;
  }
  return lane->arena.check(why) ? FS_OK : FS_ERR_INTERNAL;
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
  if (lane_id != FS_NO_LANE && !find_lane(lane_id)) return FS_ERR_NO_LANE;
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
  if (!find_lane(lane_id)) return FS_ERR_NO_LANE;
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
  if (lane && device >= 0 && lane->region.device >= 0 && lane->region.device != device) {
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
    auto offset = lane->arena.allocate(bytes, tag);
    if (!offset) return refuse(FS_ERR_LANE_FULL);
    address = lane->region.base + *offset;
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
  if (auto lane = lane_holding(address)) {
    std::lock_guard lane_lock(lane->mu);
    auto freed = lane->arena.release(address - lane->region.base);
    if (!freed) return FS_ERR_NOT_OURS;
    tag = freed->tag;
    bytes = static_cast<std::int64_t>(freed->size);
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
