/*
 * signal_handler.c: a program whose signal handler reads region memory.
 *
 *   cc signal_handler.c -o signal_handler $(pkg-config --cflags --libs zpage)
 *   ./signal_handler [SECONDS]        (default 3)
 *
 * A 64 MiB region with an 8 MiB budget: most of it lives compressed. A
 * process-wide timer fires 10,000 times a second (SIGALRM can land on any
 * thread, zpage's own included); its handler reads one word of a random
 * page, which usually faults the page back in from inside the handler. The
 * main thread meanwhile reads random pages and calls prefault, pin, unpin,
 * advise_willneed and stats. The program checks every word it reads and
 * exits 0 only if all of them were right; a hang is a failure too.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <zpage.h>

#define PAGE 4096u

static volatile uint64_t *region_base;
static size_t region_pages;
static volatile sig_atomic_t handler_reads, handler_wrong;
static uint64_t handler_rng = 0x2545F4914F6CDD1Dull;

static uint64_t tag(size_t page) { return (page * 0x9E3779B97F4A7C15ull) | 1; }

static uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static void on_alarm(int signal) {
    (void)signal;
    size_t page = next_random(&handler_rng) % region_pages;
    if (region_base[page * (PAGE / 8)] != tag(page))
        handler_wrong++;
    handler_reads++;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void check(int rc, const char *what) {
    if (rc != ZPAGE_OK) {
        fprintf(stderr, "%s: %s\n", what, zpage_last_error());
        exit(1);
    }
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 3.0;
    zpage_region *region;
    check(zpage_region_create(64u << 20, 8u << 20, NULL, &region), "zpage_region_create");
    region_base = zpage_region_address(region);
    region_pages = zpage_region_size(region) / PAGE;
    for (size_t p = 0; p < region_pages; p++)
        region_base[p * (PAGE / 8)] = tag(p);

    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_alarm;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(SIGALRM, &action, NULL);
    struct itimerval timer = {{0, 100}, {0, 100}};
    setitimer(ITIMER_REAL, &timer, NULL);

    uint64_t rng = 7, wrong = 0, reads = 0;
    double end = now_seconds() + seconds;
    while (now_seconds() < end) {
        for (int i = 0; i < 2000; i++) {
            size_t page = next_random(&rng) % region_pages;
            if (region_base[page * (PAGE / 8)] != tag(page))
                wrong++;
            reads++;
        }
        size_t page = next_random(&rng) % (region_pages - 16);
        check(zpage_region_prefault(region, page * PAGE, 16 * PAGE), "prefault");
        check(zpage_region_pin(region, page * PAGE, 4 * PAGE), "pin");
        zpage_stats stats = {.struct_size = sizeof stats};
        check(zpage_region_stats(region, &stats), "stats");
        check(zpage_region_unpin(region, page * PAGE, 4 * PAGE), "unpin");
        check(zpage_region_advise_willneed(region, (next_random(&rng) % (region_pages - 8)) * PAGE,
                                           8 * PAGE),
              "advise_willneed");
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);

    zpage_stats stats = {.struct_size = sizeof stats};
    check(zpage_region_stats(region, &stats), "stats");
    printf("main reads %llu (wrong %llu); handler reads %llu (wrong %llu); %llu faults, %llu evictions\n",
           (unsigned long long)reads, (unsigned long long)wrong, (unsigned long long)handler_reads,
           (unsigned long long)handler_wrong, (unsigned long long)stats.fault_count,
           (unsigned long long)stats.eviction_count);
    check(zpage_region_destroy(region), "zpage_region_destroy");
    if (wrong || handler_wrong || handler_reads < 1000) {
        printf("zpage signal example: FAILED\n");
        return 1;
    }
    printf("zpage signal example: OK\n");
    return 0;
}
