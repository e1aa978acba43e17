/* Hazards of real programs on memory zpage's preload library placed in
 * regions. Each mode fills memory larger than the budget with a pattern
 * (so most of it is evicted), does one thing a runtime does, and checks every
 * byte against the pattern (the shadow is the pattern function). Exit 0 and
 * "ok MODE" on success; any mismatch prints where and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <linux/futex.h>
#include <poll.h>
#include <setjmp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1024UL * 1024UL)
static size_t SIZE = 32 * MiB;

static uint64_t pattern(uint64_t seed, size_t word) {
    /* Compressible but position-dependent: a wrong page shows. */
    return (seed << 40) ^ (word * 0x9E3779B1ULL) ^ ((word / 512) << 20);
}

static void fill(void *p, size_t bytes, uint64_t seed, size_t first_word) {
    uint64_t *w = p;
    for (size_t i = 0; i < bytes / 8; i++) w[i] = pattern(seed, first_word + i);
}

static int check(const char *what, const void *p, size_t bytes, uint64_t seed, size_t first_word) {
    const uint64_t *w = p;
    for (size_t i = 0; i < bytes / 8; i++) {
        if (w[i] != pattern(seed, first_word + i)) {
            printf("MISMATCH %s at byte %zu: %#llx != %#llx\n", what, i * 8,
                   (unsigned long long)w[i], (unsigned long long)pattern(seed, first_word + i));
            return 1;
        }
    }
    return 0;
}

static int check_zero(const char *what, const void *p, size_t bytes) {
    const unsigned char *b = p;
    for (size_t i = 0; i < bytes; i++)
        if (b[i]) { printf("MISMATCH %s: byte %zu is %d, not 0\n", what, i, b[i]); return 1; }
    return 0;
}

static void *map(size_t n) {
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(2); }
    return p;
}

/* Pages of [p, p+n) not resident now (evicted by zpage). */
static size_t absent_pages(void *p, size_t n) {
    size_t pages = n / 4096, absent = 0;
    unsigned char *v = malloc(pages);
    if (mincore(p, n, v) != 0) { perror("mincore"); exit(2); }
    for (size_t i = 0; i < pages; i++) absent += !(v[i] & 1);
    free(v);
    return absent;
}

/* The first absent page of [p, p+n), or NULL. */
static unsigned char *an_absent_page(unsigned char *p, size_t n) {
    size_t pages = n / 4096;
    unsigned char *v = malloc(pages), *found = NULL;
    if (mincore(p, n, v) != 0) { perror("mincore"); exit(2); }
    for (size_t i = 0; i < pages && !found; i++) if (!(v[i] & 1)) found = p + i * 4096;
    free(v);
    return found;
}

static int mode_mremap(void) {
    int bad = 0;
    /* glibc realloc of a large chunk (mremap inside glibc; realloc here). */
    size_t n = 8 * MiB;
    unsigned char *p = malloc(n);
    fill(p, n, 1, 0);
    for (int step = 0; step < 3; step++) {
        size_t m = n * 2;
        p = realloc(p, m);
        if (!p) { puts("realloc failed"); return 1; }
        bad |= check("realloc kept", p, n, 1, 0);
        fill(p + n, m - n, 1, n / 8);
        n = m;
    }
    bad |= check("realloc grown", p, n, 1, 0);
    p = realloc(p, 4 * MiB);
    bad |= check("realloc shrunk", p, 4 * MiB, 1, 0);
    free(p);
    /* mremap of a whole mapping, growing and moving. */
    unsigned char *m = map(SIZE);
    fill(m, SIZE, 2, 0);
    printf("absent before mremap: %zu pages\n", absent_pages(m, SIZE));
    unsigned char *g = mremap(m, SIZE, 2 * SIZE, MREMAP_MAYMOVE);
    if (g == MAP_FAILED) { perror("mremap"); return 1; }
    bad |= check("mremap kept", g, SIZE, 2, 0);
    bad |= check_zero("mremap new tail", g + SIZE, SIZE);
    /* mremap of part of a mapping (shrinking in place): made plain first. */
    unsigned char *s = mremap(g, 2 * SIZE, SIZE / 2, 0);
    if (s == MAP_FAILED) { perror("mremap shrink"); return 1; }
    bad |= check("mremap shrunk", s, SIZE / 2, 2, 0);
    munmap(s, SIZE / 2);
    return bad;
}

