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

std::optional<std::pair<std::size_t, std::size_t>> Arena::best_fit(std::size_t size) const {
  if (size == 0 || size % kAlignment != 0) return std::nullopt;
  auto fit = free_.lower_bound({size, 0});
  if (fit == free_.end()) return std::nullopt;
  return *fit;
}

bool Arena::grow_block(std::size_t offset, std::size_t new_size) {
  auto it = blocks_.find(offset);
  if (it == blocks_.end() || it->second.free || new_size % kAlignment != 0) return false;
  if (new_size <= it->second.size) return new_size == it->second.size;
  auto next = std::next(it);
  const std::size_t extra = new_size - it->second.size;
  if (next == blocks_.end() || !next->second.free || next->second.size < extra) return false;
  const std::size_t next_offset = next->first;
  const std::size_t next_size = next->second.size;
  if (next_size > extra) {
    // Index the smaller remainder first: if that throws, nothing has changed yet.
    blocks_.emplace(next_offset + extra, Block{next_size - extra, kFreeTag, true});
    try {
      free_.emplace(next_size - extra, next_offset + extra);
    } catch (...) {
      blocks_.erase(next_offset + extra);
      throw;
    }
  }
  free_.erase({next_size, next_offset});
  blocks_.erase(next_offset);
  it->second.size = new_size;
  used_ += extra;
  return true;
}

bool Arena::shrink_block(std::size_t offset, std::size_t new_size) {
  auto it = blocks_.find(offset);
  if (it == blocks_.end() || it->second.free || new_size == 0 || new_size % kAlignment != 0 ||
      new_size >= it->second.size) {
    return false;
  }
  const std::size_t tail_offset = offset + new_size;
  std::size_t tail_size = it->second.size - new_size;
  auto next = std::next(it);
  const bool merge = next != blocks_.end() && next->second.free;
  if (merge) tail_size += next->second.size;
  blocks_.emplace_hint(next, tail_offset, Block{tail_size, kFreeTag, true});
  try {
    free_.emplace(tail_size, tail_offset);
  } catch (...) {
    blocks_.erase(tail_offset);
    throw;
  }
  if (merge) {
    free_.erase({next->second.size, next->first});
    blocks_.erase(next);
  }
  used_ -= it->second.size - new_size;
  it->second.size = new_size;
  return true;
}

std::size_t Arena::free_tail() const {
  if (blocks_.empty()) return 0;
  const Block& last = blocks_.rbegin()->second;
  return last.free ? last.size : 0;
}

bool Arena::set_capacity(std::size_t new_capacity) {
  if (new_capacity == 0 || new_capacity % kAlignment != 0) return false;
  if (new_capacity == capacity_) return true;
  auto last = std::prev(blocks_.end());
  if (new_capacity > capacity_) {
    const std::size_t extra = new_capacity - capacity_;
    if (last->second.free) {
      free_.erase({last->second.size, last->first});
      last->second.size += extra;
      free_.emplace(last->second.size, last->first);  // one node out, one in: fails only if the heap is gone
    } else {
      blocks_.emplace(capacity_, Block{extra, kFreeTag, true});
      try {
        free_.emplace(extra, capacity_);
      } catch (...) {
        blocks_.erase(capacity_);
        throw;
      }
    }
    capacity_ = new_capacity;
    return true;
  }
  const std::size_t cut = capacity_ - new_capacity;
  if (!last->second.free || last->second.size < cut) return false;
  free_.erase({last->second.size, last->first});
  if (last->second.size == cut) {
    blocks_.erase(last);
  } else {
    last->second.size -= cut;
    free_.emplace(last->second.size, last->first);
  }
  capacity_ = new_capacity;
  return true;
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
