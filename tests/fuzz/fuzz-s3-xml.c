/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz-s3-xml: the S3 answers wsync reads (common/store/s3_xml.h) on hostile
 * bytes -- a broken proxy or a compromised gateway can send anything as a
 * ListObjectsV2 page, an <Error> or the answer to a multipart start.
 * Nothing may crash, leak or read out of bounds, and what is accepted
 * keeps the header's promises:
 *  - a list page: at most WSYNC_S3_LIST_PAGE_MAX keys and prefixes, every
 *    key and prefix a string, every Size within 0..2^63-1, a truncated
 *    page has a non-empty continuation token;
 *  - an error: Code and Message NUL-terminated within their buffers;
 *  - an upload id: a non-empty string.
 * And escaping round-trips: printable text escaped by
 * wsync_s3_xml_escape() inside an UploadId parses back to itself.
 *
 * The first byte chooses the document ('L' list, 'E' error, 'U' upload
 * id, 'T' a timestamp, 'X' the escape round trip); anything else gives
 * the whole input to every parser.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "s3_xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void list(const uint8_t *d, size_t n)
{
	struct wsync_s3_list_page pg = { 0 };
	struct wsync_error err = { 0 };
	int r = wsync_s3_parse_list(d, n, &pg, &err);

	if (r == 0) {
		if (pg.n_entries > WSYNC_S3_LIST_PAGE_MAX || pg.n_prefixes > WSYNC_S3_LIST_PAGE_MAX)
			abort();
		for (size_t i = 0; i < pg.n_entries; i++) {
			if (!pg.entries[i].key || pg.entries[i].size > (uint64_t)INT64_MAX)
				abort();
			(void)strlen(pg.entries[i].key);
			if (pg.entries[i].etag)
				(void)strlen(pg.entries[i].etag);
		}
		for (size_t i = 0; i < pg.n_prefixes; i++)
			if (!pg.prefixes[i] || strlen(pg.prefixes[i]) > 4096)
				abort();
		if (pg.truncated && (!pg.next_token || !pg.next_token[0]))
			abort();
	} else if (r != -ENOMEM && !(r == -EPROTO && err.msg[0])) {
		abort();	/* a refusal is -EPROTO and says why */
	}
	wsync_s3_list_page_free(&pg);
}

static void error_doc(const uint8_t *d, size_t n)
{
	char code[64], msg[32];

	memset(code, 'x', sizeof(code));
	memset(msg, 'x', sizeof(msg));
	(void)wsync_s3_parse_error(d, n, code, sizeof(code), msg, sizeof(msg));
	if (!memchr(code, '\0', sizeof(code)) || !memchr(msg, '\0', sizeof(msg)))
		abort();
}

static void upload_id(const uint8_t *d, size_t n)
{
	struct wsync_error err = { 0 };
	char *id = NULL;

	if (wsync_s3_parse_upload_id(d, n, &id, &err) == 0) {
		if (!id || !id[0])
			abort();
		free(id);
	} else if (id) {
		abort();
	}
}

/* strndup without reading past n: the input is not NUL-terminated (and
 * ASan's strict_string_checks, which scripts/test.sh sets, holds strndup
 * to that). */
static char *dup_n(const void *p, size_t n)
{
	const char *z = memchr(p, '\0', n);
	size_t len = z ? (size_t)(z - (const char *)p) : n;
	char *s = malloc(len + 1);

	if (s) {
		memcpy(s, p, len);
		s[len] = '\0';
	}
	return s;
}

static void timestamp(const uint8_t *d, size_t n)
{
	char *s = dup_n((const char *)d, n);

	if (s) {
		(void)wsync_s3_parse_time(s);
		free(s);
	}
}

/* Printable ASCII escaped into an UploadId comes back as it was. */
static void escape_round_trip(const uint8_t *d, size_t n)
{
	struct wsync_buf b = { 0 };
	struct wsync_error err = { 0 };
	char *text = malloc(n + 1), *id = NULL;
	size_t k = 0;

	if (!text)
		return;
	for (size_t i = 0; i < n && k < 1000; i++)
		if (d[i] >= 0x20 && d[i] <= 0x7e)
			text[k++] = (char)d[i];
	text[k] = '\0';
	if (k == 0) {		/* an empty UploadId is refused, rightly */
		free(text);
		return;
	}
	if (wsync_buf_append(&b, "<InitiateMultipartUploadResult><UploadId>", 41) < 0 ||
	    wsync_s3_xml_escape(&b, text) < 0 ||
	    wsync_buf_append(&b, "</UploadId></InitiateMultipartUploadResult>", 43) < 0) {
		wsync_buf_free(&b);
		free(text);
		return;
	}
	if (wsync_s3_parse_upload_id(b.data, b.len, &id, &err) < 0)
		abort();		/* within TEXT_MAX: must parse */
	if (strcmp(id, text) != 0)
		abort();
	free(id);
	wsync_buf_free(&b);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *d = data + 1;
	size_t n = size ? size - 1 : 0;

	switch (size ? data[0] : 0) {
	case 'L':
		list(d, n);
		break;
	case 'E':
		error_doc(d, n);
		break;
	case 'U':
		upload_id(d, n);
		break;
	case 'T':
		timestamp(d, n);
		break;
	case 'X':
		escape_round_trip(d, n);
		break;
	default:
		list(data, size);
		error_doc(data, size);
		upload_id(data, size);
		break;
	}
	return 0;
}