static int mode_fixed(void) {
    int bad = 0;
    unsigned char *m = map(SIZE);
    fill(m, SIZE, 3, 0);
    size_t off = 8 * MiB, len = 2 * MiB;
    void *f = mmap(m + off, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (f != m + off) { perror("mmap fixed"); return 1; }
    bad |= check("before the fixed mapping", m, off, 3, 0);
    bad |= check_zero("the fixed mapping", m + off, len);
    bad |= check("after the fixed mapping", m + off + len, SIZE - off - len, 3, (off + len) / 8);
    /* A PROT_NONE reservation committed in parts (V8, the JVM). */
    unsigned char *r = mmap(NULL, SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED || mprotect(r, SIZE / 2, PROT_READ | PROT_WRITE)) { perror("reserve"); return 1; }
    fill(r, SIZE / 2, 4, 0);
    bad |= check("committed reservation", r, SIZE / 2, 4, 0);
    munmap(r, SIZE);
    munmap(m, SIZE);
    return bad;
}

static int mode_mprotect(void) {
    int bad = 0;
    unsigned char *m = map(SIZE);
    fill(m, SIZE, 5, 0);
    if (mprotect(m + MiB, 4 * MiB, PROT_READ)) { perror("mprotect"); return 1; }
    bad |= check("whole after mprotect", m, SIZE, 5, 0);
    if (mprotect(m + MiB, 4 * MiB, PROT_READ | PROT_WRITE)) { perror("mprotect"); return 1; }
    fill(m, SIZE, 6, 0);
    bad |= check("rewritten after mprotect", m, SIZE, 6, 0);
    munmap(m, SIZE);
    /* A guard page at the end of an allocation, then free(): the allocation
     * became plain memory, and free() must still know it. */
    unsigned char *g = aligned_alloc(4096, SIZE);
    fill(g, SIZE, 15, 0);
    if (mprotect(g + SIZE - 4096, 4096, PROT_NONE)) { perror("mprotect guard"); return 1; }
    bad |= check("allocation with a guard page", g, SIZE - 4096, 15, 0);
    if (mprotect(g + SIZE - 4096, 4096, PROT_READ | PROT_WRITE)) { perror("mprotect guard"); return 1; }
    free(g);
    return bad;
}

static int mode_munmap(void) {
    int bad = 0;
    unsigned char *m = map(SIZE);
    fill(m, SIZE, 7, 0);
    size_t off = 4 * MiB, len = 4 * MiB;
    if (munmap(m + off, len)) { perror("munmap part"); return 1; }
    bad |= check("head after partial munmap", m, off, 7, 0);
    bad |= check("tail after partial munmap", m + off + len, SIZE - off - len, 7, (off + len) / 8);
    munmap(m, off);
    munmap(m + off + len, SIZE - off - len);
    return bad;
}

static int mode_dontneed(void) {
    int bad = 0;
    unsigned char *m = map(SIZE);
    fill(m, SIZE, 8, 0);
    if (madvise(m, 2 * MiB, MADV_DONTNEED)) { perror("madvise"); return 1; }
    bad |= check_zero("after MADV_DONTNEED", m, 2 * MiB);
    bad |= check("rest after MADV_DONTNEED", m + 2 * MiB, SIZE - 2 * MiB, 8, 2 * MiB / 8);
    munmap(m, SIZE);
    return bad;
}

/* MADV_FREE: under zpage it discards at once, like MADV_DONTNEED (a valid
   MADV_FREE: the kernel may drop the contents whenever it likes); what is
   written after it stays. */
static int mode_free(void) {
    int bad = 0;
    unsigned char *m = map(SIZE);
    fill(m, SIZE, 9, 0);
    /* Mapped again (the fill evicted them), so the advice finds them there. */
    bad |= check("before MADV_FREE", m, 2 * MiB, 9, 0);
    if (madvise(m, 2 * MiB, MADV_FREE)) { perror("madvise"); return 1; }
    bad |= check_zero("after MADV_FREE", m, 2 * MiB);
    fill(m + MiB, MiB, 10, 0);
    bad |= check("written after MADV_FREE", m + MiB, MiB, 10, 0);
    bad |= check("rest after MADV_FREE", m + 2 * MiB, SIZE - 2 * MiB, 9, 2 * MiB / 8);
    munmap(m, SIZE);
    return bad;
}

static int mode_fork(void) {
    int bad = 0;
    unsigned char *m = map(SIZE);
    unsigned char *a = malloc(SIZE);
    fill(m, SIZE, 9, 0);
    fill(a, SIZE, 10, 0);
    printf("absent before fork: %zu pages\n", absent_pages(m, SIZE) + absent_pages(a, SIZE));
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        int cbad = check("child mapping", m, SIZE, 9, 0) | check("child malloc", a, SIZE, 10, 0);
        fill(m, SIZE, 11, 0); /* the child's writes stay in the child */
        cbad |= check("child rewrite", m, SIZE, 11, 0);
        unsigned char *b = realloc(a, 2 * SIZE);
        cbad |= check("child realloc", b, SIZE, 10, 0);
        free(b);
        munmap(m + MiB, MiB);
        _exit(cbad);
    }
    int status;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) { printf("child failed: %#x\n", status); bad = 1; }
    bad |= check("parent mapping after fork", m, SIZE, 9, 0);
    bad |= check("parent malloc after fork", a, SIZE, 10, 0);
    fill(m, SIZE, 12, 0);
    bad |= check("parent rewrite after fork", m, SIZE, 12, 0);
    /* fork + exec */
    child = fork();
    if (child == 0) { execl("/bin/sh", "sh", "-c", "exit 7", (char *)NULL); _exit(99); }
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 7) { printf("exec child: %#x\n", status); bad = 1; }
    bad |= check("parent after fork+exec", m, SIZE, 12, 0);
    free(a);
    munmap(m, SIZE);
    return bad;
}

