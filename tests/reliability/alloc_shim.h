/* alloc_shim.h - an interposed allocator for fault injection and leak counting.
 *
 * alloc_shim.c defines malloc, calloc, realloc, free and the aligned variants in the test
 * executable. Symbols of the executable come first in the dynamic linker's lookup, so they
 * replace glibc's for the whole process: the dlopened library, jansson and OpenBLAS included.
 * Each forwards to glibc's own entry points (__libc_malloc...).
 *
 *   live:  allocations made minus allocations freed (a leak shows as a count that does not
 *          come back to its value before an operation);
 *   armed: every malloc/calloc/realloc/aligned allocation is counted and the k-th one fails
 *          (returns NULL with errno ENOMEM); the others succeed.
 *
 * Not available under AddressSanitizer or ThreadSanitizer (their runtimes own malloc): then
 * alloc_shim_available() is 0 and the tests that need the shim skip.
 */
#ifndef FHD_ALLOC_SHIM_H
#define FHD_ALLOC_SHIM_H

#include <stdint.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FHD_SHIM_UNDER_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FHD_SHIM_UNDER_SANITIZER 1
#endif

int alloc_shim_available(void);
int64_t alloc_shim_live(void);   /* live allocations */
uint64_t alloc_shim_total(void); /* allocations made since start */
/* Fail the k-th allocation from now on (k >= 1); reset the counters of the armed window. */
void alloc_shim_arm(uint64_t k);
/* Stop failing; returns the number of allocations seen while armed. */
uint64_t alloc_shim_disarm(void);
int alloc_shim_failed(void); /* 1 if the armed window's failure was injected */
/* Return address in the caller of the injected failure's allocation call, or NULL. */
const void *alloc_shim_failed_caller(void);

#endif
