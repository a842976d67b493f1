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
 * exactly the keys dtype/shape/data_offsets, the expected dtype and shape, data_offsets whose
 * length is the tensor's size, contiguous from 0, without overlap, ending at data_bytes; and a
 * well-formed "checksum.<name>" for each tensor and no other checksum key. Fills begin/end/crc
 * of each catalogue tensor and sorts the catalogue by begin. Returns FHD_OK or
 * FHD_ERR_CHECKPOINT_CORRUPT with a message. */
int32_t fhd__ck_header_match(const json_t *root, const json_t *meta, fhd__ck_catalog *c,
                             uint64_t data_bytes, char *msg, size_t cap);

/* "0123456789abcdef" -> value; 0 on success, -1 unless exactly 16 lowercase hex digits. */
int fhd__ck_parse_hex64(const char *s, uint64_t *out);

#endif
