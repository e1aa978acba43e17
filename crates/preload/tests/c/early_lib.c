/* A shared library whose constructor maps and fills memory, as an
 * allocator's does (jemalloc's, linked by Redis): the loader runs it before
 * the constructor of a library preloaded ahead of it. */
#include <string.h>
#include <sys/mman.h>

#define EARLY_BYTES (16u << 20)

static unsigned char *early;

__attribute__((constructor)) static void map_early(void) {
    early = mmap(NULL, EARLY_BYTES, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (early == MAP_FAILED) {
        early = NULL;
        return;
    }
    for (unsigned i = 0; i < EARLY_BYTES; i++)
        early[i] = (unsigned char)(i * 7 + i / 4096);
}

unsigned char *early_memory(void) { return early; }
unsigned early_bytes(void) { return EARLY_BYTES; }
