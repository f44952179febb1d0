#include "arena.h"

#include <iterator>

namespace fluidsalus {

Arena::Arena(std::size_t capacity) { reset(capacity); }

void Arena::reset(std::size_t capacity) {
  capacity_ = capacity;
  used_ = 0;
  blocks_.clear();
  free_.clear();
  blocks_.emplace(0, Block{capacity, kFreeTag, true});
  free_.emplace(capacity, 0);
}

std::optional<std::size_t> Arena::allocate(std::size_t size, std::int64_t tag) {
  if (size == 0 || size % kAlignment != 0) return std::nullopt;
  auto fit = free_.lower_bound({size, 0});
  if (fit == free_.end()) return std::nullopt;
  const std::size_t block_size = fit->first;
  const std::size_t offset = fit->second;
  // Insert the remainder first: if that throws (no memory for metadata), nothing has changed yet.
  if (block_size > size) {
    blocks_.emplace(offset + size, Block{block_size - size, kFreeTag, true});
    try {
      free_.emplace(block_size - size, offset + size);
    } catch (...) {
      blocks_.erase(offset + size);
      throw;
    }
  }
  free_.erase(fit);
  Block& block = blocks_.at(offset);
  block.size = size;
  block.tag = tag;
  block.free = false;
  used_ += size;
  return offset;
}

std::optional<Arena::Freed> Arena::release(std::size_t offset) {
  auto it = blocks_.find(offset);
  if (it == blocks_.end() || it->second.free) return std::nullopt;
  const Freed freed{it->second.size, it->second.tag};
  used_ -= freed.size;
  it->second.free = true;
  it->second.tag = kFreeTag;
  // Merge with the next block if it is free.
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.free) {
    free_.erase({next->second.size, next->first});
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  // Merge into the previous block if it is free.
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free) {
      free_.erase({prev->second.size, prev->first});
      prev->second.size += it->second.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  // Set nodes of the erased entries were just released, so this insertion cannot run out of memory
  // in practice; if it did, the block would stay free but unindexed (check() would report it).
  free_.emplace(it->second.size, it->first);
  return freed;
}

bool Arena::check(std::string* why) const {
  auto fail = [why](const std::string& msg) {
    if (why != nullptr) *why = msg;
    return false;
  };
  std::size_t expected_offset = 0;
  std::size_t used = 0;
  std::size_t free_count = 0;
  bool previous_free = false;
  for (const auto& [offset, block] : blocks_) {
    const std::string at = "block at offset " + std::to_string(offset);
    if (offset != expected_offset) return fail(at + ": gap or overlap, expected offset " +
                                               std::to_string(expected_offset));
    if (block.size == 0 || block.size % kAlignment != 0) return fail(at + ": bad size " + std::to_string(block.size));
    if (block.free) {
      if (previous_free) return fail(at + ": two free neighbours were not coalesced");
      if (block.tag != kFreeTag) return fail(at + ": free block with a tag");
      if (free_.count({block.size, offset}) == 0) return fail(at + ": free block missing from the size index");
      ++free_count;
    } else {
      if (block.tag < kFreeTag) return fail(at + ": bad tag");
      used += block.size;
    }
    previous_free = block.free;
    expected_offset = offset + block.size;
  }
  if (expected_offset != capacity_) return fail("blocks cover " + std::to_string(expected_offset) +
                                                " bytes of a " + std::to_string(capacity_) + "-byte arena");
  if (free_count != free_.size()) return fail("size index holds blocks that are not free");
  if (used != used_) return fail("used counter " + std::to_string(used_) + " != sum of live blocks " +
                                 std::to_string(used));
  return true;
}

}  // namespace fluidsalus
