/*
 * zpage.h: compressed memory regions for C programs.
 *
 * A region is `size` bytes of memory the program reads and writes directly;
 * zpage keeps at most `budget` bytes of it resident and compresses the
 * coldest pages beyond that, restoring them on the next access
 * (userfaultfd; Linux >= 6.8).
 *
 * Link with `pkg-config --cflags --libs zpage` (libzpage.so), or
 * `pkg-config --static --cflags --libs zpage` with libzpage.a.
 *
 * Every function returning int returns ZPAGE_OK (0) or a negative ZPAGE_ERR_*
 * code; zpage_last_error() then describes the failure. Functions are
 * thread-safe for distinct regions and for concurrent access to one region.
 *
 * In the default fault mode (ZPAGE_FAULT_SIGBUS) the kernel cannot fault in
 * evicted pages for a system call: call zpage_region_prefault() (or pin) on a
 * buffer in the region before passing it to read(2), write(2), etc.
 */
#ifndef ZPAGE_H
#define ZPAGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZPAGE_OK 0
#define ZPAGE_ERR_NULL_POINTER (-1)     /* a pointer argument was NULL */
#define ZPAGE_ERR_INVALID_ARGUMENT (-2) /* an argument or option cannot work */
#define ZPAGE_ERR_OUT_OF_RANGE (-3)     /* offset/length outside the region */
#define ZPAGE_ERR_SYSTEM (-4)           /* a system call failed */
#define ZPAGE_ERR_UNSUPPORTED (-5)      /* the kernel lacks what zpage needs */
#define ZPAGE_ERR_PANIC (-6)            /* internal error in zpage (a bug) */

#define ZPAGE_FAULT_SIGBUS 0         /* faulting thread resolves its fault; no privilege */
#define ZPAGE_FAULT_HANDLER_THREAD 1 /* a thread resolves faults; syscalls may touch evicted pages */

#define ZPAGE_AGING_REFAULT 0 /* zpage's refault-distance policy (default) */
#define ZPAGE_AGING_FIFO 1    /* evict in the order pages became resident */

#define ZPAGE_POOL_SIZE_CLASS 0 /* zsmalloc-like size classes (default) */
#define ZPAGE_POOL_TRI_PAGE 1   /* three slots per page (Zircon) */
#define ZPAGE_POOL_TWO_SLOT 2   /* two buddies per page (zbud) */

/* An opaque region handle. */
typedef struct zpage_region zpage_region;

/* Options of zpage_region_create(); initialise with zpage_options_init(). */
typedef struct zpage_options {
    const char *codec; /* "lz4" (NULL: lz4), "lz4-flex", "zstd", "zstd:LEVEL" */
    int fault_mode;    /* ZPAGE_FAULT_* */
    int aging;         /* ZPAGE_AGING_* */
    int pool;          /* ZPAGE_POOL_* */
} zpage_options;

/* A snapshot of a region's counters. */
typedef struct zpage_stats {
    uint64_t size_bytes;        /* region size */
    uint64_t budget_bytes;      /* resident budget */
    uint64_t resident_bytes;    /* uncompressed bytes held (resident + staged) */
    uint64_t staged_bytes;      /* of which evicted but not yet compressed */
    uint64_t pinned_bytes;      /* pinned bytes */
    uint64_t compressed_bytes;  /* compressed data held for evicted pages */
    uint64_t stored_pages;      /* pages in the compressed store */
    uint64_t same_filled_pages; /* of which same-filled (nothing stored) */
    uint64_t faults;            /* faults resolved */
    uint64_t restores;          /* faults that decompressed a page */
    uint64_t trial_hits;        /* faults on staged pages (no decompression) */
    uint64_t evictions;         /* pages taken out of the region */
    uint64_t compressions;      /* pages compressed */
} zpage_stats;

/* Fills *options with the defaults (lz4, SIGBUS, refault aging, size classes). */
int zpage_options_init(zpage_options *options);

/* Creates a region; options may be NULL for the defaults. *out receives the handle. */
int zpage_region_create(size_t size, size_t budget, const zpage_options *options,
                        zpage_region **out);

/* Base address of the region (NULL if region is NULL). */
void *zpage_region_address(const zpage_region *region);

/* Size of the region in bytes (0 if region is NULL). */
size_t zpage_region_size(const zpage_region *region);

/* Copies the region's counters into *out. */
int zpage_region_stats(const zpage_region *region, zpage_stats *out);

/* Compresses the pages of [offset, offset+len) now. */
int zpage_region_advise_cold(zpage_region *region, size_t offset, size_t len);

/* Restores the pages of the range ahead of use. */
int zpage_region_advise_willneed(zpage_region *region, size_t offset, size_t len);

/* Makes the range present so system calls can read or write it. */
int zpage_region_prefault(zpage_region *region, size_t offset, size_t len);

/* Keeps the range resident until unpinned (at most half the budget). Pins nest. */
int zpage_region_pin(zpage_region *region, size_t offset, size_t len);

/* Undoes one zpage_region_pin() of the range. */
int zpage_region_unpin(zpage_region *region, size_t offset, size_t len);

/* Frees the region (NULL is ignored). Its address must not be used afterwards. */
int zpage_region_destroy(zpage_region *region);

/* Message of the last failed call on this thread ("" if none); valid until the next failure. */
const char *zpage_last_error(void);

/* Library version, e.g. "0.1.0". */
const char *zpage_version(void);

#ifdef __cplusplus
}
#endif

#endif /* ZPAGE_H */
