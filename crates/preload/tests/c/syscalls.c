// System calls on evicted memory under the preload library: the C
// library's own calls (stdio flushing its buffers, accept and waitpid
// filling the caller's structures, getcwd, stat, ...) and the program's,
// each made on an object whose page was evicted just before the call (the
// page map says so, or the program exits 2: the test would prove nothing;
// the check is made when SYSCALLS_EVICT is set, as under zpage).
//
// Objects live in one large heap block (a region whatever the size
// threshold), or, with "small" as the third argument, each in a malloc of
// its own (regions when the allocator's extents are: jemalloc's).
//
// Usage: syscalls MODE DATA_MIB [small]; prints "ok MODE" on success.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

static size_t budget;
static unsigned char *pressure_buf;
static size_t pressure_len;
static unsigned char *heap;
static size_t heap_used;
static int small_objects;

#define FAIL(...)                                                              \
    do {                                                                       \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                         \
        fprintf(stderr, __VA_ARGS__);                                                 \
        fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno));                  \
        fflush(stderr);                                                      \
        exit(1);                                                               \
    } while (0)

static int resident(const void *p) {
    static int fd = -1;
    if (fd < 0)
        fd = open("/proc/self/pagemap", O_RDONLY);
    uint64_t e = 0;
    if (pread(fd, &e, 8, ((uintptr_t)p / 4096) * 8) != 8)
        FAIL("pagemap");
    return (int)(e >> 63);
}

// Writes every page of a buffer twice the budget: everything else that is
// not in use goes out.
static void pressure(void) {
    static unsigned round;
    round++;
    for (size_t i = 0; i < pressure_len; i += 4096)
        pressure_buf[i] = (unsigned char)(round + i / 4096);
}

static int must_evict;

// Evicts the page(s) of [p, p + len) (under zpage: SYSCALLS_EVICT=1).
static void evict(const void *p, size_t len) {
    if (!must_evict)
        return;
    for (int r = 0; r < 40; r++) {
        int any = 0;
        for (size_t o = 0; o < len; o += 4096)
            any |= resident((const char *)p + o);
        any |= resident((const char *)p + len - 1);
        if (!any)
            return;
        pressure();
    }
    fprintf(stderr, "could not evict %p\n", p);
    exit(2);
}

// An object of `len` bytes, filled with `fill`, on a page of its own.
static void *object(size_t len, int fill) {
    void *p;
    if (small_objects) {
        p = malloc(len);
        if (!p)
            FAIL("malloc");
    } else {
        heap_used = (heap_used + 4095) & ~(size_t)4095;
        p = heap + heap_used;
        heap_used += len;
    }
    memset(p, fill, len);
    return p;
}

static char *string_object(const char *s) {
    char *p = object(strlen(s) + 1, 0);
    strcpy(p, s);
    return p;
}

static void stdio_mode(const char *how, size_t mib) {
    size_t n = mib << 20;
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        s[i] = 'a' + (char)((i * 2654435761u >> 13) % 26);
    s[n] = 0;
    evict(s, n);
    int r;
    if (!strcmp(how, "fputs"))
        r = fputs(s, stdout);
    else if (!strcmp(how, "printf"))
        r = printf("%s", s);
    else if (!strcmp(how, "puts"))
        r = puts(s);
    else
        r = dprintf(1, "%s", s);
    if (r < 0 || fflush(stdout) != 0)
        exit(3);
    free(s);
}

// Streams with the C library's own buffers: `lines` lines to stdout and
// to a file, the file read back line by line; prints the lines' sum.
static void streams_mode(long lines) {
    char path[] = "/tmp/zpage-streams-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w+");
    if (!f)
        exit(3);
    unlink(path);
    for (long i = 0; i < lines; i++) {
        printf("line %ld of the stream test, %ld\n", i, i * 2654435761L % 1000003);
        fprintf(f, "%ld\n", i * 7);
    }
    if (fflush(stdout) != 0 || fflush(f) != 0 || fseek(f, 0, SEEK_SET) != 0)
        exit(3);
    char line[64];
    long sum = 0, read = 0;
    while (fgets(line, sizeof line, f)) {
        sum += atol(line);
        read++;
    }
    if (read != lines)
        exit(4);
    printf("sum %ld\n", sum);
    fclose(f);
}

