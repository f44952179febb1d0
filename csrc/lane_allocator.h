/*
 * fluidsalus lane allocator: the C ABI.
 *
 * A lane is a contiguous arena of memory (host memory, a virtual address range, or CUDA device memory)
 * managed by a best-fit allocator that coalesces free neighbours. Every allocation carries a tag (a
 * trial id, an integer >= 0). The allocator keeps, per tag, the live bytes, the peak of the live bytes
 * since the last reset, and an optional hard cap; per lane, the capacity is a hard cap. An allocation
 * that would pass a cap fails for its tag only: other tags keep allocating.
 *
 * Every function is thread-safe. Functions that return an int64_t status return FS_OK (0) or a negative
 * FS_ERR_* code; functions that return a pointer return NULL on failure. In both cases the reason of
 * the calling thread's last failure is also kept in fs_last_error().
 *
 * This header needs no CUDA: the CUDA runtime is loaded at run time with dlopen.
 */
#ifndef FLUIDSALUS_LANE_ALLOCATOR_H_
#define FLUIDSALUS_LANE_ALLOCATOR_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* ssize_t */

#if defined(_WIN32)
#define FS_API __declspec(dllexport)
#else
#define FS_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Every block starts at a multiple of FS_ALIGNMENT bytes and its size is rounded up to one (the same
 * granularity as PyTorch's CUDA caching allocator). Byte counts in the statistics are rounded sizes. */
#define FS_ALIGNMENT 512

/* Tag of an allocation made by a thread that has no tag (and whose stream has no active tag). */
#define FS_NO_TAG (-1)
/* A tag cap or a lane assignment that is absent. */
#define FS_UNLIMITED (-1)
#define FS_NO_LANE (-1)

/* Where a lane's memory comes from. */
#define FS_BACKING_HOST 0    /* aligned_alloc: real, dereferenceable host memory */
#define FS_BACKING_VIRTUAL 1 /* addresses only, no memory behind them (simulation, huge capacities) */
#define FS_BACKING_CUDA 2    /* cudaMalloc on the lane's device (libcudart loaded with dlopen) */

/* Status codes. */
#define FS_OK 0
#define FS_ERR_INVALID (-1)      /* bad argument (size, capacity, negative id, ...) */
#define FS_ERR_NO_LANE (-2)      /* unknown lane, or the tag is not assigned to a lane */
#define FS_ERR_LANE_BUSY (-3)    /* the lane (or tag, or allocator) still holds live allocations */
#define FS_ERR_LANE_FULL (-4)    /* the lane's cap, or no memory left for a free block large enough */
#define FS_ERR_TAG_CAP (-5)      /* the allocation would put the tag past its cap */
#define FS_ERR_NO_TAG (-6)       /* unknown tag */
#define FS_ERR_NOT_OURS (-7)     /* free of a pointer this allocator does not hold (or a double free) */
#define FS_ERR_BACKING (-8)      /* the backing memory could not be obtained (host OOM, no CUDA, ...) */
#define FS_ERR_WRONG_DEVICE (-9) /* the tag's lane lives on another device than the one asked for */
#define FS_ERR_INTERNAL (-10)    /* unexpected internal failure (e.g. out of host memory for metadata) */

typedef struct fs_allocator fs_allocator; /* opaque */

typedef struct fs_lane_stats {
  int64_t lane;
  int64_t device;
  int64_t capacity;         /* bytes of the arena (the lane cap) */
  int64_t used;             /* bytes in live blocks */
  int64_t largest_free;     /* bytes of the largest free block */
  int64_t allocated_blocks; /* live blocks */
  int64_t free_blocks;      /* free blocks (1 when the lane is empty: everything coalesced) */
  int64_t tags;             /* tags assigned to the lane */
  int64_t active_tag;       /* tag the lane runs now (stream fallback), FS_NO_TAG if none */
  int64_t base;             /* address of the first byte of the lane's first segment */
  int64_t reserved;         /* bytes of memory the lane holds: >= capacity, more after a shrink that live blocks
                               kept from giving everything back (see fs_lane_resize) */
  int64_t segments;         /* pieces of memory the lane is made of (1 unless it grew while blocks were live) */
  int64_t retired;          /* 1: dissolved with live blocks (fs_lane_retire), its memory goes back as they go */
} fs_lane_stats;

typedef struct fs_tag_stats {
  int64_t tag;
  int64_t lane;        /* FS_NO_LANE if unassigned */
  int64_t cap;         /* FS_UNLIMITED if none */
  int64_t live;        /* bytes in live blocks */
  int64_t peak;        /* highest `live` since the tag was created or its peak last reset */
  int64_t allocations; /* live blocks */
  int64_t failures;    /* allocations refused so far (cap or lane full) */
} fs_tag_stats;

typedef struct fs_block_info {
  int64_t offset; /* from the base of its segment */
  int64_t size;
  int64_t tag;     /* FS_NO_TAG for a free block */
  int64_t is_free; /* 0 or 1 */
  int64_t segment; /* index of its segment in the lane (0 for a lane of one segment) */
  int64_t address; /* first byte */
} fs_block_info;

