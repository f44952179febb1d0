// The C ABI of the lane allocator (see lane_allocator.h): thin wrappers that translate exceptions into
// status codes, keep the calling thread's last error, and hold the process-wide allocator.
#include "lane_allocator.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "allocator.h"
#include "backing.h"

using fluidsalus::Allocator;

struct fs_allocator {
  explicit fs_allocator(std::unique_ptr<fluidsalus::Backing> backing) : impl(std::move(backing)) {}
  Allocator impl;
};

namespace {

thread_local std::int64_t t_last_error = FS_OK;
thread_local std::string t_error_detail;

std::int64_t record(std::int64_t status) { return fluidsalus::record_status(status); }

// Run `body` (which returns a status) with every exception turned into a status: nothing may unwind
// into ctypes.
template <typename F>
std::int64_t guarded(fs_allocator* a, F&& body) {
  if (a == nullptr) return record(FS_ERR_INVALID);
  t_error_detail.clear();
  try {
    return record(body(a->impl));
  } catch (const std::bad_alloc&) {
    return record(FS_ERR_INTERNAL);
  } catch (...) {
    return record(FS_ERR_INTERNAL);
  }
}

void copy_message(const std::string& msg, char* out, std::int64_t out_len) {
  if (out == nullptr || out_len <= 0) return;
  const std::size_t n = std::min<std::size_t>(msg.size(), static_cast<std::size_t>(out_len - 1));
  std::memcpy(out, msg.data(), n);
  out[n] = '\0';
}

}  // namespace

namespace fluidsalus {

std::int64_t record_status(std::int64_t status) {
  t_last_error = status < 0 ? status : FS_OK;
  return status;
}

void set_error_detail(std::string detail) { t_error_detail = std::move(detail); }
const std::string& error_detail() { return t_error_detail; }

Allocator& global_allocator() { return fs_global_allocator()->impl; }

}  // namespace fluidsalus