/* A vfork() child runs in its parent's memory until exec: reading evicted
 * region pages there (as a spawn library's child code reads its argument
 * arrays) must restore them, not kill the process. */
/* The vfork()s live in functions of their own: nothing of the caller's
 * frame is live across them. */
static __attribute__((noinline)) int vfork_read(const uint64_t *w) {
    pid_t child = vfork();
    if (child == 0) {
        for (size_t i = 0; i < SIZE / 8; i += 512) if (w[i] != pattern(16, i)) _exit(1);
        _exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    return status;
}

static int mode_vfork(void) {
    int bad = 0, status;
    unsigned char *m = map(SIZE);
    fill(m, SIZE, 16, 0);
    printf("absent before vfork: %zu pages\n", absent_pages(m, SIZE));
    fflush(stdout);
    status = vfork_read((const uint64_t *)m);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) { printf("vfork child: %#x\n", status); bad = 1; }
    bad |= check("parent after vfork", m, SIZE, 16, 0);
    /* poll(2) with its pollfd array in an evicted page. */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) { perror("socketpair"); return 1; }
    if (write(sv[0], "x", 1) != 1) { perror("write"); return 1; }
    struct pollfd *pfd = (struct pollfd *)(m + SIZE / 2 + 40960);
    pfd->fd = sv[1]; pfd->events = POLLIN; pfd->revents = 0;
    fill(m, SIZE / 2, 18, 0);
    int n = poll(pfd, 1, 1000);
    if (n != 1 || !(pfd->revents & POLLIN)) { printf("poll from an evicted page: %d %s\n", n, strerror(errno)); bad = 1; }
    munmap(m, SIZE);
    return bad;
}

