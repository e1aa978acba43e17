/* What a fork() costs a program under zpage run: MIB MiB of compressible
 * malloc memory, FORKS fork()s, every page touched between forks. With
 * CHILD_READS set, each child reads and checks every page before it exits
 * (as a snapshotting child such as redis' BGSAVE does) and prints its own
 * peak resident memory; otherwise children _exit at once.
 *
 *   cc -O2 -o forkcost forkcost.c
 *   zpage run --budget 64M -- ./forkcost 256 5 1
 *
 * Prints the median fork() time in the parent, the parent's peak resident
 * memory (VmHWM) and each child's; exits non-zero if a child saw a wrong
 * byte. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long hwm_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 256;
    int forks = argc > 2 ? atoi(argv[2]) : 5;
    int child_reads = argc > 3 ? atoi(argv[3]) : 0;
    size_t pages = mib * 256, page = 4096;
    unsigned char *mem = malloc(pages * page);
    if (!mem)
        return 2;
    /* Text-like, compressible, different in every page. */
    for (size_t p = 0; p < pages; p++) {
        for (size_t i = 0; i < page; i++)
            mem[p * page + i] = "the quick brown fox jumps over the lazy dog "[(i + p) % 44];
        memcpy(mem + p * page, &p, sizeof p);
    }
    double times[64];
    int bad = 0;
    if (forks > 64)
        forks = 64;
    for (int k = 0; k < forks; k++) {
        for (size_t p = 0; p < pages; p++)
            mem[p * page + 100] ^= 0; /* read every page: restores it */
        double t0 = now_ms();
        pid_t pid = fork();
        if (pid == 0) {
            int wrong = 0;
            if (child_reads) {
                for (size_t p = 0; p < pages; p++) {
                    size_t tag;
                    memcpy(&tag, mem + p * page, sizeof tag);
                    if (tag != p || mem[p * page + 100] != "the quick brown fox jumps over the lazy dog "[(100 + p) % 44])
                        wrong++;
                }
                printf("child %d: peak resident %ld KiB, %d wrong pages\n", k, hwm_kib(), wrong);
                fflush(stdout);
            }
            _exit(wrong ? 1 : 0);
        }
        times[k] = now_ms() - t0;
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            bad++;
    }
    qsort(times, forks, sizeof times[0], cmp);
    printf("fork: median %.2f ms over %d; parent peak resident %ld KiB; %d bad children\n",
           forks ? times[forks / 2] : 0.0, forks, hwm_kib(), bad);
    return bad ? 1 : 0;
}
