/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dtype.h -- the element types of the safetensors format.
 *
 * Every dtype the format defines, with its width in bits (the sub-byte
 * float formats F4 and F6_* pack elements, so sizes are computed in bits
 * and a tensor's bit count must be a whole number of bytes).
 */
#ifndef WSYNC_DTYPE_H
#define WSYNC_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum wsync_dtype {
	WSYNC_DTYPE_BOOL,
	WSYNC_DTYPE_F4,
	WSYNC_DTYPE_F6_E2M3,
	WSYNC_DTYPE_F6_E3M2,
	WSYNC_DTYPE_U8,
	WSYNC_DTYPE_I8,
	WSYNC_DTYPE_F8_E5M2,
	WSYNC_DTYPE_F8_E4M3,
	WSYNC_DTYPE_F8_E8M0,
	WSYNC_DTYPE_I16,
	WSYNC_DTYPE_U16,
	WSYNC_DTYPE_F16,
	WSYNC_DTYPE_BF16,
	WSYNC_DTYPE_I32,
	WSYNC_DTYPE_U32,
	WSYNC_DTYPE_F32,
	WSYNC_DTYPE_C64,
	WSYNC_DTYPE_F64,
	WSYNC_DTYPE_I64,
	WSYNC_DTYPE_U64,
	WSYNC_DTYPE_COUNT_
};

/* The format's spelling ("BF16", "F8_E4M3", ...); "?" for out of range. */
const char *wsync_dtype_name(enum wsync_dtype t);

/* Look up a name of len bytes (not NUL-terminated); 0 or -EINVAL. */
int wsync_dtype_from_name(const char *name, size_t len, enum wsync_dtype *ret);

/* Width of one element in bits (4, 6, 8, 16, 32 or 64). */
unsigned wsync_dtype_bits(enum wsync_dtype t);

/* True for the floating-point formats (F4 .. F64, C64 excluded). */
bool wsync_dtype_is_float(enum wsync_dtype t);

/*
 * Bytes taken by nelem elements of t: 0 and *ret set, or -EOVERFLOW if the
 * size does not fit 64 bits, or -EINVAL if it is not a whole number of
 * bytes (sub-byte dtypes).
 */
int wsync_dtype_size(enum wsync_dtype t, uint64_t nelem, uint64_t *ret);

#endif
