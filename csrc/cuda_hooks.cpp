// The entry points of torch.cuda.memory.CUDAPluggableAllocator, over the global allocator.
//
// PyTorch (torch/csrc/cuda/CUDAPluggableAllocator.cpp) calls
//   void* alloc_fn(size_t size, int device, cudaStream_t stream);
//   void  free_fn(void* ptr, size_t size, int device, cudaStream_t stream);
// and does not check alloc_fn's result for NULL: a NULL would become a tensor with no memory. So on
// failure fs_cuda_malloc throws a C++ exception instead, which PyTorch turns into a Python exception in
// the thread that allocated: torch.OutOfMemoryError when c10::OutOfMemoryError could be found in
// PyTorch's libc10 (fs_cuda_bind_torch), else a RuntimeError carrying the same message.
//
// Throwing c10::OutOfMemoryError without PyTorch's headers: libc10 exports the class's constructor
// OutOfMemoryError(SourceLocation, std::string) and its type_info. The exception object is allocated
// with __cxa_allocate_exception, built by that constructor and thrown with __cxa_throw; the destructor
// is taken from the object's own vtable (slot 0: the complete-object destructor of std::exception's
// hierarchy, by the Itanium C++ ABI).
#include <cxxabi.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <new>
#include <string>
#include <typeinfo>

#include "allocator.h"
#include "lane_allocator.h"

namespace {

// c10::SourceLocation, by layout.
struct C10SourceLocation {
  const char* function;
  const char* file;
  std::uint32_t line;
};

// c10::OutOfMemoryError::OutOfMemoryError(SourceLocation, std::string), called as a function whose first
// argument is `this` (Itanium C++ ABI).
using OomConstructor = void (*)(void* self, C10SourceLocation location, std::string msg);

constexpr const char* kOomConstructorSymbol =
    "_ZN3c1016OutOfMemoryErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE";
constexpr const char* kOomTypeInfoSymbol = "_ZTIN3c1016OutOfMemoryErrorE";

// Room for the exception object: sizeof(c10::OutOfMemoryError) is about 130 bytes in PyTorch 2.x.
constexpr std::size_t kOomObjectBytes = 4096;

struct TorchOom {
  OomConstructor construct;
  std::type_info* type;
};

std::atomic<const TorchOom*> g_torch_oom{nullptr};
std::mutex g_bind_mu;

void destroy_by_vtable(void* object) {
  using Destructor = void (*)(void*);
  Destructor* vtable = *static_cast<Destructor**>(object);
  vtable[0](object);
}

// std::bad_alloc with a message, for when PyTorch's c10 is not bound (PyTorch reports it as RuntimeError).
class LaneOutOfMemory : public std::bad_alloc {
 public:
  explicit LaneOutOfMemory(std::string msg) : msg_(std::move(msg)) {}
  const char* what() const noexcept override { return msg_.c_str(); }

 private:
  std::string msg_;
};

[[noreturn]] void throw_out_of_memory(const std::string& msg) {
  if (const TorchOom* oom = g_torch_oom.load(std::memory_order_acquire)) {
    void* object = abi::__cxa_allocate_exception(kOomObjectBytes);
    try {
      oom->construct(object, C10SourceLocation{"fs_cuda_malloc", __FILE__, static_cast<std::uint32_t>(__LINE__)},
                     msg);
    } catch (...) {
      abi::__cxa_free_exception(object);
      throw;
    }
    abi::__cxa_throw(object, oom->type, &destroy_by_vtable);
  }
  throw LaneOutOfMemory(msg);
}

}  // namespace

extern "C" {

int64_t fs_cuda_bind_torch(const char* libc10_path) {
#if defined(_GLIBCXX_USE_CXX11_ABI) && _GLIBCXX_USE_CXX11_ABI
  std::lock_guard lock(g_bind_mu);
  if (g_torch_oom.load() != nullptr) return fluidsalus::record_status(FS_OK);
  // The library is normally loaded already (by `import torch`): this only takes a reference to it,
  // which is never dropped, so the symbols stay valid.
  void* lib = libc10_path != nullptr ? dlopen(libc10_path, RTLD_NOW | RTLD_LOCAL)
                                     : dlopen("libc10.so", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == nullptr) return fluidsalus::record_status(FS_ERR_BACKING);
  auto construct = reinterpret_cast<OomConstructor>(dlsym(lib, kOomConstructorSymbol));
  auto* type = static_cast<std::type_info*>(dlsym(lib, kOomTypeInfoSymbol));
  if (construct == nullptr || type == nullptr) return fluidsalus::record_status(FS_ERR_BACKING);
  g_torch_oom.store(new TorchOom{construct, type}, std::memory_order_release);
  return fluidsalus::record_status(FS_OK);
#else
  (void)libc10_path;  // PyTorch's wheels use the C++11 string ABI; nothing to bind otherwise.
  return fluidsalus::record_status(FS_ERR_BACKING);
#endif
}

void* fs_cuda_malloc(ssize_t size, int device, fs_cuda_stream_t stream) {
  if (size <= 0) return nullptr;  // PyTorch never frees a NULL data pointer
  fluidsalus::Allocator& impl = fluidsalus::global_allocator();
  std::string msg;
  try {
    fluidsalus::set_error_detail(std::string());
    const std::int64_t tag = impl.current_tag(stream);
    std::int64_t status = FS_OK;
    void* p = impl.malloc(size, tag, device, stream, &status);
    fluidsalus::record_status(status);
    if (p != nullptr) return p;
    msg = impl.describe_failure(tag, size, status);
  } catch (const std::exception& e) {
    fluidsalus::record_status(FS_ERR_INTERNAL);
    msg = std::string("fluidsalus lane allocator: internal error: ") + e.what();
  }
  throw_out_of_memory(msg);
}

void fs_cuda_free(void* ptr, ssize_t /*size*/, int /*device*/, fs_cuda_stream_t stream) {
  // Called from PyTorch's deleters (destructors): must never throw.
  try {
    const std::int64_t status = fluidsalus::global_allocator().free(ptr, stream);
    fluidsalus::record_status(status);
    if (status != FS_OK) {
      std::fprintf(stderr, "fluidsalus lane allocator: fs_cuda_free(%p): %s\n", ptr, fs_status_string(status));
    }
  } catch (...) {
    fluidsalus::record_status(FS_ERR_INTERNAL);
  }
}

}  // extern "C"