typedef struct fs_pool_stats {
  int64_t device;
  int64_t capacity;     /* bytes of the pool */
  int64_t used;         /* bytes carved out for lanes */
  int64_t largest_free; /* bytes of the largest free piece */
  int64_t free_blocks;  /* free pieces */
  int64_t segments;     /* lane segments carved from it */
  int64_t base;         /* address of its first byte */
} fs_pool_stats;

/* --- library ------------------------------------------------------------------------------------- */
FS_API int64_t fs_alignment(void);
FS_API const char* fs_status_string(int64_t status);
/* Reason of the calling thread's last failure (FS_OK after a success). */
FS_API int64_t fs_last_error(void);
/* Detail of the calling thread's last failure ("" if none), e.g. why cudaMalloc failed. Valid until the
 * thread's next call. */
FS_API const char* fs_last_error_detail(void);

/* --- allocator instances ------------------------------------------------------------------------- */
FS_API fs_allocator* fs_allocator_create(int64_t backing); /* NULL on a bad backing */
/* Frees every lane's memory: pointers still live become invalid. Never pass the global allocator. */
FS_API void fs_allocator_destroy(fs_allocator* a);
/* The process-wide allocator used by fs_cuda_malloc/fs_cuda_free (CUDA backing unless changed). */
FS_API fs_allocator* fs_global_allocator(void);
/* Change the global allocator's backing; FS_ERR_LANE_BUSY if it has lanes or live allocations. */
FS_API int64_t fs_global_set_backing(int64_t backing);
FS_API int64_t fs_allocator_backing(const fs_allocator* a);

/* --- device pools ---------------------------------------------------------------------------------- */
/* Obtain `bytes` (rounded down to FS_ALIGNMENT) of `device`'s memory at once, and carve that device's lanes
 * from it from now on: creating, resizing and dissolving a lane then only moves bookkeeping, and a shrinking
 * lane gives its free tail back. `bytes` = 0 gives the pool back. FS_ERR_LANE_BUSY while the device has lanes;
 * FS_ERR_BACKING if the memory cannot be obtained. Without a pool, each lane segment is obtained from the
 * backing on its own (one cudaMalloc per segment on CUDA). */
FS_API int64_t fs_pool_set(fs_allocator* a, int64_t device, int64_t bytes);
/* FS_ERR_NO_LANE if the device has no pool. */
FS_API int64_t fs_pool_stats_get(fs_allocator* a, int64_t device, fs_pool_stats* out);

/* --- lanes --------------------------------------------------------------------------------------- */
/* Create a lane of `capacity` bytes (rounded down to FS_ALIGNMENT) on `device` (ignored on the host).
 * With a pool for the device, the lane is carved from it: in one piece if the pool has one large enough,
 * else from several (segments). Returns the lane id (>= 0) or a negative status. */
FS_API int64_t fs_lane_create(fs_allocator* a, int64_t capacity, int64_t device);
/* Dissolve an empty lane and give its memory back; FS_ERR_LANE_BUSY if it holds live blocks. Tags
 * assigned to it become unassigned, and streams bound to it unbound. */
FS_API int64_t fs_lane_dissolve(fs_allocator* a, int64_t lane);
/* Dissolve a lane that may still hold live blocks (a trial moved elsewhere and kept its persistent memory
 * here): tags and streams are unassigned and unbound at once and nothing more is allocated from it; its free
 * memory goes back now where it can (pooled lanes), the rest as the live blocks are freed (fs_reap). An empty
 * lane is dissolved at once. */
FS_API int64_t fs_lane_retire(fs_allocator* a, int64_t lane);
/* Dissolve retired lanes that have emptied, and give back the free memory of those that have not (pooled);
 * of every other lane, give back what it holds beyond its capacity (after an overdraw or a shrink), as far as
 * live blocks allow.
 * Returns how many lanes were dissolved. Lane creation, resizing, dissolution and retirement also do this. */
FS_API int64_t fs_reap(fs_allocator* a);
/* Change a lane's capacity (its hard cap), also while it holds live blocks.
 * - Empty lane: its memory is given back and obtained again in one piece where possible.
 * - Growing: the last segment grows in place if the pool's memory right after it is free, else the lane gains
 *   a segment of the difference. FS_ERR_BACKING (the lane unchanged) if the memory cannot be obtained.
 * - Shrinking: the cap drops at once (below the live bytes too: allocations fail until enough is freed);
 *   memory goes back from free segments, and from free segment tails of pooled lanes, as far as live blocks
 *   allow: `reserved` may stay above `capacity`. */
FS_API int64_t fs_lane_resize(fs_allocator* a, int64_t lane, int64_t capacity);
FS_API int64_t fs_lane_stats_get(fs_allocator* a, int64_t lane, fs_lane_stats* out);
/* Copy up to `max` blocks, in address order, into `out`; returns the lane's number of blocks (which may
 * exceed `max`) or a negative status. */