/* As a spawn library's child does (Python's subprocess with close_fds=True):
 * a vfork() child that closes every descriptor above 2, the userfaultfd
 * included, then reads evicted pages and execs with its path, argv and envp
 * in evicted pages. The parent's zpage threads restore them. */
#define SPAWN_VARS 64
#define SPAWN_VAR_BYTES 3000
static __attribute__((noinline)) int vfork_closed_exec(char *path, char **argv, char **envp,
                                                       const uint64_t *w) {
    pid_t child = vfork();
    if (child == 0) {
        syscall(SYS_close_range, 3U, ~0U, 0U);
        for (size_t i = 0; i < SIZE / 8; i += 512) if (w[i] != pattern(16, i)) _exit(3);
        execve(path, argv, envp);
        _exit(4);
    }
    int status;
    waitpid(child, &status, 0);
    return status;
}

static int mode_vfork_closed(void) {
    int bad = 0;
    unsigned char *m = map(SIZE);
    fill(m, SIZE, 16, 0);
    /* The exec's strings and arrays, in a second mapping, each variable
     * a page apart, the last one checked by the new program. */
    unsigned char *s = map(SPAWN_VARS * 4096 + 64 * 1024);
    char **envp = (char **)s, **argv = (char **)(s + 4096 * SPAWN_VARS + 32 * 1024);
    char *strings = (char *)s + 4096;
    for (int i = 0; i < SPAWN_VARS - 1; i++) {
        char *v = strings + (size_t)i * 4096;
        int n = sprintf(v, "ZPAGE_SPAWN_%d=", i);
        memset(v + n, 'a' + i % 26, SPAWN_VAR_BYTES - n - 1);
        v[SPAWN_VAR_BYTES - 1] = 0;
        envp[i] = v;
    }
    envp[SPAWN_VARS - 1] = NULL;
    char *path = (char *)(s + 4096 * SPAWN_VARS + 48 * 1024);
    strcpy(path, "/bin/sh");
    char *script = path + 64;
    sprintf(script, "echo \"exec saw ${#ZPAGE_SPAWN_%d} bytes\"", SPAWN_VARS - 2);
    argv[0] = path; argv[1] = "-c"; argv[2] = script; argv[3] = NULL;
    fill(m, SIZE, 16, 0); /* evicts the strings again */
    printf("absent before vfork: %zu pages of data, %zu of the exec's strings\n",
           absent_pages(m, SIZE), absent_pages(s, SPAWN_VARS * 4096 + 64 * 1024));
    fflush(stdout);
    int status = vfork_closed_exec(path, argv, envp, (const uint64_t *)m);
    if (!WIFEXITED(status) || WEXITSTATUS(status)) { printf("vfork child: %#x\n", status); bad = 1; }
    bad |= check("parent after vfork", m, SIZE, 16, 0);
    munmap(m, SIZE);
    munmap(s, SPAWN_VARS * 4096 + 64 * 1024);
    return bad;
}

static void *thread_returns(void *arg) { return arg; }

/* A locale loaded from files (C.UTF-8) lives in memory the C library
 * allocates; a new thread reads it (__ctype_init) before it unblocks
 * signals. Threads are started with everything else pushed out. */
static int mode_locale_threads(void) {
    if (!setlocale(LC_ALL, "C.UTF-8")) { printf("setlocale C.UTF-8 failed\n"); return 1; }
    unsigned char *m = map(SIZE);
    for (int round = 0; round < 8; round++) {
        fill(m, SIZE, 40 + round, 0);
        pthread_t t;
        if (pthread_create(&t, NULL, thread_returns, NULL)) { printf("pthread_create failed\n"); return 1; }
        pthread_join(t, NULL);
    }
    int bad = check("after the threads", m, SIZE, 40 + 7, 0);
    munmap(m, SIZE);
    return bad;
}

