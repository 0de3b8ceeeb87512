/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-delta: the delta reader and the segment decoder on hostile bytes.
 * Nothing may crash, leak, read out of bounds or allocate without bound;
 * what the reader accepts must keep the promises apply relies on.
 *
 * The first bytes choose how the input is used, so that mutations reach
 * past the checksums (a random change to a checksummed payload is refused
 * long before the code behind it runs):
 *   "WSYNCDLT..."  a delta, read as it is (checksum refusals included);
 *   "wsyncdlt..."  a delta whose record checksums the harness recomputes
 *                  first (and the magic upper-cased), so mutated payloads
 *                  reach the FILE decoder and the segment parser;
 *   anything else  one SEGMENT payload, parsed and decoded on its own.
 * Segments are decoded against a small fixed base: base offsets beyond it
 * must be refused, not read.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "buf.h"
#include "delta.h"
#include "path.h"
#include "segment.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Decoding writes target_len bytes: keep executions fast and memory small. */
#define DECODE_MAX (1u << 20)
#define BASE_LEN 65536

static uint8_t base[BASE_LEN];

static void init_base(void)
{
	static int done;

	if (done)
		return;
	/* Plausible bf16 weights and some bytes that are not. */
	for (size_t i = 0; i < BASE_LEN; i += 2) {
		base[i] = (uint8_t)(i * 37);
		base[i + 1] = (uint8_t)(0x3c + (i >> 9) % 3);
	}
	done = 1;
}

static void decode_segment(const uint8_t *p, size_t len, int with_base)
{
	struct wsync_segment *s = NULL;
	struct wsync_error err;
	uint8_t *out;
	uint64_t pos;

	if (wsync_segment_parse(p, len, &s, &err) < 0) {
		if (s)
			abort();
		return;
	}
	/* Accepted: pieces tile the segment. */
	pos = s->target_offset;
	for (size_t i = 0; i < s->n_pieces; i++) {
		if (s->pieces[i].target_offset != pos)
			abort();
		pos += s->pieces[i].len;
	}
	if (pos != s->target_offset + s->target_len)
		abort();
	if (s->target_len <= DECODE_MAX) {
		out = malloc((size_t)s->target_len);
		if (!out)
			abort();
		(void)wsync_segment_decode(s, with_base ? base : NULL,
					   with_base ? BASE_LEN : 0, out, &err);
		free(out);
	}
	wsync_segment_free(s);
}

static void read_delta(const uint8_t *data, size_t size)
{
	struct wsync_delta_reader *r = NULL;
	struct wsync_error err;
	struct wsync_buf payload = { 0 };
	uint64_t write_bytes = 0;

	if (wsync_delta_reader_open_mem(data, size, &r, &err) < 0) {
		if (r)
			abort();
		return;
	}
	/* Accepted: paths ordered, segments tile each WRITE file, END agrees. */
	for (size_t i = 0; i < r->n_files; i++) {
		const struct wsync_delta_entry *e = &r->files[i];
		uint64_t pos = 0;

		if (i && strcmp(r->files[i - 1].file.path, e->file.path) >= 0)
			abort();
		if (wsync_path_check(e->file.path, strlen(e->file.path), &err) < 0)
			abort();
		if (e->file.op == WSYNC_DELTA_WRITE)
			write_bytes += e->file.target_size;
		for (uint64_t k = 0; k < e->file.n_segments; k++) {
			const struct wsync_delta_segment *sg = &e->segments[k];

			if (sg->target_offset != pos || sg->target_len == 0 ||
			    sg->target_len > WSYNC_DELTA_SEGMENT_TARGET_MAX ||
			    sg->payload_offset + sg->payload_len > r->size)
				abort();
			pos += sg->target_len;
			if (wsync_delta_reader_segment(r, sg, &payload, &err) < 0)
				abort(); /* verified once already: must read again */
			decode_segment(payload.data, payload.len,
				       e->file.flags & WSYNC_DELTA_FILE_HAS_BASE);
		}
		if (e->file.op == WSYNC_DELTA_WRITE && pos != e->file.target_size)
			abort();
	}
	if (write_bytes != r->write_bytes)
		abort();
	wsync_buf_free(&payload);
	wsync_delta_reader_free(r);
}

/* A copy of a "wsyncdlt" input with valid magic and record checksums. */
static void read_fixed_up(const uint8_t *data, size_t size)
{
	uint8_t *c = malloc(size ? size : 1);
	size_t pos = WSYNC_DELTA_PREAMBLE_LEN;

	if (!c)
		abort();
	memcpy(c, data, size);
	for (int i = 0; i < 8; i++)
		c[i] = (uint8_t)toupper(c[i]);
	while (size - pos >= WSYNC_DELTA_RECORD_HEADER_LEN) {
		uint64_t len = wsync_le64(c + pos + 8), sum;

		if (len > size - pos - WSYNC_DELTA_RECORD_HEADER_LEN)
			break;
		sum = XXH3_64bits(c + pos + WSYNC_DELTA_RECORD_HEADER_LEN, (size_t)len);
		for (int i = 0; i < 8; i++)
			c[pos + 16 + i] = (uint8_t)(sum >> (8 * i));
		pos += WSYNC_DELTA_RECORD_HEADER_LEN + (size_t)len;
	}
	read_delta(c, size);
	free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	init_base();
	if (size >= WSYNC_DELTA_PREAMBLE_LEN && memcmp(data, "wsyncdlt", 8) == 0)
		read_fixed_up(data, size);
	else if (size >= 8 && memcmp(data, WSYNC_DELTA_MAGIC, 8) == 0)
		read_delta(data, size);
	else
		decode_segment(data, size, 1);
	return 0;
}
