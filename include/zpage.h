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

/* An opaque budget handle: a resident limit many regions draw on. */
typedef struct zpage_budget zpage_budget;

/*
 * Options of zpage_region_create() and zpage_budget_create(); initialise with
 * zpage_options_init(), which sets struct_size. The struct may grow in later
 * versions: the library reads only the struct_size bytes the caller has, and
 * later fields keep their defaults.
 */
typedef struct zpage_options {
    uint32_t struct_size;  /* sizeof(zpage_options), set by zpage_options_init() */
    /* BEGIN GENERATED OPTIONS: do not edit (see crates/ffi/tests/header.rs) */
    int fault_mode; /* ZPAGE_FAULT_*. How faults on evicted pages are resolved: sigbus (the faulting thread, no privilege) or handler_thread (a zpage thread; system calls on evicted pages work; needs privilege). */
    const char *codec; /* NULL: the default. Codec of evicted pages: lz4, lz4:ACCELERATION, lz4-flex, zstd, zstd:LEVEL. */
    int aging; /* ZPAGE_AGING_*. How pages are picked for eviction: refault (zpage's policy) or fifo. */
    int pool; /* ZPAGE_POOL_*. Allocator of compressed pages: zsmalloc (size classes), tri-page (Zircon) or zbud. */
    uint64_t max_pool_bytes; /* Bytes; 0: unset. Cap on the compressed pool's memory (a size; unset: unlimited). With a backing, the oldest compressed pages are written back as the pool nears it; without, pages stay resident over the budget at the cap. */
    int keep_clean_copies; /* 1 or 0. A restored page keeps its compressed copy until written (saves compression, costs pool memory). */
    int dedup; /* 1 or 0. Identical evicted pages are stored once (a content hash, checked byte for byte). */
    const char *cold_codec; /* NULL: the default. A stronger codec for cold pages: zstd, zstd:LEVEL, zstd-dict[:LEVEL] (a dictionary trained from the budget's own pages). Evicted pages with no quick reuse go straight to it; pages compressed cold_after_ms are recompressed with it, kept when they take less memory. Unset: none, except zstd under memory_max_bytes with no backing. */
    uint32_t cold_after_ms; /* zpage_options_init writes the default. Milliseconds a page stays compressed before it is recompressed with the cold codec. */
    int cold_by_age_only; /* 1 or 0. With a cold codec: every eviction takes codec, and only recompression by age uses the cold codec (as zram's recompress). */
    const char *backing; /* NULL: the default. Where the oldest compressed pages go when the pool nears max_pool_bytes: a new file (created mode 0600; an existing file, a link, a directory or a character device is refused) or a block device not in use (PATH), a Redis server (redis://[USER@]HOST:PORT[/DB], rediss:// for TLS) or a Redis Cluster (redis+cluster://HOST:PORT,...). Sealed with a per-process key: unreadable afterwards. A file is removed when the budget ends unless keep_backing. Needs max_pool_bytes or memory_max_bytes (under a memory max the pool may take three quarters of what the rest of the process leaves). */
    int keep_backing; /* 1 or 0. Leave the backing file in place when the budget ends (its pages are sealed with a key that ends with the process: unreadable afterwards). */
    uint64_t backing_max_bytes; /* Bytes; 0: unset. The most a backing file or device may hold (a size; unset: the machine's memory). */
    const char *backing_password_file; /* NULL: the default. A file holding the Redis password (one line; refused unless private: chmod 600). Else $ZPAGE_REDIS_PASSWORD; never the password itself, which `ps` and /proc/PID/environ would show. */
    const char *backing_ca_file; /* NULL: the default. For rediss://: the CA certificate(s) (PEM) the server's certificate is checked against, instead of the system's store. */
    const char *backing_cert_file; /* NULL: the default. For rediss://: a client certificate (PEM), for servers that ask for one; needs backing_key_file. */
    const char *backing_key_file; /* NULL: the default. For rediss://: the client certificate's private key (PEM; refused unless private: chmod 600). */
    uint64_t memory_max_bytes; /* Bytes; 0: unset. A limit on the process's whole resident memory (a size; unset: none): its pages in compressed memory and out of it, the pool and zpage's own memory, as VmRSS and a container's limit count them. The budget shrinks to what the rest leaves (the pool grows as pages are compressed), and faults wait for eviction rather than pass the limit; with a budget too, both hold. What cannot be held (memory outside compressed memory alone over it, pages that cannot leave) is reported with how far over it went. With no backing and no cold_codec, cold pages are compressed with zstd, so that the pool fits. */
    uint32_t auto_budget_stall_ppm; /* zpage_options_init writes the default. A budget that finds itself: the stall target in parts per million of wall time (10000 is 1%; 0: off). The budget shrinks from what is resident while the time the program's threads spend restoring pages and waiting for room stays under it, and grows back when it passes it; the budget given is the most it may be. */
    const char *fault_trace; /* NULL: the default. Record the page of every fault, in order, to this new file (created 0600; an existing file or a link is refused), to replay the program's access order with `zpage bench --workload trace --trace FILE`. Run at a budget far below the program's memory, so nearly every access faults. */
    /* END GENERATED OPTIONS */
} zpage_options;

