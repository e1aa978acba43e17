/* What fork() gives a child of memory the program advised with
 * MADV_WIPEONFORK, MADV_KEEPONFORK, MADV_DONTFORK and MADV_DOFORK.
 *
 * A heap block of SIZE_MIB (64 by default) is filled with non-zero words,
 * then part of it is advised and the process forks. The child counts what it
 * reads; the parent prints the child's status and checks its own copy. Every
 * line is the same with and without zpage (under `zpage run` with a small
 * budget most of the block is compressed at the fork): the test compares
 * the two outputs.
 *
 *   forkadvice wipe      half the block WIPEONFORK: the child reads zeros there
 *   forkadvice keep      half WIPEONFORK, then its middle KEEPONFORK again
 *   forkadvice dontfork  half DONTFORK (and another mapping whole): a child
 *                        touching it dies by SIGSEGV; another frees the
 *                        block; then DOFORK and a child reads it all again
 *
 * Exit status 0 when every line is as the kernel promises (the test also
 * compares the lines). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1024UL * 1024UL)
#define PAGE 4096UL

static size_t SIZE = 64 * MiB;

static uint64_t pattern(size_t word) {
    /* Non-zero, compressible, position-dependent: a wrong page shows. */
    return (word * 0x9E3779B1ULL) ^ ((word / 512) << 20) ^ (1ULL << 63);
}

/* Words of [from, to) (word indices into the block) that differ from the
 * pattern, and words that are not zero. */
static size_t mismatches(const uint64_t *w, size_t from, size_t to) {
    size_t n = 0;
    for (size_t i = from; i < to; i++) n += w[i] != pattern(i);
    return n;
}
static size_t nonzero(const uint64_t *w, size_t from, size_t to) {
    size_t n = 0;
    for (size_t i = from; i < to; i++) n += w[i] != 0;
    return n;
}

static void advise(void *p, size_t len, int advice, const char *name) {
    if (madvise(p, len, advice) != 0) {
        perror(name);
        exit(2);
    }
}

static void print_status(const char *who, int status) {
    if (WIFEXITED(status))
        printf("%s: exit %d\n", who, WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        printf("%s: killed by %s\n", who, strsignal(WTERMSIG(status)));
    else
        printf("%s: status %#x\n", who, status);
}

static int wait_child(pid_t child, const char *who) {
    int status;
    if (waitpid(child, &status, 0) != child) {
        perror("waitpid");
        exit(2);
    }
    print_status(who, status);
    return status;
}

static pid_t fork_or_die(void) {
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        exit(2);
    }
    return child;
}

/* The block: malloc'd (glibc or zpage's region), the page-aligned SIZE
 * inside it used, so the same words are advised with and without zpage. */
static uint64_t *block(void **raw) {
    *raw = malloc(SIZE + PAGE);
    if (!*raw) {
        perror("malloc");
        exit(2);
    }
    uint64_t *w = (uint64_t *)(((uintptr_t)*raw + PAGE - 1) & ~(PAGE - 1));
    for (size_t i = 0; i < SIZE / 8; i++) w[i] = pattern(i);
    return w;
}

/* Reads the first `mib` MiB again, so that under zpage part of an advised
 * range is resident at the fork and the rest compressed. */
static uint64_t touch(const uint64_t *w, size_t mib) {
    uint64_t sum = 0;
    for (size_t i = 0; i < mib * MiB / 8; i += 512) sum += w[i];
    return sum;
}

/* On stderr (which the test does not compare): pages of the advised range
 * not resident at the fork, which under zpage are the compressed ones. */
static void report_absent(const void *p, size_t bytes) {
    size_t pages = bytes / PAGE, absent = 0;
    unsigned char *v = malloc(pages);
    if (!v || mincore((void *)p, bytes, v) != 0) {
        perror("mincore");
        exit(2);
    }
    for (size_t i = 0; i < pages; i++) absent += !(v[i] & 1);
    free(v);
    fprintf(stderr, "advised pages not resident at the fork: %zu of %zu\n", absent, pages);
}

static int parent_checks(const uint64_t *w) {
    size_t bad = mismatches(w, 0, SIZE / 8);
    printf("parent: %zu words differ from what it wrote\n", bad);
    return bad != 0;
}

static int mode_wipe(void) {
    void *raw;
    uint64_t *w = block(&raw);
    size_t half = SIZE / 2 / 8;
    advise(w, SIZE / 2, MADV_WIPEONFORK, "MADV_WIPEONFORK");
    volatile uint64_t sum = touch(w, 4);
    (void)sum;
    report_absent(w, SIZE / 2);
    int bad = 0;
    for (int round = 1; round <= 2; round++) {
        pid_t child = fork_or_die();
        if (child == 0) {
            size_t wiped = nonzero(w, 0, half);
            size_t kept = mismatches(w, half, SIZE / 8);
            printf("child %d: %zu non-zero words in the wiped half, %zu wrong words in the other\n",
                   round, wiped, kept);
            /* The wiped half is ordinary memory in the child. */
            for (size_t i = 0; i < half; i += 511) w[i] = pattern(i);
            size_t rewritten = 0;
            for (size_t i = 0; i < half; i += 511) rewritten += w[i] == pattern(i);
            printf("child %d: %zu words written back into the wiped half\n", round, rewritten);
            fflush(stdout);
            _exit(wiped != 0 || kept != 0);
        }
        int status = wait_child(child, "parent: child");
        bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        bad |= parent_checks(w);
    }
    free(raw);
    return bad;
}