static int write_all(int fd, const unsigned char *p, size_t n, size_t chunk) {
    while (n) {
        ssize_t w = write(fd, p, n < chunk ? n : chunk);
        if (w <= 0) { printf("write: %s\n", strerror(errno)); return 1; }
        p += w; n -= w;
    }
    return 0;
}

static int read_all(int fd, unsigned char *p, size_t n, size_t chunk) {
    while (n) {
        ssize_t r = read(fd, p, n < chunk ? n : chunk);
        if (r <= 0) { printf("read: %s\n", r ? strerror(errno) : "end of file"); return 1; }
        p += r; n -= r;
    }
    return 0;
}

static uint32_t *futex_word;
static void *futex_waker(void *arg) {
    (void)arg;
    usleep(20000);
    __atomic_store_n(futex_word, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, futex_word, FUTEX_WAKE, 1, NULL, NULL, 0);
    return NULL;
}

static int mode_io(void) {
    int bad = 0;
    unsigned char *src = map(SIZE), *dst = map(SIZE);
    fill(src, SIZE, 13, 0);
    /* write(2) from and read(2) into evicted pages, through a file. */
    char path[] = "/tmp/zpage-io-XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    printf("absent before write: %zu pages\n", absent_pages(src, SIZE));
    bad |= write_all(fd, src, SIZE, 256 * 1024);
    lseek(fd, 0, SEEK_SET);
    fill(dst, SIZE, 99, 0); /* evict dst's pages holding other data */
    bad |= read_all(fd, dst, SIZE, 256 * 1024);
    bad |= check("read back", dst, SIZE, 13, 0);
    /* pread/pwrite, readv/writev. */
    fill(dst, SIZE, 98, 0);
    if (pread(fd, dst + MiB, MiB, MiB) != (ssize_t)MiB) { puts("pread"); bad = 1; }
    bad |= check("pread", dst + MiB, MiB, 13, MiB / 8);
    struct iovec iov[4];
    for (int i = 0; i < 4; i++) { iov[i].iov_base = dst + (size_t)i * 8 * MiB; iov[i].iov_len = 64 * 1024; }
    lseek(fd, 0, SEEK_SET);
    if (readv(fd, iov, 4) != 4 * 64 * 1024) { puts("readv"); bad = 1; }
    for (int i = 0; i < 4; i++) bad |= check("readv", iov[i].iov_base, 64 * 1024, 13, (size_t)i * 64 * 1024 / 8);
    /* Datagrams into evicted pages: a lost datagram shows as a wrong one. */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv)) { perror("socketpair"); return 1; }
    for (int i = 0; i < 64; i++) {
        size_t off = (size_t)i * 512 * 1024; /* 64 KiB datagrams spread over the region */
        if (send(sv[0], src + off, 4096, 0) != 4096) { printf("send %d: %s\n", i, strerror(errno)); bad = 1; break; }
        fill(dst, SIZE, 97, 0); /* and evict the receive buffer again */
        if (recv(sv[1], dst + off, 4096, 0) != 4096) { printf("recv %d: %s\n", i, strerror(errno)); bad = 1; break; }
        bad |= check("datagram", dst + off, 4096, 13, off / 8);
    }
    /* recvmsg into an iovec in an evicted page; sendmsg from one. */
    struct iovec one = {src + 20 * MiB, 4096};
    struct msghdr msg = {0};
    msg.msg_iov = &one; msg.msg_iovlen = 1;
    if (sendmsg(sv[0], &msg, 0) != 4096) { puts("sendmsg"); bad = 1; }
    fill(dst, SIZE, 96, 0);
    struct iovec into = {dst + 20 * MiB, 4096};
    msg.msg_iov = &into;
    if (recvmsg(sv[1], &msg, 0) != 4096) { puts("recvmsg"); bad = 1; }
    bad |= check("recvmsg", dst + 20 * MiB, 4096, 13, 20 * MiB / 8);
    /* futex(2) on a lock word in an evicted page. */
    futex_word = (uint32_t *)(src + 4096);
    *futex_word = 0;
    fill(dst, SIZE, 95, 0);
    printf("futex word resident before wait: %s\n", an_absent_page(src + 4096, 4096) ? "no" : "yes");
    pthread_t t;
    pthread_create(&t, NULL, futex_waker, NULL);
    while (__atomic_load_n(futex_word, __ATOMIC_SEQ_CST) == 0) {
        long r = syscall(SYS_futex, futex_word, FUTEX_WAIT, 0, NULL, NULL, 0);
        if (r == -1 && errno != EAGAIN && errno != EINTR) { printf("futex wait: %s\n", strerror(errno)); bad = 1; break; }
    }
    pthread_join(t, NULL);
    close(fd);
    munmap(src, SIZE);
    munmap(dst, SIZE);
    return bad;
}