/*
 * A snapshot of a region's figures (gauges first, then counters; every name
 * ends in its unit). Set struct_size = sizeof(zpage_stats) before calling
 * zpage_region_stats(); the library fills the fields that fit and sets
 * struct_size to the bytes it filled, so the struct can grow.
 */
typedef struct zpage_stats {
    uint64_t struct_size;
    /* BEGIN GENERATED FIELDS: do not edit (see crates/ffi/tests/header.rs) */
    uint64_t size_bytes; /* Region size. */
    uint64_t budget_bytes; /* The resident budget the region draws on (shared by every region of its budget). */
    uint64_t resident_bytes; /* Uncompressed bytes this region holds: resident pages plus its staged pages. Pages mapped to the shared zero page count too (an upper bound). */
    uint64_t budget_resident_bytes; /* Uncompressed bytes every region of the budget holds (what the budget limits). */
    uint64_t overshoot_peak_bytes; /* The most bytes the budget held over its limit while pages could not leave (see `overshoot_count`); 0 if it never had to. */
    uint64_t staged_bytes; /* Of this region's bytes, those held uncompressed in the staging area (trial eviction). */
    uint64_t pinned_bytes; /* Pinned bytes of this region (never evicted). */
    uint64_t compressed_bytes; /* Bytes of compressed blobs (and raw pages) the budget's store holds. */
    uint64_t pool_bytes; /* Memory the budget's compressed pool uses for them (blobs plus fragmentation). */
    uint64_t stored_pages; /* Pages the budget's store holds (evicted pages, and clean resident pages' copies). */
    uint64_t same_filled_pages; /* Of which same-filled (no blob). */
    uint64_t raw_pages; /* Of which stored raw (incompressible). */
    uint64_t fault_count; /* Faults resolved (every kind). */
    uint64_t fault_ns; /* Time spent resolving them, from handler entry to the page being mapped. */
    uint64_t zero_fill_count; /* Faults on never-written (or discarded) pages, resolved with zeros. */
    uint64_t fault_around_count; /* Pages filled with zeros after a first-touch fault's page (fault-around), each sparing the program a fault of its own. */
    uint64_t restore_count; /* Faults that decompressed a page from the store. */
    uint64_t trial_hit_count; /* Faults on pages still in the staging area (trial eviction hits: no decompression). */
    uint64_t activation_count; /* Refaults (restores and trial hits) whose refault distance activated the page. */
    uint64_t demotion_count; /* Active pages moved back to the inactive queue. */
    uint64_t first_write_count; /* Write faults on write-protected restored pages (their compressed copy became stale). */
    uint64_t eviction_count; /* Pages taken out of the region. */
    uint64_t clean_eviction_count; /* Evictions of pages unwritten since their restore: the compressed copy was still exact, so nothing was compressed. */
    uint64_t sync_eviction_count; /* Of the clean evictions, those a faulting thread did itself. */
    uint64_t compression_count; /* Pages compressed into the store. */
    uint64_t eager_compression_count; /* Of which by `advise_cold` (Zircon's eager compressions). */
    uint64_t pressure_compression_count; /* Of which by the reclaimer (Zircon's memory-pressure compressions). */
    uint64_t helper_compression_count; /* Of those, pages the reclaimer's second compressor stored (it shares large batches when the machine has a second CPU). */
    uint64_t compress_failure_count; /* Pages the codec or the store refused (kept resident). */
    uint64_t overshoot_count; /* Faults that went over the budget without waiting because pages could not leave (the pool at its cap with no tier to write back to, a full or failing tier, every resident page pinned or held by `mlockall`/`restore_all`). */
    uint64_t throttle_count; /* Faults that waited: the budget was full, or the reclaimer was moving a burst of pages out (it does so while faults wait, see the crate documentation). */
    uint64_t throttle_ns; /* Total time those faults waited. */
    uint64_t ebusy_fix_count; /* Pages made exclusive again after fork (`EBUSY` from MOVE). */
    uint64_t hole_count; /* Pages found absent at eviction (the program discarded them): now zero. */
    uint64_t discard_count; /* Evicted pages dropped because the program discarded their range (MADV_DONTNEED). */
    uint64_t recompression_count; /* Compressed pages recompressed with the budget's cold codec (kept: they took less memory). */
    uint64_t recompression_saved_bytes; /* Bytes of compressed blobs those recompressions saved. */
    uint64_t recompression_no_gain_count; /* Pages the cold codec tried and did not shrink to a smaller size class (left as they were). */
    uint64_t cold_compression_count; /* Evictions compressed straight with the cold codec (pages with no quick reuse, `BudgetConfig::cold_at_eviction`). */
    uint64_t dedup_hit_count; /* Evicted pages found identical to a stored page (dedup): they share its blob. */
    uint64_t dedup_saved_bytes; /* Bytes of compressed blobs those pages would have taken stored on their own. */
    uint64_t dedup_verify_mismatch_count; /* Pages whose hash matched a stored page's and whose bytes did not (kept apart). */
    uint64_t memory_max_over_count; /* Looks of the budget's memory max (`memory_max_bytes`) that found the process's resident memory over it (budget-wide; 0 without one). */
    uint64_t memory_max_over_peak_bytes; /* The most the process's resident memory was over the memory max at a look (budget-wide; never falls; 0 if it never was). */
    /* END GENERATED FIELDS */
} zpage_stats;

