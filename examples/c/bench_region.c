/*
 * bench_region.c: seed 000's access test (sequential and random reads over
 * low- and high-entropy data) on a zpage region instead of malloc'd memory.
 *
 *   cc bench_region.c -o bench_region $(pkg-config --cflags --libs zpage)
 *   ./bench_region [SIZE_MIB [BUDGET_MIB]]      (defaults: 64 MiB, a quarter of it)
 *
 * The region keeps at most BUDGET_MIB resident; the rest lives compressed and
 * comes back on access. The program checks every byte it wrote and exits 0
 * only if all of them read back intact.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <zpage.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* xorshift64: the "random data" and the random access order, reproducible. */
static uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static uint8_t expected_byte(int high_entropy, size_t i) {
    if (!high_entropy)
        return (uint8_t)(i % 8);
    /* One random word per 8 bytes, derived from the word's index. */
    uint64_t state = (i / 8) * 0x9E3779B97F4A7C15ull + 1;
    uint64_t word = next_random(&state);
    return (uint8_t)(word >> (8 * (i % 8)));
}

static void print_stats(const char *label, const zpage_region *region) {
    zpage_stats s = {.struct_size = sizeof s};
    if (zpage_region_stats(region, &s) != ZPAGE_OK) {
        fprintf(stderr, "stats: %s\n", zpage_last_error());
        exit(1);
    }
    /* Same-filled pages (bench.c's i % 8 pattern is one) store no data at all. */
    double with_data = (double)(s.stored_pages - s.same_filled_pages) * 4096.0;
    printf("    %s: resident %.1f MiB of budget %.1f MiB; %llu pages stored (%llu same-filled), "
           "%.1f MiB of compressed data (ratio %.2f); %llu faults\n",
           label, s.resident_bytes / 1048576.0, s.budget_bytes / 1048576.0,
           (unsigned long long)s.stored_pages, (unsigned long long)s.same_filled_pages,
           s.compressed_bytes / 1048576.0,
           s.compressed_bytes ? with_data / (double)s.compressed_bytes : 0.0,
           (unsigned long long)s.fault_count);
    if (s.resident_bytes > s.budget_bytes + s.budget_bytes / 20) {
        fprintf(stderr, "resident memory above the budget\n");
        exit(1);
    }
}

static int run(int high_entropy, size_t size, size_t budget) {
    zpage_options options;
    zpage_options_init(&options);
    options.codec = "lz4";
    zpage_region *region = NULL;
    if (zpage_region_create(size, budget, &options, &region) != ZPAGE_OK) {
        fprintf(stderr, "zpage_region_create: %s\n", zpage_last_error());
        return 1;
    }
    uint8_t *mem = zpage_region_address(region);
    const char *entropy = high_entropy ? "High Entropy" : "Low Entropy";
    printf("[+] %zu MiB region, %zu MiB budget, %s data\n", size >> 20, budget >> 20, entropy);

    for (size_t i = 0; i < size; i++)
        mem[i] = expected_byte(high_entropy, i);
    print_stats("after fill", region);

    /* volatile: the compiler must really read every byte. */
    const volatile uint8_t *bytes = mem;
    double start = now_seconds();
    uint64_t sum = 0;
    for (size_t i = 0; i < size; i++)
        sum += bytes[i];
    double seconds = now_seconds() - start;
    printf("[+] Sequential Access %s: %.2f MiB/s (checksum %llu)\n", entropy, (size >> 20) / seconds,
           (unsigned long long)sum);

    /* Random reads: one byte per touch, four touches per page. */
    size_t touches = (size / 4096) * 4;
    uint64_t rng = 42;
    size_t wrong = 0;
    start = now_seconds();
    for (size_t t = 0; t < touches; t++) {
        size_t i = next_random(&rng) % size;
        if (bytes[i] != expected_byte(high_entropy, i))
            wrong++;
    }
    seconds = now_seconds() - start;
    printf("[+] Random Access %s: %.0f touches/s\n", entropy, touches / seconds);
    print_stats("after access", region);

    for (size_t i = 0; i < size; i++)
        if (mem[i] != expected_byte(high_entropy, i))
            wrong++;
    if (zpage_region_destroy(region) != ZPAGE_OK) {
        fprintf(stderr, "zpage_region_destroy: %s\n", zpage_last_error());
        return 1;
    }
    if (wrong) {
        fprintf(stderr, "%zu bytes read back wrong\n", wrong);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    size_t size_mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    size_t budget_mib = argc > 2 ? strtoul(argv[2], NULL, 10) : size_mib / 4;
    printf("zpage %s\n", zpage_version());

    /* The error path: a NULL out-pointer is refused with a message, not a crash. */
    if (zpage_region_create(1 << 20, 1 << 18, NULL, NULL) != ZPAGE_ERR_NULL_POINTER) {
        fprintf(stderr, "expected ZPAGE_ERR_NULL_POINTER\n");
        return 1;
    }
    printf("[+] error reporting works: %s\n", zpage_last_error());

    if (run(0, size_mib << 20, budget_mib << 20) || run(1, size_mib << 20, budget_mib << 20))
        return 1;
    printf("zpage C example: OK\n");
    return 0;
}
