/* cpu_memory.h - the CPU backend's memory need, stated when its allocation fails. */
#ifndef FHD_CPU_MEMORY_H
#define FHD_CPU_MEMORY_H

#include <stddef.h>

#include "config.h"
#include "layout.h"

/* "cpu backend: out of memory: the learner needs about <total>: <part>; ..." into msg: the
 * sum of every allocation of cpu_create, and its four parts (batch activations and scratch,
 * replay and sum tree, parameters/gradients/Adam, spectral norm) largest first, each with
 * the sizes that make it. */
void fhd__cpu_oom_message(const fhd__config *cfg, const fhd__layout *lo, char *msg, size_t cap);

#endif
