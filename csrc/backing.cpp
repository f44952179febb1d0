#include "backing.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "arena.h"
#include "lane_allocator.h"

namespace fluidsalus {
namespace {

// ---- host: aligned_alloc ------------------------------------------------------------------------
class HostBacking final : public Backing {
 public:
  bool reserve(std::size_t bytes, std::int64_t device, Region* out, std::string* why) override {
    void* p = std::aligned_alloc(kAlignment, bytes);  // bytes is a multiple of kAlignment
    if (p == nullptr) {
      *why = "aligned_alloc of " + std::to_string(bytes) + " bytes failed";
      return false;
    }
    *out = Region{p, reinterpret_cast<std::uintptr_t>(p), bytes, device};
    return true;
  }
  void release(const Region& region) override { std::free(region.raw); }
  std::int64_t kind() const override { return FS_BACKING_HOST; }
};

// ---- virtual: address ranges with nothing behind them ----------------------------------------------
class VirtualBacking final : public Backing {
 public:
  bool reserve(std::size_t bytes, std::int64_t device, Region* out, std::string* /*why*/) override {
    // Ranges never overlap and a guard gap separates them; addresses are never dereferenced.
    const std::uintptr_t base = next_.fetch_add(bytes + kGuard);
    *out = Region{nullptr, base, bytes, device};
    return true;
  }
  void release(const Region& /*region*/) override {}
  std::int64_t kind() const override { return FS_BACKING_VIRTUAL; }

 private:
  static constexpr std::uintptr_t kGuard = 1u << 20;
  std::atomic<std::uintptr_t> next_{std::uintptr_t{1} << 40};
};

// ---- CUDA: cudaMalloc from libcudart, loaded with dlopen ------------------------------------------
// cudaError_t is an enum (an int); 0 is cudaSuccess.
using CudaMallocFn = int (*)(void**, std::size_t);
using CudaFreeFn = int (*)(void*);
using CudaGetDeviceFn = int (*)(int*);
using CudaSetDeviceFn = int (*)(int);
using CudaStreamSynchronizeFn = int (*)(void*);
using CudaGetErrorStringFn = const char* (*)(int);

struct CudaRuntime {
  bool loaded = false;
  std::string error;
  CudaMallocFn malloc = nullptr;
  CudaFreeFn free = nullptr;
  CudaGetDeviceFn get_device = nullptr;
  CudaSetDeviceFn set_device = nullptr;
  CudaStreamSynchronizeFn stream_synchronize = nullptr;
  CudaGetErrorStringFn get_error_string = nullptr;
};

// Path of a libcudart the process has loaded already (PyTorch's, whatever its file name), or "".
std::string loaded_cudart_path() {
  std::string found;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t /*size*/, void* data) -> int {
        const char* name = info->dlpi_name;
        const char* file = name != nullptr ? std::strrchr(name, '/') : nullptr;
        if (file != nullptr && std::strncmp(file + 1, "libcudart", 9) == 0) {
          *static_cast<std::string*>(data) = name;
          return 1;  // stop
        }
        return 0;
      },
      &found);
  return found;
}

