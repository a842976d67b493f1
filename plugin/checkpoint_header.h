/* checkpoint_header.h - the JSON header of a safetensors checkpoint: writing it, and checking
 * a file's header against the catalogue its config implies.
 *
 * File layout (safetensors): 8-byte little-endian N, N bytes of JSON header padded with spaces
 * (the writer pads so that 8 + N is a multiple of 8), then the data section, whose tensors are
 * contiguous, without gaps, in the order of their data_offsets (relative to the data section).
 * The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} and
 * "__metadata__" to a string->string map.
 *
 * Metadata checksum: "checksum.__metadata__" is the CRC-64/XZ of, for every metadata key that
 * does not start with "checksum." in bytewise-sorted order, the key's UTF-8 bytes, a NUL byte,
 * the value's bytes and a NUL byte. "checksum.<tensor>" is the CRC-64/XZ of the tensor's bytes.
 * Both are written as 16 lowercase hex digits.
 */
#ifndef FHD_CHECKPOINT_HEADER_H
#define FHD_CHECKPOINT_HEADER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoint_io.h"
#include "checkpoint_state.h"

#define FHD_CKPT_HEADER_MAX ((uint64_t)256 << 20) /* largest header a reader accepts */
#define FHD_CKPT_CHECKSUM_PREFIX "checksum."

/* CRC-64 of the metadata map (see above) into *out. Returns 0, or -1 when out of memory. */
int fhd__ck_metadata_crc(const fhd__crc64 *crc, const json_t *meta, uint64_t *out);

/* Header text for catalogue `c` (its data_offsets and crc fields) and `meta` (string values,
 * no checksum.* keys: those are added here). Keys are sorted, the JSON compact, and the text
 * padded with spaces so that 8 + *len is a multiple of 8. With placeholders, every tensor
 * checksum is "0000000000000000": the text has the same length as the final one. Returns a
 * malloc'd text (not NUL-terminated beyond *len) or NULL when out of memory. */
char *fhd__ck_header_write(const fhd__ck_catalog *c, const json_t *meta, const fhd__crc64 *crc,
                           int placeholders, size_t *len);

/* Parse header text: well-formed JSON (duplicate keys rejected), an object whose
 * "__metadata__" is a string->string map. On success *root owns the JSON and *meta borrows from
 * it. Returns FHD_OK or FHD_ERR_CHECKPOINT_CORRUPT with a message in msg. */
int32_t fhd__ck_header_parse(const char *text, size_t len, json_t **root, const json_t **meta,
                             char *msg, size_t cap);

/* Check every tensor entry of `root` against catalogue `c`: no unknown or missing tensor,
 * exactly the keys dtype/shape/data_offsets, the expected dtype and shape (replay storage:
 * dimension 0 at most the whole length, which sets the tensor's rows; checkpoint_trim.h),
 * data_offsets whose length is the tensor's size, contiguous from 0, without overlap, ending at data_bytes; and a
 * well-formed "checksum.<name>" for each tensor and no other checksum key. Fills begin/end/crc
 * of each catalogue tensor and sorts the catalogue by begin. Returns FHD_OK or
 * FHD_ERR_CHECKPOINT_CORRUPT with a message. */
int32_t fhd__ck_header_match(const json_t *root, const json_t *meta, fhd__ck_catalog *c,
                             uint64_t data_bytes, char *msg, size_t cap);

/* Bounds on the header of any checkpoint a learner can be asked to load, derived from the
 * learner's config with its architecture widened to the schema's largest (FHD_MAX_HIDDEN_LAYERS
 * layers, FHD_MAX_BRANCHES branches, dueling, spectral norm, prioritized replay), so that a
 * checkpoint of another architecture is still parsed and refused by name
 * (FHD_ERR_CHECKPOINT_MISMATCH "the checkpoint has hidden [...]"). Numbers take at most 20
 * digits, strings may be escaped (x2), another writer may add whitespace (x2) and metadata keys
 * of its own (slack). A header beyond these is refused before jansson builds anything: the
 * memory of a load stays bounded by the learner's size, not by the file. */
typedef struct fhd__ck_header_limits {
    uint64_t max_bytes;   /* header length */
    uint64_t max_tensors; /* members of the root object besides "__metadata__" */
    uint64_t max_members; /* members of an object inside the root (the metadata map) */
    uint64_t max_values;  /* JSON values in all (strings, numbers, containers, literals) */
    uint64_t max_string;  /* bytes of one JSON string (the recorded config is the longest) */
} fhd__ck_header_limits;

/* Limits for a learner of `cfg`. FHD_OK or FHD_ERR_OUT_OF_MEMORY. */
int32_t fhd__ck_header_limits_of(const fhd__config *cfg, const fhd__layout *lo,
                                 fhd__ck_header_limits *out);

/* Structure of header text before it is parsed: starts with '{', nests at most 3 levels (root
 * object, tensor entry or metadata map, shape/data_offsets arrays), at most max_tensors + 1
 * root members, max_members per inner object, 8 elements per array or innermost object,
 * max_values values in all, strings terminated and at most max_string bytes. One pass, no
 * allocation. Returns FHD_OK or FHD_ERR_CHECKPOINT_CORRUPT with a message naming the byte. */
int32_t fhd__ck_header_prescan(const char *text, size_t len, const fhd__ck_header_limits *lim,
                               char *msg, size_t cap);

/* "0123456789abcdef" -> value; 0 on success, -1 unless exactly 16 lowercase hex digits. */
int fhd__ck_parse_hex64(const char *s, uint64_t *out);

#endif
