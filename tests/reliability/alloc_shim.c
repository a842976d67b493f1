/* alloc_shim.c - the interposed allocator of alloc_shim.h. */
#define _GNU_SOURCE
#include "alloc_shim.h"

#include <errno.h>
#include <stddef.h>

#ifndef FHD_SHIM_UNDER_SANITIZER

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t align, size_t n);

static int64_t live;        /* atomic */
static uint64_t total;      /* atomic */
static uint64_t armed_seen; /* atomic: allocations counted while armed */
static uint64_t fail_at;    /* atomic: 0 = not armed */
static int failed;          /* atomic */
static const void *failed_caller; /* return address of the failed allocation's caller */

/* 1 if this allocation is the one to fail. */
static int should_fail(const void *caller) {
    if (__atomic_load_n(&fail_at, __ATOMIC_ACQUIRE) == 0)
        return 0;
    uint64_t n = __atomic_add_fetch(&armed_seen, 1, __ATOMIC_ACQ_REL);
    if (n == __atomic_load_n(&fail_at, __ATOMIC_ACQUIRE)) {
        failed_caller = caller;
        __atomic_store_n(&failed, 1, __ATOMIC_RELEASE);
        return 1;
    }
    return 0;
}

static void *counted(void *p) {
    if (p) {
        __atomic_add_fetch(&live, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&total, 1, __ATOMIC_RELAXED);
    }
    return p;
}

void *malloc(size_t n) {
    if (should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return counted(__libc_malloc(n));
}

void *calloc(size_t n, size_t size) {
    if (should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return counted(__libc_calloc(n, size));
}

void free(void *p) {
    if (!p)
        return;
    __atomic_sub_fetch(&live, 1, __ATOMIC_RELAXED);
    __libc_free(p);
}

void *realloc(void *p, size_t n) {
    if (!p)
        return malloc(n);
    if (n == 0) { /* glibc frees and returns NULL */
        free(p);
        return NULL;
    }
    if (should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL; /* p stays valid */
    }
    return __libc_realloc(p, n);
}

void *memalign(size_t align, size_t n) {
    if (should_fail(__builtin_return_address(0))) {
        errno = ENOMEM;
        return NULL;
    }
    return counted(__libc_memalign(align, n));
}

void *aligned_alloc(size_t align, size_t n) {
    return memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n) {
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    void *p = memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *valloc(size_t n) {
    return memalign(4096, n);
}

void *pvalloc(size_t n) {
    return memalign(4096, (n + 4095) & ~(size_t)4095);
}

int alloc_shim_available(void) {
    return 1;
}
int64_t alloc_shim_live(void) {
    return __atomic_load_n(&live, __ATOMIC_ACQUIRE);
}
uint64_t alloc_shim_total(void) {
    return __atomic_load_n(&total, __ATOMIC_ACQUIRE);
}
void alloc_shim_arm(uint64_t k) {
    __atomic_store_n(&armed_seen, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&failed, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&fail_at, k, __ATOMIC_RELEASE);
}
uint64_t alloc_shim_disarm(void) {
    __atomic_store_n(&fail_at, 0, __ATOMIC_RELEASE);
    return __atomic_load_n(&armed_seen, __ATOMIC_ACQUIRE);
}
int alloc_shim_failed(void) {
    return __atomic_load_n(&failed, __ATOMIC_ACQUIRE);
}

const void *alloc_shim_failed_caller(void) {
    return alloc_shim_failed() ? failed_caller : NULL;
}

#else /* under a sanitizer: no shim */

int alloc_shim_available(void) {
    return 0;
}
int64_t alloc_shim_live(void) {
    return 0;
}
uint64_t alloc_shim_total(void) {
    return 0;
}
void alloc_shim_arm(uint64_t k) {
    (void)k;
}
uint64_t alloc_shim_disarm(void) {
    return 0;
}
int alloc_shim_failed(void) {
    return 0;
}
const void *alloc_shim_failed_caller(void) {
    return NULL;
}

#endif