static int mode_keep(void) {
    void *raw;
    uint64_t *w = block(&raw);
    size_t half = SIZE / 2 / 8;
    /* Wipe the first half, then keep its middle: wiped [0, 1/8) and
     * [3/8, 1/2), kept everything else. */
    advise(w, SIZE / 2, MADV_WIPEONFORK, "MADV_WIPEONFORK");
    advise((char *)w + SIZE / 8, SIZE / 4, MADV_KEEPONFORK, "MADV_KEEPONFORK");
    volatile uint64_t sum = touch(w, 4);
    (void)sum;
    report_absent(w, SIZE / 2);
    size_t eighth = SIZE / 8 / 8;
    pid_t child = fork_or_die();
    if (child == 0) {
        size_t wiped = nonzero(w, 0, eighth) + nonzero(w, 3 * eighth, half);
        size_t kept = mismatches(w, eighth, 3 * eighth) + mismatches(w, half, SIZE / 8);
        printf("child: %zu non-zero words where still wiped, %zu wrong words where kept\n",
               wiped, kept);
        fflush(stdout);
        _exit(wiped != 0 || kept != 0);
    }
    int status = wait_child(child, "parent: child");
    int bad = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    /* All of it kept again: the next child sees everything. */
    advise(w, SIZE / 2, MADV_KEEPONFORK, "MADV_KEEPONFORK");
    child = fork_or_die();
    if (child == 0) {
        size_t wrong = mismatches(w, 0, SIZE / 8);
        printf("child after keeping all: %zu wrong words\n", wrong);
        fflush(stdout);
        _exit(wrong != 0);
    }
    status = wait_child(child, "parent: child after keeping all");
    bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    bad |= parent_checks(w);
    free(raw);
    return bad;
}

static int mode_dontfork(void) {
    void *raw;
    uint64_t *w = block(&raw);
    size_t half = SIZE / 2 / 8;
    /* The second half: the block's malloc header stays in the first. */
    advise(w + half, SIZE / 2, MADV_DONTFORK, "MADV_DONTFORK");
    /* And a whole mapping of its own (under zpage a region the child has
     * none of, beside the block's region it has half of). */
    uint64_t *other = mmap(NULL, 4 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (other == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    for (size_t i = 0; i < 4 * MiB / 8; i++) other[i] = pattern(i);
    advise(other, 4 * MiB, MADV_DONTFORK, "MADV_DONTFORK");
    volatile uint64_t sum = touch(w, 4);
    (void)sum;
    report_absent(w + half, SIZE / 2);
    int bad = 0;
    /* This child reads the half it has, then touches the other. */
    pid_t child = fork_or_die();
    if (child == 0) {
        size_t wrong = mismatches(w, 0, half);
        printf("child: %zu wrong words in the half it has\n", wrong);
        fflush(stdout);
        volatile uint64_t *gone = w + half + 1000;
        uint64_t v = *gone;
        printf("child: read %#llx where nothing is mapped\n", (unsigned long long)v);
        fflush(stdout);
        _exit(3);
    }
    int status = wait_child(child, "parent: child touching the DONTFORK half");
    bad |= !WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV;
    /* This one frees the block (its header is in the half it has). */
    child = fork_or_die();
    if (child == 0) {
        size_t wrong = mismatches(w, 0, half);
        free(raw);
        printf("child: %zu wrong words, then freed the block\n", wrong);
        fflush(stdout);
        _exit(wrong != 0);
    }
    status = wait_child(child, "parent: child freeing the block");
    bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    bad |= parent_checks(w);
    /* Forked again after MADV_DOFORK: the child has it all. */
    advise(w + half, SIZE / 2, MADV_DOFORK, "MADV_DOFORK");
    child = fork_or_die();
    if (child == 0) {
        size_t wrong = mismatches(w, 0, SIZE / 8);
        printf("child after MADV_DOFORK: %zu wrong words\n", wrong);
        fflush(stdout);
        _exit(wrong != 0);
    }
    status = wait_child(child, "parent: child after MADV_DOFORK");
    bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    size_t wrong = mismatches(other, 0, 4 * MiB / 8);
    printf("parent: %zu words of the other mapping differ\n", wrong);
    bad |= wrong != 0;
    munmap(other, 4 * MiB);
    free(raw);
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: forkadvice wipe|keep|dontfork [SIZE_MIB]\n");
        return 2;
    }
    if (argc > 2) SIZE = strtoul(argv[2], NULL, 10) * MiB;
    if (SIZE < 8 * MiB || SIZE % (8 * MiB)) {
        fprintf(stderr, "SIZE_MIB: a multiple of 8\n");
        return 2;
    }
    int bad;
    if (!strcmp(argv[1], "wipe")) bad = mode_wipe();
    else if (!strcmp(argv[1], "keep")) bad = mode_keep();
    else if (!strcmp(argv[1], "dontfork")) bad = mode_dontfork();
    else {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 2;
    }
    printf("%s %s\n", bad ? "FAILED" : "ok", argv[1]);
    return bad;
}
