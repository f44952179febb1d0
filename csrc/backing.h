// Where lane memory comes from: host memory, a virtual address range, or CUDA device memory.
//
// The CUDA backing loads libcudart with dlopen at first use and declares the few functions it needs
// itself, so nothing here needs CUDA headers or CUDA at build time.
#ifndef FLUIDSALUS_BACKING_H_
#define FLUIDSALUS_BACKING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace fluidsalus {

// A piece of backing memory. `base` is aligned to kAlignment and holds `bytes` bytes; `raw` is what
// must be given back.
struct Region {
  void* raw = nullptr;
  std::uintptr_t base = 0;
  std::size_t bytes = 0;
  std::int64_t device = -1;
};

class Backing {
 public:
  virtual ~Backing() = default;
  // Obtain `bytes` (a positive multiple of kAlignment) on `device`. False on failure, with a reason.
  virtual bool reserve(std::size_t bytes, std::int64_t device, Region* out, std::string* why) = 0;
  virtual void release(const Region& region) = 0;
  // Whether blocks freed on one stream must be synchronised before reuse on another (CUDA).
  virtual bool stream_ordered() const { return false; }
  // Wait until the work queued on `stream` has finished (CUDA); no-op elsewhere.
  virtual void synchronize(void* /*stream*/) {}
  virtual std::int64_t kind() const = 0;
};

// FS_BACKING_HOST, FS_BACKING_VIRTUAL or FS_BACKING_CUDA; nullptr for an unknown kind.
std::unique_ptr<Backing> make_backing(std::int64_t kind);

// Load libcudart (once). False with a reason if it cannot be found.
bool cuda_runtime_available(std::string* why);

}  // namespace fluidsalus

#endif  // FLUIDSALUS_BACKING_H_