/* Fills *options with the defaults (lz4, SIGBUS, refault aging, size classes, no tier). */
int zpage_options_init(zpage_options *options);

/* Creates a region with a budget of its own; options may be NULL for the
 * defaults. *out receives the handle. A budget of 0 with
 * options->auto_budget_stall_ppm set (10000: 1%) is a budget that finds
 * itself, at most a quarter of the machine's memory, as `zpage run --budget
 * auto`; the same holds for zpage_budget_create(). */
int zpage_region_create(size_t size, size_t budget, const zpage_options *options,
                        zpage_region **out);

/* Creates a budget of `budget` bytes that many regions draw on (one resident
 * limit, one compressed pool, one reclaimer); options may be NULL. */
int zpage_budget_create(size_t budget, const zpage_options *options, zpage_budget **out);

/* Creates a region of `size` bytes drawing on `budget`. */
int zpage_region_create_in(const zpage_budget *budget, size_t size, zpage_region **out);

/* Releases the caller's handle on a budget (NULL is ignored); regions made on
 * it keep it alive until they are destroyed. */
int zpage_budget_destroy(zpage_budget *budget);

/* Base address of the region (NULL if region is NULL). */
void *zpage_region_address(const zpage_region *region);

/* Size of the region in bytes (0 if region is NULL). */
size_t zpage_region_size(const zpage_region *region);

/* Copies the region's figures into *out (set out->struct_size first). */
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