// stdout fully buffered in an 8 MiB malloc'd buffer, 2,000,000 lines.
static void setvbuf_mode(void) {
    size_t len = 8 << 20;
    char *buf = malloc(len);
    if (setvbuf(stdout, buf, _IOFBF, len) != 0)
        FAIL("setvbuf");
    for (int i = 0; i < 2000000; i++) {
        if (printf("line %d of the buffered output\n", i) < 0)
            exit(3);
        if (i % 100000 == 99999)
            pressure();
    }
    if (fflush(stdout) != 0)
        exit(4);
}

static void accept_mode(void) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(l, (void *)&a, sizeof a) || listen(l, 4) || getsockname(l, (void *)&a, &al))
        FAIL("listen");
    pid_t c = fork();
    if (c == 0) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (void *)&a, sizeof a))
            _exit(10);
        if (write(s, "hello", 5) != 5)
            _exit(11);
        char b[8];
        _exit(read(s, b, 2) == 2 && !memcmp(b, "ok", 2) ? 0 : 12);
    }
    struct sockaddr_in *peer = object(sizeof *peer, 0x55);
    socklen_t *len = object(sizeof *len, 0);
    *len = sizeof *peer;
    evict(peer, sizeof *peer);
    evict(len, sizeof *len);
    int s = accept(l, (void *)peer, len);
    if (s < 0)
        FAIL("accept into an evicted sockaddr");
    if (peer->sin_family != AF_INET || *len != sizeof *peer)
        FAIL("accept filled family %d len %u", peer->sin_family, *len);
    char *b = object(16, 0);
    evict(b, 16);
    if (read(s, b, 5) != 5 || memcmp(b, "hello", 5))
        FAIL("read");
    if (write(s, "ok", 2) != 2)
        FAIL("write");
    int *status = object(sizeof *status, 0x77);
    evict(status, sizeof *status);
    if (waitpid(c, status, 0) != c)
        FAIL("waitpid into an evicted status");
    if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0)
        FAIL("client status %#x", *status);
    close(s);
    close(l);
}

static void waitpid_mode(void) {
    pid_t c = fork();
    if (c == 0)
        _exit(42);
    int *status = object(sizeof *status, 0x77);
    evict(status, sizeof *status);
    if (waitpid(c, status, 0) != c)
        FAIL("waitpid");
    if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 42)
        FAIL("status %#x", *status);
}