/* A raw system call zpage does not wrap, on an evicted page: it must fail
 * (never return wrong data) and zpage must name it. */
static int mode_raw(void) {
    unsigned char *m = map(SIZE);
    fill(m, SIZE, 14, 0);
    unsigned char *page = an_absent_page(m, SIZE);
    if (!page) { puts("no evicted page to test on"); return 1; }
    int fd = open("/dev/zero", O_RDONLY);
    long r = syscall(SYS_read, fd, page, 4096);
    int e = errno;
    printf("raw read: %ld errno %d\n", r, r < 0 ? e : 0);
    /* Whatever happened, the page's bytes are the pattern or zeros from
     * /dev/zero, never anything else. */
    size_t off = (size_t)(page - m);
    int pattern_ok = check("page after raw read", page, 4096, 14, off / 8) == 0;
    int zero_ok = pattern_ok ? 0 : check_zero("page after raw read", page, 4096) == 0;
    munmap(m, SIZE);
    return !(r == -1 && e == EFAULT && pattern_ok) && !(r == 4096 && zero_ok);
}

/* Threads and handlers that block every signal (jemalloc's background
 * threads, handlers installed with a full sa_mask) read evicted pages. The
 * kernel kills a thread that faults with SIGBUS blocked, so zpage must keep
 * SIGBUS deliverable whatever mask the program asks for. */
