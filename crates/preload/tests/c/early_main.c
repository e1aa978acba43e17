/* Checks the memory early_lib.c's constructor filled: how much of it is
 * resident (mincore) and whether every byte is still its pattern. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

unsigned char *early_memory(void);
unsigned early_bytes(void);

int main(void) {
    unsigned char *p = early_memory();
    unsigned n = early_bytes();
    if (p == NULL) {
        fprintf(stderr, "the constructor's mmap failed\n");
        return 2;
    }
    unsigned pages = n / 4096, resident = 0;
    unsigned char *vec = malloc(pages);
    if (vec == NULL || mincore(p, n, vec) != 0) {
        perror("mincore");
        return 2;
    }
    for (unsigned i = 0; i < pages; i++)
        resident += vec[i] & 1;
    for (unsigned i = 0; i < n; i++) {
        if (p[i] != (unsigned char)(i * 7 + i / 4096)) {
            fprintf(stderr, "byte %u differs\n", i);
            return 1;
        }
    }
    printf("resident %u of %u pages\n", resident, pages);
    return 0;
}