static void calls_mode(void) {
    // getcwd
    char want[4096];
    if (!getcwd(want, sizeof want))
        FAIL("getcwd (stack)");
    char *cwd = object(4096, 1);
    evict(cwd, 4096);
    if (!getcwd(cwd, 4096) || strcmp(cwd, want))
        FAIL("getcwd into an evicted buffer");
    // uname
    struct utsname *u = object(sizeof *u, 1);
    evict(u, sizeof *u);
    if (uname(u) || strcmp(u->sysname, "Linux"))
        FAIL("uname");
    // stat: path and buffer evicted
    char *path = string_object("/proc/self/exe");
    struct stat *st = object(sizeof *st, 1);
    evict(path, 16);
    evict(st, sizeof *st);
    if (stat(path, st) || st->st_size <= 0)
        FAIL("stat");
    // pipe and socketpair
    int *fds = object(2 * sizeof(int), 0xff);
    evict(fds, 2 * sizeof(int));
    if (pipe(fds) || fds[0] < 0 || fds[1] < 0)
        FAIL("pipe");
    int *sv = object(2 * sizeof(int), 0xff);
    evict(sv, 2 * sizeof(int));
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || sv[0] < 0)
        FAIL("socketpair");
    // preadv2 into evicted iovecs and buffers
    char *file = string_object("/proc/self/exe");
    int fd = open(file, O_RDONLY);
    if (fd < 0)
        FAIL("open");
    char head[64];
    if (pread(fd, head, sizeof head, 0) != sizeof head)
        FAIL("pread (stack)");
    struct iovec *iov = object(2 * sizeof *iov, 0);
    char *b1 = object(16, 0), *b2 = object(48, 0);
    iov[0].iov_base = b1;
    iov[0].iov_len = 16;
    iov[1].iov_base = b2;
    iov[1].iov_len = 48;
    evict(iov, 2 * sizeof *iov);
    evict(b1, 16);
    evict(b2, 48);
    if (preadv2(fd, iov, 2, 0, 0) != 64 || memcmp(b1, head, 16) || memcmp(b2, head + 16, 48))
        FAIL("preadv2");
    // poll on an evicted pollfd array
    struct pollfd *p = object(2 * sizeof *p, 0);
    p[0].fd = sv[0];
    p[0].events = POLLOUT;
    p[1].fd = fds[0];
    p[1].events = POLLIN;
    evict(p, 2 * sizeof *p);
    if (poll(p, 2, 1000) != 1 || !(p[0].revents & POLLOUT) || p[1].revents)
        FAIL("poll");
    // writev / readv with evicted arrays and buffers
    char *w1 = string_object("gathered "), *w2 = string_object("write");
    struct iovec *wv = object(2 * sizeof *wv, 0);
    wv[0].iov_base = w1;
    wv[0].iov_len = 9;
    wv[1].iov_base = w2;
    wv[1].iov_len = 5;
    evict(wv, 2 * sizeof *wv);
    evict(w1, 10);
    evict(w2, 6);
    if (writev(fds[1], wv, 2) != 14)
        FAIL("writev");
    char *r1 = object(9, 0), *r2 = object(5, 0);
    struct iovec *rv = object(2 * sizeof *rv, 0);
    rv[0].iov_base = r1;
    rv[0].iov_len = 9;
    rv[1].iov_base = r2;
    rv[1].iov_len = 5;
    evict(rv, 2 * sizeof *rv);
    evict(r1, 9);
    evict(r2, 5);
    if (readv(fds[0], rv, 2) != 14 || memcmp(r1, "gathered ", 9) || memcmp(r2, "write", 5))
        FAIL("readv");
    // sendmsg / recvmsg with a descriptor passed in the control data
    struct msghdr *m = object(sizeof *m, 0);
    struct iovec *mv = object(sizeof *mv, 0);
    char *payload = string_object("message");
    char *control = object(CMSG_SPACE(sizeof(int)), 0);
    mv->iov_base = payload;
    mv->iov_len = 7;
    m->msg_iov = mv;
    m->msg_iovlen = 1;
    m->msg_control = control;
    m->msg_controllen = CMSG_SPACE(sizeof(int));
    struct cmsghdr *cm = CMSG_FIRSTHDR(m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    evict(m, sizeof *m);
    evict(mv, sizeof *mv);
    evict(payload, 8);
    evict(control, CMSG_SPACE(sizeof(int)));
    if (sendmsg(sv[0], m, 0) != 7)
        FAIL("sendmsg");
    struct msghdr *rm = object(sizeof *rm, 0);
    struct iovec *rmv = object(sizeof *rmv, 0);
    char *rpayload = object(16, 0);
    char *rcontrol = object(CMSG_SPACE(sizeof(int)), 0);
    rmv->iov_base = rpayload;
    rmv->iov_len = 16;
    rm->msg_iov = rmv;
    rm->msg_iovlen = 1;
    rm->msg_control = rcontrol;
    rm->msg_controllen = CMSG_SPACE(sizeof(int));
    evict(rm, sizeof *rm);
    evict(rmv, sizeof *rmv);
    evict(rpayload, 16);
    evict(rcontrol, CMSG_SPACE(sizeof(int)));
    if (recvmsg(sv[1], rm, 0) != 7 || memcmp(rpayload, "message", 7))
        FAIL("recvmsg");
    struct cmsghdr *rc = CMSG_FIRSTHDR(rm);
    int passed;
    if (!rc || rc->cmsg_type != SCM_RIGHTS)
        FAIL("no descriptor passed");
    memcpy(&passed, CMSG_DATA(rc), sizeof passed);
    struct stat a, b;
    if (fstat(passed, &a) || fstat(fd, &b) || a.st_ino != b.st_ino)
        FAIL("the passed descriptor is not the file");
    // path arguments: mkdir, rename, unlink, rmdir
    char *dir = string_object("zpage-syscalls-test-dir");
    char *file1 = string_object("zpage-syscalls-test-dir/one");
    char *file2 = string_object("zpage-syscalls-test-dir/two");
    rmdir(dir);
    evict(dir, 32);
    if (mkdir(dir, 0700))
        FAIL("mkdir");
    evict(file1, 32);
    int f = open(file1, O_CREAT | O_WRONLY | O_EXCL, 0600);
    if (f < 0)
        FAIL("open(O_CREAT)");
    close(f);
    evict(file1, 32);
    evict(file2, 32);
    if (rename(file1, file2))
        FAIL("rename");
    evict(file2, 32);
    if (unlink(file2))
        FAIL("unlink");
    evict(dir, 32);
    if (rmdir(dir))
        FAIL("rmdir");
}

