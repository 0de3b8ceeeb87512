/* SPDX-License-Identifier: Apache-2.0 */
/*
 * units.h -- parsing and printing of typed values with units, shared by the
 * config loader and the command-line tools.
 *
 * Sizes:     "4096", "64KiB", "64MiB", "1GiB", "2TiB" (binary, 1024^n) and
 *            "64kB", "64MB", "1GB", "2TB" (decimal, 1000^n); "B" is allowed;
 *            an optional single space between number and unit.
 * Durations: "500ms", "2s", "5min", "1h", "1d"; a bare number means seconds
 *            (as systemd does).  Stored in milliseconds.
 * Booleans:  yes/no, true/false, on/off, 1/0 (case-insensitive).
 *
 * All parsers accept only the whole string (no trailing garbage), reject
 * negative numbers and anything that overflows 64 bits, and return 0 or
 * -EINVAL / -ERANGE.
 */
#ifndef WSYNC_UNITS_H
#define WSYNC_UNITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int wsync_parse_uint(const char *s, uint64_t *ret);
int wsync_parse_size(const char *s, uint64_t *ret);
int wsync_parse_duration_ms(const char *s, uint64_t *ret);
int wsync_parse_bool(const char *s, bool *ret);

/* "1.5 GiB"-style rendering of a byte count into buf; returns buf. */
const char *wsync_format_bytes(char *buf, size_t len, uint64_t bytes);

/* The last second RFC 3339's four-digit years can name. */
#define WSYNC_TIME_MAX 253402300799LL	/* 9999-12-31T23:59:59Z */

/* t (Unix seconds, 0..WSYNC_TIME_MAX) as RFC 3339 UTC text,
 * "2026-12-04T20:41:48Z", into buf (21 bytes hold it): true, or false
 * (buf then "?", room permitting) when t is out of range or buf too
 * small. */
bool wsync_format_time(char *buf, size_t len, int64_t t);

#endif