static unsigned char *masked_data;
static volatile int masked_bad;
static void *masked_reader(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, NULL);
    masked_bad |= check("thread with every signal blocked", masked_data, SIZE, 15, 0);
    return NULL;
}
static void masked_handler(int sig) {
    (void)sig;
    /* Not async-signal-safe printf on a mismatch, but the test ends then. */
    masked_bad |= check("handler with a full sa_mask", masked_data, SIZE, 15, 0);
}
static int mode_masked(void) {
    masked_data = map(SIZE);
    fill(masked_data, SIZE, 15, 0);
    if (absent_pages(masked_data, SIZE) == 0) { puts("nothing evicted"); return 1; }
    /* A thread created while every signal is blocked, as jemalloc makes its
     * background threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    pthread_create(&t, NULL, masked_reader, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_join(t, NULL);
    /* The main thread with sigprocmask(SIG_BLOCK, everything). */
    sigprocmask(SIG_BLOCK, &all, &old);
    sigset_t now;
    sigprocmask(SIG_SETMASK, NULL, &now);
    printf("SIGBUS blocked after blocking everything: %s\n", sigismember(&now, SIGBUS) ? "yes" : "no");
    masked_bad |= check("main thread with every signal blocked", masked_data, SIZE, 15, 0);
    sigprocmask(SIG_SETMASK, &old, NULL);
    /* A handler whose sa_mask blocks everything. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = masked_handler;
    sigfillset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    munmap(masked_data, SIZE);
    return masked_bad;
}

/* The program's own SIGBUS handlers, set before zpage made any region (the
 * budget and zpage's handler start with the first region) and after: a
 * genuine SIGBUS (a file mapping past the file's end) reaches the handler
 * the program set last, while faults on evicted pages stay zpage's. */
static sigjmp_buf bus_jump;
static volatile int bus_seen_by;
static void bus_handler_a(int sig) { (void)sig; bus_seen_by = 'A'; siglongjmp(bus_jump, 1); }
static void bus_handler_b(int sig) { (void)sig; bus_seen_by = 'B'; siglongjmp(bus_jump, 1); }
/* Touches a page past the end of a one-page file; returns who handled it. */
static int genuine_sigbus(void) {
    char path[] = "/tmp/zpage-hazards-bus-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || ftruncate(fd, 4096) != 0) { perror("file"); exit(2); }
    unlink(path);
    volatile unsigned char *m = mmap(NULL, 2 * 4096, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) { perror("mmap file"); exit(2); }
    bus_seen_by = 0;
    if (sigsetjmp(bus_jump, 1) == 0) (void)m[4096];
    munmap((void *)m, 2 * 4096);
    close(fd);
    return bus_seen_by;
}
static int set_bus_handler(void (*h)(int), struct sigaction *old) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    return sigaction(SIGBUS, &sa, old);
}
static int mode_sigbus_handlers(void) {
    int bad = 0;
    set_bus_handler(bus_handler_a, NULL);
    int who = genuine_sigbus();
    if (who != 'A') { printf("before any region: SIGBUS went to %d, not A\n", who); bad = 1; }
    unsigned char *data = map(SIZE);
    fill(data, SIZE, 16, 0);
    if (absent_pages(data, SIZE) == 0) { puts("nothing evicted"); return 1; }
    bad |= check("region with the program's handler set first", data, SIZE, 16, 0);
    who = genuine_sigbus();
    if (who != 'A') { printf("after the first region: SIGBUS went to %d, not A\n", who); bad = 1; }
    struct sigaction old;
    set_bus_handler(bus_handler_b, &old);
    if (old.sa_handler != bus_handler_a) { puts("sigaction did not give back handler A"); bad = 1; }
    who = genuine_sigbus();
    if (who != 'B') { printf("after setting B: SIGBUS went to %d, not B\n", who); bad = 1; }
    bad |= check("region after the program set handler B", data, SIZE, 16, 0);
    munmap(data, SIZE);
    return bad;
}

/* 1 if the mapping holding p is a file's (an inode in /proc/self/maps). */
static int file_backed(const void *p) {
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps) { perror("maps"); exit(2); }
    char line[512];
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, maps)) {
        unsigned long lo, hi, inode;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %lu", &lo, &hi, &inode) == 3 &&
            (uintptr_t)p >= lo && (uintptr_t)p < hi)
            found = inode != 0;
    }
    fclose(maps);
    if (found < 0) { printf("no mapping at %p\n", p); exit(2); }
    return found;
}

/* A private, writable file mapping with MAP_FIXED over a reservation (the
 * JVM's class-data archive): arena memory holding the file's bytes, evicted
 * and restored like the rest; writes never reach the file. Read-only
 * mappings and mappings past the file's end stay the kernel's. */