// Contended mutexes in evicted memory: the C library's own futex calls.
static pthread_mutex_t *locks;
static long *counters;
static long per_thread;

static void *hammer(void *arg) {
    long id = (long)arg;
    for (long i = 0; i < per_thread; i++) {
        int k = (int)((i + id) % 4);
        pthread_mutex_lock(&locks[k]);
        counters[k]++;
        pthread_mutex_unlock(&locks[k]);
        if (i % 200000 == 0 && id == 0)
            pressure();
    }
    return NULL;
}

static void futex_mode(long ops) {
    // Each lock and its counter on a page of its own.
    locks = object(4 * 4096, 0);
    counters = object(4 * sizeof(long), 0);
    for (int k = 0; k < 4; k++)
        pthread_mutex_init(&locks[k], NULL);
    evict(locks, 4 * sizeof *locks);
    per_thread = ops / 4;
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, hammer, (void *)i);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    long total = 0;
    for (int k = 0; k < 4; k++)
        total += counters[k];
    if (total != 4 * per_thread)
        FAIL("counted %ld of %ld", total, 4 * per_thread);
    fprintf(stderr, "lock operations %ld\n", total);
}

// A handler on a malloc'd alternate stack (a region) that uses 256 KiB of
// it, delivered while everything else is pushed out.
static volatile long handled;
static void on_usr1(int sig) {
    (void)sig;
    volatile unsigned char frame[256 * 1024];
    for (size_t i = 0; i < sizeof frame; i += 512)
        frame[i] = (unsigned char)(1 + i / 512);
    long sum = 0;
    for (size_t i = 0; i < sizeof frame; i += 512)
        sum += frame[i];
    if (sum != 0)
        handled++;
}

static void altstack_mode(void) {
    size_t len = 4 << 20;
    stack_t ss = {.ss_sp = malloc(len), .ss_size = len, .ss_flags = 0};
    if (!ss.ss_sp || sigaltstack(&ss, NULL))
        FAIL("sigaltstack");
    struct sigaction sa = {.sa_handler = on_usr1, .sa_flags = SA_ONSTACK};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL))
        FAIL("sigaction");
    for (int i = 0; i < 100; i++) {
        pressure();
        raise(SIGUSR1);
    }
    if (handled != 100)
        FAIL("handled %ld of 100", handled);
}

// A coroutine on an 8 MiB malloc'd stack that recurses through 1 MiB of it,
// switched to and from while everything else is pushed out.
static ucontext_t main_ctx, co_ctx;
static volatile long co_rounds;
static long depth(int n) {
    volatile char pad[4000];
    pad[0] = (char)n;
    pad[3999] = (char)n;
    return n == 0 ? pad[0] : depth(n - 1) + pad[3999];
}
static void coroutine(void) {
    for (;;) {
        depth(256);
        co_rounds++;
        swapcontext(&co_ctx, &main_ctx);
    }
}

static void coroutine_mode(void) {
    size_t len = 8 << 20;
    char *stack = malloc(len);
    if (getcontext(&co_ctx))
        FAIL("getcontext");
    co_ctx.uc_stack.ss_sp = stack;
    co_ctx.uc_stack.ss_size = len;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, coroutine, 0);
    for (int i = 0; i < 200; i++) {
        if (swapcontext(&main_ctx, &co_ctx))
            FAIL("swapcontext");
        pressure();
    }
    if (co_rounds != 200)
        FAIL("coroutine ran %ld rounds of 200", co_rounds);
}

