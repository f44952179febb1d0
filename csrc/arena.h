// Best-fit arena with coalescing of free neighbours.
//
// The arena manages offsets in [0, capacity): it never touches the memory itself, so the same logic
// serves host memory, a virtual address range and CUDA device memory. It is not thread-safe: its owner
// (a lane) locks around it.
#ifndef FLUIDSALUS_ARENA_H_
#define FLUIDSALUS_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace fluidsalus {

// Block granularity and alignment of every offset (FS_ALIGNMENT in the C header).
constexpr std::size_t kAlignment = 512;
// Tag of a free block.
constexpr std::int64_t kFreeTag = -1;

constexpr std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }
constexpr std::size_t round_down(std::size_t n, std::size_t a) { return n / a * a; }

class Arena {
 public:
  struct Block {
    std::size_t size;
    std::int64_t tag;
    bool free;
  };
  struct Freed {
    std::size_t size;
    std::int64_t tag;
  };

  // `capacity` must be a positive multiple of kAlignment.
  explicit Arena(std::size_t capacity);

  // Best fit: the smallest free block that holds `size` (a positive multiple of kAlignment), the lowest
  // address among equals; the block is split and the remainder stays free. Returns the offset.
  std::optional<std::size_t> allocate(std::size_t size, std::int64_t tag);
  // Free the live block starting at `offset` and merge it with free neighbours. nullopt if no live
  // block starts there.
  std::optional<Freed> release(std::size_t offset);
  // Start over with a new capacity; only valid when no block is live.
  void reset(std::size_t capacity);

  // Where allocate(size) would go, without allocating: (size of the chosen free block, its offset).
  std::optional<std::pair<std::size_t, std::size_t>> best_fit(std::size_t size) const;
  // Grow the live block at `offset` in place to `new_size` (a multiple of kAlignment) by taking the start of
  // the free block right after it. False, with nothing changed, if that block is missing, live or too small.
  bool grow_block(std::size_t offset, std::size_t new_size);
  // Shrink the live block at `offset` to `new_size` (a positive multiple of kAlignment); its tail becomes free
  // and merges with a free next block. False, with nothing changed, if no live block of more bytes starts there.
  bool shrink_block(std::size_t offset, std::size_t new_size);
  // Bytes of the free block that ends the arena (0 when the last block is live).
  std::size_t free_tail() const;
  // Change the capacity while blocks may be live: growing adds free space at the end, shrinking cuts the end,
  // which must be free (`new_capacity >= capacity() - free_tail()`). `new_capacity` is a positive multiple of
  // kAlignment. False, with nothing changed, otherwise.
  bool set_capacity(std::size_t new_capacity);

  std::size_t capacity() const { return capacity_; }
  std::size_t used() const { return used_; }
  std::size_t largest_free() const { return free_.empty() ? 0 : free_.rbegin()->first; }
  std::size_t allocated_blocks() const { return blocks_.size() - free_.size(); }
  std::size_t free_blocks() const { return free_.size(); }
  const std::map<std::size_t, Block>& blocks() const { return blocks_; }

  // Verify every invariant; on failure describe the first violation in `why`.
  bool check(std::string* why) const;

 private:
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
  std::map<std::size_t, Block> blocks_;                     // every block, by offset
  std::set<std::pair<std::size_t, std::size_t>> free_;      // free blocks as (size, offset)
};

}  // namespace fluidsalus

#endif  // FLUIDSALUS_ARENA_H_