static int mode_file_private(void) {
    int bad = 0;
    char path[] = "/tmp/zpage-hazards-file-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) { perror("mkstemp"); return 1; }
    unlink(path);
    size_t flen = SIZE / 4 + 100; /* a partial last page */
    size_t words = (flen + 7) / 8;
    unsigned char *src = malloc(words * 8);
    fill(src, words * 8, 7, 0);
    if (write(fd, src, flen) != (ssize_t)flen) { perror("write"); return 1; }
    unsigned char *r = mmap(NULL, SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) { perror("reserve"); return 1; }
    /* From the file's second page to its end, as the JVM maps its archive. */
    size_t mlen = (flen - 4096 + 4095) & ~4095UL;
    unsigned char *f = mmap(r + MiB, mlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 4096);
    if (f != r + MiB) { perror("mmap file fixed"); return 1; }
    if (memcmp(f, src + 4096, flen - 4096)) { puts("MISMATCH file mapping after mmap"); bad = 1; }
    bad |= check_zero("past the file's end in its last page", f + flen - 4096, mlen - (flen - 4096));
    if (file_backed(f)) { puts("MISMATCH the writable private file mapping is the kernel's, not the arena's"); bad = 1; }
    unsigned char *m = map(SIZE);
    fill(m, SIZE, 8, 0);
    size_t absent = absent_pages(f, mlen);
    printf("file mapping pages absent after the fill: %zu of %zu\n", absent, mlen / 4096);
    if (!absent) { puts("MISMATCH no page of the file mapping was evicted"); bad = 1; }
    if (memcmp(f, src + 4096, flen - 4096)) { puts("MISMATCH file mapping after eviction"); bad = 1; }
    memset(f, 0xAB, 4096);
    unsigned char page[4096];
    if (pread(fd, page, 4096, 4096) != 4096 || memcmp(page, src + 4096, 4096)) {
        puts("MISMATCH a write to the private mapping reached the file"); bad = 1;
    }
    bad |= check("the rest of the heap", m, SIZE, 8, 0);
    /* Read-only: the kernel's clean file pages. */
    unsigned char *ro = mmap(r + 16 * MiB, 4096, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (ro != r + 16 * MiB) { perror("mmap read-only fixed"); return 1; }
    if (!file_backed(ro) || memcmp(ro, src, 4096)) { puts("MISMATCH read-only file mapping"); bad = 1; }
    /* Past the file's end: the kernel's, which faults there. */
    size_t past_len = ((flen + 4095) & ~4095UL) + 4096;
    unsigned char *past = mmap(r + 20 * MiB, past_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (past != r + 20 * MiB) { perror("mmap past the end fixed"); return 1; }
    if (!file_backed(past) || memcmp(past, src, flen)) { puts("MISMATCH file mapping past the end"); bad = 1; }
    munmap(r, SIZE);
    munmap(m, SIZE);
    free(src);
    close(fd);
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: hazards MODE [SIZE_MIB]\n"); return 2; }
    if (argc > 2) SIZE = strtoul(argv[2], NULL, 10) * MiB;
    const char *mode = argv[1];
    int bad;
    if (!strcmp(mode, "mremap")) bad = mode_mremap();
    else if (!strcmp(mode, "fixed")) bad = mode_fixed();
    else if (!strcmp(mode, "file_private")) bad = mode_file_private();
    else if (!strcmp(mode, "mprotect")) bad = mode_mprotect();
    else if (!strcmp(mode, "munmap")) bad = mode_munmap();
    else if (!strcmp(mode, "dontneed")) bad = mode_dontneed();
    else if (!strcmp(mode, "free")) bad = mode_free();
    else if (!strcmp(mode, "fork")) bad = mode_fork();
    else if (!strcmp(mode, "io")) bad = mode_io();
    else if (!strcmp(mode, "vfork")) bad = mode_vfork();
    else if (!strcmp(mode, "vfork_closed")) bad = mode_vfork_closed();
    else if (!strcmp(mode, "locale_threads")) bad = mode_locale_threads();
    else if (!strcmp(mode, "raw")) bad = mode_raw();
    else if (!strcmp(mode, "masked")) bad = mode_masked();
    else if (!strcmp(mode, "sigbus_handlers")) bad = mode_sigbus_handlers();
    else { fprintf(stderr, "unknown mode %s\n", mode); return 2; }
    printf("%s %s\n", bad ? "FAILED" : "ok", mode);
    return bad;
}
