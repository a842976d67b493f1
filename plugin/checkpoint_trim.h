/* checkpoint_trim.h - a checkpoint's replay storage holds only its used rows.
 *
 * The rule (fhd__ck_used_rows, the one place it is decided): the frame-once replay has used
 * frame rows [0, min(F, M)) (F frames added) and slots [0, min(T, N)) (T transitions added);
 * the row replay has slots [0, size) while it has not wrapped (size < N, pos = size), else all
 * N. The rest of the storage of a learner with that history is the fill value
 * (fhd__ck_fill_byte: zero, FHD_FRAME_NONE for frame_refs), so the file need not hold it: the
 * writer shortens dimension 0 of those tensors to the used rows, the reader accepts a tensor
 * of either the used or the whole length (files written before this rule hold the whole
 * storage), refuses any other length as damage, and writes the fill value into the rest.
 */
#ifndef FHD_CHECKPOINT_TRIM_H
#define FHD_CHECKPOINT_TRIM_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint_state.h"
#include "learner.h"

/* Used rows of each fhd__ck_rows group (FHD_CK_ROWS_ALL unused). */
typedef struct fhd__ck_used {
    uint64_t rows[3];
} fhd__ck_used;

/* The rule above for `cfg`: replay size and position, and for the frame-once replay the
 * frame counters fc (frames added, transitions added, first live; NULL otherwise). */
void fhd__ck_used_rows(const fhd__config *cfg, uint64_t replay_pos, uint64_t replay_size,
                       const uint64_t *fc, fhd__ck_used *out);

/* The used rows of learner L, whose scalars are sc (reads the frame counters from the
 * backend). FHD_OK or the backend's status. */
int32_t fhd__ck_used_of(fhd_learner *L, const fhd__ck_scalars *sc, fhd__ck_used *out);

/* Shorten every shortenable tensor of catalogue c to its group's used rows and reassign the
 * data_offsets contiguously in the catalogue's order (data order, as built). */
void fhd__ck_catalog_trim(fhd__ck_catalog *c, const fhd__ck_used *u);

/* Reader: set dimension 0 of tensor t to `rows` (count, bytes follow). 0 when t may be
 * shortened and rows <= its whole length, else -1 (t unchanged). */
int fhd__ck_tensor_set_rows(fhd__ck_tensor *t, uint64_t rows);

/* Reader, after the data was read (t->data of the replay group, the scalars sc): every
 * shortened tensor holds exactly its group's used rows. FHD_OK or FHD_ERR_CHECKPOINT_CORRUPT
 * with a message naming the tensor, its length and the counters. */
int32_t fhd__ck_trim_check(const fhd__ck_catalog *c, const fhd__config *cfg,
                           const fhd__ck_scalars *sc, char *msg, size_t cap);

/* The byte every element of the rest of tensor t's storage holds. */
int fhd__ck_fill_byte(const fhd__ck_tensor *t);

/* Element count of tensor t at its whole length. */
uint64_t fhd__ck_full_count(const fhd__ck_tensor *t);

/* Elements [e0, e1) of t's backend state set to the fill value, in chunks from buf
 * (FHD_CKPT_CHUNK_BYTES of scratch). FHD_OK or the backend's status. */
int32_t fhd__ck_fill_range(fhd_learner *L, const fhd__ck_tensor *t, uint64_t e0, uint64_t e1,
                           unsigned char *buf);

/* End of the elements of shortened tensor t (t->count loaded) that a learner whose used rows
 * are `mine` may hold other than the fill value: its rows beyond both lengths already hold it
 * (the rule above), so a load fills [t->count, end) only, not the whole storage. */
uint64_t fhd__ck_rest_end(const fhd__ck_tensor *t, const fhd__ck_used *mine);

/* Reader: tensor t's data (t->data, t->count elements) grown to the whole length with the
 * fill value, for a state whose write must be one call (the priorities: each write rebuilds
 * the sum tree). 0, or -1 when out of memory (t unchanged). */
int fhd__ck_tensor_expand(fhd__ck_tensor *t);

#endif