FS_API int64_t fs_lane_blocks(fs_allocator* a, int64_t lane, fs_block_info* out, int64_t max);
/* Verify the lane's invariants (in every segment blocks tile the arena, no two free neighbours, indexes and
 * counters agree; segments are where the index and the pool say; reserved >= capacity unless retired). FS_OK,
 * or FS_ERR_INTERNAL with a description in `why` (NUL-terminated, up to why_len). */
FS_API int64_t fs_lane_check(fs_allocator* a, int64_t lane, char* why, int64_t why_len);
/* Lane ids, up to `max` of them; returns how many lanes there are. */
FS_API int64_t fs_lane_list(fs_allocator* a, int64_t* out, int64_t max);

/* --- tags ---------------------------------------------------------------------------------------- */
/* Assign `tag` (>= 0, or FS_NO_TAG for untagged allocations) to `lane`, or unassign it with FS_NO_LANE.
 * Creates the tag if needed. Later allocations of the tag go to the lane; its live blocks stay where
 * they are. */
FS_API int64_t fs_assign_tag(fs_allocator* a, int64_t tag, int64_t lane);
/* Hard cap of the tag's live bytes; FS_UNLIMITED removes it. Creates the tag if needed. A cap below the
 * live bytes is allowed: further allocations of the tag fail until it frees enough. */
FS_API int64_t fs_set_tag_cap(fs_allocator* a, int64_t tag, int64_t cap);
FS_API int64_t fs_tag_stats_get(fs_allocator* a, int64_t tag, fs_tag_stats* out);
/* Peak := live, so the next peak measures from here (per-iteration ephemeral memory T = peak - P). */
FS_API int64_t fs_reset_peak(fs_allocator* a, int64_t tag);
/* Forget a tag with no live bytes (FS_ERR_LANE_BUSY otherwise). */
FS_API int64_t fs_forget_tag(fs_allocator* a, int64_t tag);

/* --- streams (fallback for threads without a tag) ------------------------------------------------ */
/* Bind a stream handle to a lane (FS_NO_LANE unbinds). An allocation from a thread without a tag, on a
 * bound stream, is charged to the lane's active tag: e.g. autograd's backward pass, which runs on
 * PyTorch's device threads but on the forward pass's stream. */
FS_API int64_t fs_bind_stream(fs_allocator* a, void* stream, int64_t lane);
/* The tag the lane runs now (FS_NO_TAG for none): lanes time-slice, one trial at a time. */
FS_API int64_t fs_set_lane_tag(fs_allocator* a, int64_t lane, int64_t tag);

/* --- allocation ---------------------------------------------------------------------------------- */
/* Calling thread's tag (thread_local); FS_NO_TAG clears it. */
FS_API void fs_set_thread_tag(int64_t tag);
FS_API int64_t fs_get_thread_tag(void);
/* Allocate `size` bytes for `tag` from the tag's lane. FS_NO_TAG with no lane assigned allocates
 * outside any lane, directly from the backing, still counted under FS_NO_TAG. NULL on failure.
 * The lane's capacity caps its live bytes, not where they lie: a request within the cap that no free block
 * holds (the free memory is in smaller pieces) gets more memory for the lane: its last pooled segment grows
 * in place, else it gains a segment of the request's size (from the pool, or the backing without one). Its
 * `reserved` then exceeds `capacity` until fs_reap or a resize trims what the freed blocks leave. */
FS_API void* fs_malloc(fs_allocator* a, int64_t size, int64_t tag);
/* The same with the tag chosen as fs_cuda_malloc does: the thread's tag, else the stream's lane's
 * active tag, else FS_NO_TAG. `device` >= 0 must match the lane's device. */
FS_API void* fs_malloc_current(fs_allocator* a, int64_t size, int64_t device, void* stream);
FS_API int64_t fs_free(fs_allocator* a, void* ptr);
/* Total live bytes over every tag (lanes and outside them): for leak checks. */
FS_API int64_t fs_allocator_live_bytes(fs_allocator* a);

/* --- CUDA (torch.cuda.memory.CUDAPluggableAllocator entry points) -------------------------------- */
typedef struct CUstream_st* fs_cuda_stream_t; /* = cudaStream_t, declared without CUDA headers */
/* Allocate from the global allocator for the calling thread's tag. On failure it throws a C++
 * c10::OutOfMemoryError (PyTorch's torch.OutOfMemoryError) when fs_cuda_bind_torch succeeded, else a
 * std::bad_alloc: the failing tag's thread gets the error, other tags keep allocating. */
FS_API void* fs_cuda_malloc(ssize_t size, int device, fs_cuda_stream_t stream);
FS_API void fs_cuda_free(void* ptr, ssize_t size, int device, fs_cuda_stream_t stream);
/* Find c10::OutOfMemoryError in PyTorch's libc10 (a path, or NULL for the already-loaded "libc10.so")
 * so that fs_cuda_malloc raises torch's own out-of-memory error. FS_OK or FS_ERR_BACKING. */
FS_API int64_t fs_cuda_bind_torch(const char* libc10_path);
/* FS_OK if libcudart can be loaded, else FS_ERR_BACKING with the reason in `why`. */
FS_API int64_t fs_cuda_runtime_status(char* why, int64_t why_len);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLUIDSALUS_LANE_ALLOCATOR_H_ */