const CudaRuntime& cuda_runtime() {
  static CudaRuntime rt;
  static std::once_flag once;
  std::call_once(once, [] {
    // Prefer the runtime the process already loaded (PyTorch's), then any installed one.
    static const char* const kNames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"};
    void* lib = nullptr;
    const std::string loaded = loaded_cudart_path();
    if (!loaded.empty()) lib = dlopen(loaded.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    for (const char* name : kNames) {
      if (lib != nullptr) break;
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    }
    for (const char* name : kNames) {
      if (lib != nullptr) break;
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    }
    if (lib == nullptr) {
      rt.error = "libcudart could not be loaded (tried libcudart.so.13/.12/.11.0/.so)";
      return;
    }
    rt.malloc = reinterpret_cast<CudaMallocFn>(dlsym(lib, "cudaMalloc"));
    rt.free = reinterpret_cast<CudaFreeFn>(dlsym(lib, "cudaFree"));
    rt.get_device = reinterpret_cast<CudaGetDeviceFn>(dlsym(lib, "cudaGetDevice"));
    rt.set_device = reinterpret_cast<CudaSetDeviceFn>(dlsym(lib, "cudaSetDevice"));
    rt.stream_synchronize = reinterpret_cast<CudaStreamSynchronizeFn>(dlsym(lib, "cudaStreamSynchronize"));
    rt.get_error_string = reinterpret_cast<CudaGetErrorStringFn>(dlsym(lib, "cudaGetErrorString"));
    if (!rt.malloc || !rt.free || !rt.get_device || !rt.set_device || !rt.stream_synchronize ||
        !rt.get_error_string) {
      rt.error = "libcudart lacks cudaMalloc/cudaFree/cudaGetDevice/cudaSetDevice/cudaStreamSynchronize";
      return;
    }
    rt.loaded = true;
  });
  return rt;
}

class CudaBacking final : public Backing {
 public:
  bool reserve(std::size_t bytes, std::int64_t device, Region* out, std::string* why) override {
    const CudaRuntime& rt = cuda_runtime();
    if (!rt.loaded) {
      *why = rt.error;
      return false;
    }
    DeviceGuard guard(rt, static_cast<int>(device));
    if (guard.error != 0) {
      *why = "cudaSetDevice(" + std::to_string(device) + ") failed: " + rt.get_error_string(guard.error);
      return false;
    }
    // cudaMalloc guarantees 256-byte alignment: ask for kAlignment more and align the base up.
    void* p = nullptr;
    const int err = rt.malloc(&p, bytes + kAlignment);
    if (err != 0 || p == nullptr) {
      *why = "cudaMalloc of " + std::to_string(bytes) + " bytes on device " + std::to_string(device) +
             " failed: " + rt.get_error_string(err);
      return false;
    }
    const auto raw = reinterpret_cast<std::uintptr_t>(p);
    *out = Region{p, round_up(raw, kAlignment), bytes, device};
    return true;
  }
  void release(const Region& region) override {
    const CudaRuntime& rt = cuda_runtime();
    if (!rt.loaded || region.raw == nullptr) return;
    DeviceGuard guard(rt, static_cast<int>(region.device));
    rt.free(region.raw);
  }
  bool stream_ordered() const override { return true; }
  void synchronize(void* stream) override {
    const CudaRuntime& rt = cuda_runtime();
    if (rt.loaded) rt.stream_synchronize(stream);  // an error (destroyed stream) leaves nothing to wait for
  }
  std::int64_t kind() const override { return FS_BACKING_CUDA; }

 private:
  // Make `device` current for the scope and restore the previous one after.
  struct DeviceGuard {
    DeviceGuard(const CudaRuntime& rt, int device) : rt_(rt) {
      if (rt_.get_device(&previous_) != 0) previous_ = -1;
      if (device >= 0 && device != previous_) error = rt_.set_device(device);
    }
    ~DeviceGuard() {
      int now = -1;
      if (previous_ >= 0 && rt_.get_device(&now) == 0 && now != previous_) rt_.set_device(previous_);
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;
    const CudaRuntime& rt_;
    int previous_ = -1;
    int error = 0;  // cudaError_t of cudaSetDevice
  };
};

}  // namespace

std::unique_ptr<Backing> make_backing(std::int64_t kind) {
  switch (kind) {
    case FS_BACKING_HOST:
      return std::make_unique<HostBacking>();
    case FS_BACKING_VIRTUAL:
      return std::make_unique<VirtualBacking>();
    case FS_BACKING_CUDA:
      return std::make_unique<CudaBacking>();
    default:
      return nullptr;
  }
}

bool cuda_runtime_available(std::string* why) {
  const CudaRuntime& rt = cuda_runtime();
  if (!rt.loaded && why != nullptr) *why = rt.error;
  return rt.loaded;
}

}  // namespace fluidsalus