// mlockall, then more memory than the budget written: it finishes, and the
// data written before is whole.
static void mlockall_mode(void) {
    size_t len = budget / 2;
    unsigned char *before = malloc(len);
    for (size_t i = 0; i < len; i++)
        before[i] = (unsigned char)(i * 7);
    if (mlockall(MCL_CURRENT | MCL_FUTURE))
        FAIL("mlockall");
    size_t big = 2 * budget;
    unsigned char *after = malloc(big);
    memset(after, 0x5a, big);
    for (size_t i = 0; i < len; i++)
        if (before[i] != (unsigned char)(i * 7))
            FAIL("byte %zu", i);
    if (!resident(before) || !resident(before + len - 1))
        FAIL("locked memory not resident");
    munlockall();
}

// mlock of part of a region keeps it resident while the rest goes out.
static void mlock_mode(void) {
    size_t len = 4 << 20;
    unsigned char *m = malloc(len);
    memset(m, 3, len);
    if (mlock(m, 1 << 20))
        FAIL("mlock");
    for (int i = 0; i < 3; i++)
        pressure();
    for (size_t o = 0; o < (1 << 20); o += 4096)
        if (!resident(m + o))
            FAIL("locked page %zu evicted", o / 4096);
    evict(m + (2 << 20), 4096);
    munlock(m, 1 << 20);
}

extern char **environ;

// Programs started from evicted strings: posix_spawnp with argv in the
// heap, system() and popen() of a command in the heap, fork+execve.
static void spawn_mode(void) {
    char **args = object(4 * sizeof(char *), 0);
    args[0] = string_object("sh");
    args[1] = string_object("-c");
    args[2] = string_object("exit 7");
    args[3] = NULL;
    evict(args, 4 * sizeof(char *));
    evict(args[2], 8);
    pid_t pid;
    int rc = posix_spawnp(&pid, args[0], NULL, NULL, args, environ);
    if (rc != 0)
        FAIL("posix_spawnp: %d", rc);
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 7)
        FAIL("posix_spawnp child status %#x", status);
    char *cmd = string_object("exit 9");
    evict(cmd, 8);
    status = system(cmd);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 9)
        FAIL("system status %#x", status);
    char *pcmd = string_object("echo popened");
    evict(pcmd, 16);
    FILE *p = popen(pcmd, "r");
    char line[64] = {0};
    if (!p || !fgets(line, sizeof line, p) || strcmp(line, "popened\n"))
        FAIL("popen read %s", line);
    if (pclose(p) != 0)
        FAIL("pclose");
    pid_t c = fork();
    if (c == 0) {
        evict(args, 4 * sizeof(char *));
        execvp(args[0], args);
        _exit(99);
    }
    if (waitpid(c, &status, 0) != c || !WIFEXITED(status) || WEXITSTATUS(status) != 7)
        FAIL("fork+execvp child status %#x", status);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: syscalls MODE DATA_MIB [small]\n");
        return 64;
    }
    const char *mode = argv[1];
    size_t mib = (size_t)atol(argv[2]);
    small_objects = argc > 3 && !strcmp(argv[3], "small");
    must_evict = getenv("SYSCALLS_EVICT") != NULL;
    const char *b = getenv("ZPAGE_RUN_BUDGET_BYTES");
    budget = b ? (size_t)atol(b) : (32 << 20);
    pressure_len = 2 * budget + (8 << 20);
    pressure_buf = malloc(pressure_len);
    heap = malloc(16 << 20);
    pressure();
    if (!strncmp(mode, "stdio-", 6))
        stdio_mode(mode + 6, mib);
    else if (!strcmp(mode, "setvbuf"))
        setvbuf_mode();
    else if (!strcmp(mode, "streams"))
        streams_mode((long)mib * 100000);
    else if (!strcmp(mode, "accept"))
        accept_mode();
    else if (!strcmp(mode, "waitpid"))
        waitpid_mode();
    else if (!strcmp(mode, "calls"))
        calls_mode();
    else if (!strcmp(mode, "futex"))
        futex_mode((long)mib * 1000000);
    else if (!strcmp(mode, "altstack"))
        altstack_mode();
    else if (!strcmp(mode, "coroutine"))
        coroutine_mode();
    else if (!strcmp(mode, "mlockall"))
        mlockall_mode();
    else if (!strcmp(mode, "mlock"))
        mlock_mode();
    else if (!strcmp(mode, "spawn"))
        spawn_mode();
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 64;
    }
    fprintf(stderr, "ok %s\n", mode);
    return 0;
}