extern "C" {

int64_t fs_alignment(void) { return static_cast<int64_t>(fluidsalus::kAlignment); }

const char* fs_status_string(int64_t status) {
  switch (status) {
    case FS_OK:
      return "ok";
    case FS_ERR_INVALID:
      return "invalid argument";
    case FS_ERR_NO_LANE:
      return "no such lane, or the tag is not assigned to a lane";
    case FS_ERR_LANE_BUSY:
      return "still holds live allocations";
    case FS_ERR_LANE_FULL:
      return "lane full: the lane's cap is reached or no free block is large enough";
    case FS_ERR_TAG_CAP:
      return "the allocation would exceed the tag's cap";
    case FS_ERR_NO_TAG:
      return "no such tag";
    case FS_ERR_NOT_OURS:
      return "pointer not allocated by this allocator (or already freed)";
    case FS_ERR_BACKING:
      return "backing memory could not be obtained";
    case FS_ERR_WRONG_DEVICE:
      return "the tag's lane is on another device";
    case FS_ERR_INTERNAL:
      return "internal error";
    default:
      return "unknown status";
  }
}

int64_t fs_last_error(void) { return t_last_error; }

const char* fs_last_error_detail(void) { return t_error_detail.c_str(); }

fs_allocator* fs_allocator_create(int64_t backing) {
  try {
    auto b = fluidsalus::make_backing(backing);
    if (!b) {
      record(FS_ERR_INVALID);
      return nullptr;
    }
    record(FS_OK);
    return new fs_allocator(std::move(b));
  } catch (...) {
    record(FS_ERR_INTERNAL);
    return nullptr;
  }
}

void fs_allocator_destroy(fs_allocator* a) {
  if (a == nullptr || a == fs_global_allocator()) return;
  delete a;
}

fs_allocator* fs_global_allocator(void) {
  // Never destroyed: PyTorch may free tensors after static destructors have run at exit.
  static fs_allocator* const global = new fs_allocator(fluidsalus::make_backing(FS_BACKING_CUDA));
  return global;
}

int64_t fs_global_set_backing(int64_t backing) {
  return guarded(fs_global_allocator(), [&](Allocator& impl) { return impl.set_backing(backing); });
}

int64_t fs_allocator_backing(const fs_allocator* a) {
  return a == nullptr ? record(FS_ERR_INVALID) : a->impl.backing_kind();
}

int64_t fs_pool_set(fs_allocator* a, int64_t device, int64_t bytes) {
  return guarded(a, [&](Allocator& impl) { return impl.set_pool(device, bytes); });
}

int64_t fs_pool_stats_get(fs_allocator* a, int64_t device, fs_pool_stats* out) {
  return guarded(a, [&](Allocator& impl) { return impl.pool_stats(device, out); });
}

int64_t fs_lane_create(fs_allocator* a, int64_t capacity, int64_t device) {
  return guarded(a, [&](Allocator& impl) { return impl.create_lane(capacity, device); });
}

int64_t fs_lane_dissolve(fs_allocator* a, int64_t lane) {
  return guarded(a, [&](Allocator& impl) { return impl.dissolve_lane(lane); });
}

int64_t fs_lane_retire(fs_allocator* a, int64_t lane) {
  return guarded(a, [&](Allocator& impl) { return impl.retire_lane(lane); });
}

int64_t fs_reap(fs_allocator* a) {
  return guarded(a, [&](Allocator& impl) { return impl.reap(); });
}

int64_t fs_lane_resize(fs_allocator* a, int64_t lane, int64_t capacity) {
  return guarded(a, [&](Allocator& impl) { return impl.resize_lane(lane, capacity); });
}

int64_t fs_lane_stats_get(fs_allocator* a, int64_t lane, fs_lane_stats* out) {
  return guarded(a, [&](Allocator& impl) { return impl.lane_stats(lane, out); });
}

int64_t fs_lane_blocks(fs_allocator* a, int64_t lane, fs_block_info* out, int64_t max) {
  return guarded(a, [&](Allocator& impl) { return impl.lane_blocks(lane, out, max); });
}

int64_t fs_lane_check(fs_allocator* a, int64_t lane, char* why, int64_t why_len) {
  return guarded(a, [&](Allocator& impl) {
    std::string msg;
    const int64_t status = impl.check_lane(lane, &msg);
    copy_message(msg, why, why_len);
    return status;
  });
}

int64_t fs_lane_list(fs_allocator* a, int64_t* out, int64_t max) {
  return guarded(a, [&](Allocator& impl) { return impl.list_lanes(out, max); });
}

int64_t fs_assign_tag(fs_allocator* a, int64_t tag, int64_t lane) {
  return guarded(a, [&](Allocator& impl) { return impl.assign_tag(tag, lane); });
}

int64_t fs_set_tag_cap(fs_allocator* a, int64_t tag, int64_t cap) {
  return guarded(a, [&](Allocator& impl) { return impl.set_tag_cap(tag, cap); });
}

int64_t fs_tag_stats_get(fs_allocator* a, int64_t tag, fs_tag_stats* out) {
  return guarded(a, [&](Allocator& impl) { return impl.tag_stats(tag, out); });
}

int64_t fs_reset_peak(fs_allocator* a, int64_t tag) {
  return guarded(a, [&](Allocator& impl) { return impl.reset_peak(tag); });
}

int64_t fs_forget_tag(fs_allocator* a, int64_t tag) {
  return guarded(a, [&](Allocator& impl) { return impl.forget_tag(tag); });
}

int64_t fs_bind_stream(fs_allocator* a, void* stream, int64_t lane) {
  return guarded(a, [&](Allocator& impl) { return impl.bind_stream(stream, lane); });
}

int64_t fs_set_lane_tag(fs_allocator* a, int64_t lane, int64_t tag) {
  return guarded(a, [&](Allocator& impl) { return impl.set_lane_tag(lane, tag); });
}

void fs_set_thread_tag(int64_t tag) { fluidsalus::set_thread_tag(tag); }

int64_t fs_get_thread_tag(void) { return fluidsalus::thread_tag(); }

void* fs_malloc(fs_allocator* a, int64_t size, int64_t tag) {
  void* p = nullptr;
  guarded(a, [&](Allocator& impl) {
    int64_t status = FS_OK;
    p = impl.malloc(size, tag, -1, nullptr, &status);
    return status;
  });
  return p;
}

void* fs_malloc_current(fs_allocator* a, int64_t size, int64_t device, void* stream) {
  void* p = nullptr;
  guarded(a, [&](Allocator& impl) {
    int64_t status = FS_OK;
    p = impl.malloc(size, impl.current_tag(stream), device, stream, &status);
    return status;
  });
  return p;
}

int64_t fs_free(fs_allocator* a, void* ptr) {
  return guarded(a, [&](Allocator& impl) { return impl.free(ptr, nullptr); });
}

int64_t fs_allocator_live_bytes(fs_allocator* a) {
  return guarded(a, [&](Allocator& impl) { return impl.live_bytes(); });
}

int64_t fs_cuda_runtime_status(char* why, int64_t why_len) {
  std::string msg;
  const bool ok = fluidsalus::cuda_runtime_available(&msg);
  copy_message(msg, why, why_len);
  return record(ok ? FS_OK : FS_ERR_BACKING);
}

}  // extern "C"
