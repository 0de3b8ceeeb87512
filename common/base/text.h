/* SPDX-License-Identifier: Apache-2.0 */
/*
 * text.h -- the character-level checks the parsers share: UTF-8 sequences
 * (delta paths, manifest strings) and hex digits (hashes, URL escapes, the
 * command line).  Header-only: each is a few instructions in a loop.
 */
#ifndef WSYNC_TEXT_H
#define WSYNC_TEXT_H

#include <stddef.h>
#include <stdint.h>

/*
 * Length of the valid UTF-8 sequence at p (at most n >= 1 bytes) and its
 * code point in *cp, or 0 when it is not valid: overlong, a surrogate,
 * above U+10FFFF, a stray continuation byte, or cut short.
 */
static inline size_t wsync_utf8_next(const uint8_t *p, size_t n, uint32_t *cp)
{
	uint32_t c = p[0], min;
	size_t len;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if ((c & 0xE0) == 0xC0) {
		len = 2, c &= 0x1F, min = 0x80;
	} else if ((c & 0xF0) == 0xE0) {
		len = 3, c &= 0x0F, min = 0x800;
	} else if ((c & 0xF8) == 0xF0) {
		len = 4, c &= 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3F);
	}
	if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
		return 0;
	*cp = c;
	return len;
}

/* The value of hex digit c (either case), or -1. */
static inline int wsync_hex_digit(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

#endif
