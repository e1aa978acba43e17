/* Allocates MIB mebibytes of compressible text as fast as it can, from
 * THREADS threads, in 64 KiB malloc'd blocks kept until the end (as an
 * interpreter building a large list of strings does), then reads every
 * block back and prints one line with a digest of the whole. The line is
 * the same with and without zpage. With `random`, the blocks hold
 * pseudo-random bytes instead, which no codec compresses.
 *
 *   fastfill MIB THREADS [random]
 *
 * Exit status 0 when every block read back as written. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK (64UL * 1024UL)

static size_t blocks_per_thread;
static int random_bytes;

/* Block `b` of thread `t`: eight-digit numbers, one per 8 bytes, that
 * repeat every 512 bytes (compresses well, as text does). */
static void fill(char *p, size_t t, size_t b) {
    if (random_bytes) {
        uint64_t x = (t * 1000003 + b) * 0x9E3779B97F4A7C15ULL + 1;
        for (size_t off = 0; off < BLOCK; off += 8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            memcpy(p + off, &x, 8);
        }
        return;
    }
    char word[16];
    for (size_t off = 0; off < BLOCK; off += 8) {
        snprintf(word, sizeof word, "%08zu", (t * 1000003 + b * 64 + off / 512 % 64) % 100000000);
        memcpy(p + off, word, 8);
    }
}

struct job {
    size_t t;
    char **blocks;
    uint64_t digest;
    int bad;
};

static void *run(void *arg) {
    struct job *job = arg;
    job->blocks = malloc(blocks_per_thread * sizeof(char *));
    for (size_t b = 0; b < blocks_per_thread; b++) {
        job->blocks[b] = malloc(BLOCK);
        if (!job->blocks[b]) {
            job->bad = 1;
            return 0;
        }
        fill(job->blocks[b], job->t, b);
    }
    char *expect = malloc(BLOCK);
    uint64_t h = 1469598103934665603ULL;
    for (size_t b = 0; b < blocks_per_thread; b++) {
        fill(expect, job->t, b);
        if (memcmp(expect, job->blocks[b], BLOCK) != 0)
            job->bad = 1;
        for (size_t i = 0; i < BLOCK; i += 61)
            h = (h ^ (unsigned char)job->blocks[b][i]) * 1099511628211ULL;
    }
    free(expect);
    job->digest = h;
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "random") == 0)) {
        fprintf(stderr, "usage: fastfill MIB THREADS [random]\n");
        return 2;
    }
    random_bytes = argc == 4;
    size_t mib = strtoul(argv[1], 0, 10), threads = strtoul(argv[2], 0, 10);
    if (threads < 1 || threads > 64) {
        fprintf(stderr, "THREADS: 1 to 64\n");
        return 2;
    }
    blocks_per_thread = (mib << 20) / BLOCK / threads;
    struct job jobs[64];
    pthread_t ids[64];
    for (size_t t = 0; t < threads; t++) {
        jobs[t] = (struct job){.t = t};
        pthread_create(&ids[t], 0, run, &jobs[t]);
    }
    uint64_t digest = 0;
    int bad = 0;
    for (size_t t = 0; t < threads; t++) {
        pthread_join(ids[t], 0);
        digest ^= jobs[t].digest + t;
        bad |= jobs[t].bad;
    }
    printf("%zu MiB in %zu threads: %s, digest %016llx\n", mib, threads, bad ? "MISMATCH" : "checked",
           (unsigned long long)digest);
    return bad ? 99 : 0;
}
