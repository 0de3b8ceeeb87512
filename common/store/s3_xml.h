/* SPDX-License-Identifier: Apache-2.0 */
/*
 * s3_xml.h -- the few S3 XML documents wsync reads: a ListObjectsV2 page,
 * an error, and the results of starting and completing a multipart
 * upload.  Parsed with expat; input is hostile (a proxy or a broken server
 * can send anything): bounded text per element, bounded entry counts, a
 * clear error for what is not the expected document.
 */
#ifndef WSYNC_S3_XML_H
#define WSYNC_S3_XML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "store.h"

/* Keys in one page beyond this: the page is refused (S3 sends ≤ 1000). */
#define WSYNC_S3_LIST_PAGE_MAX 100000

struct wsync_s3_list_page {
	struct wsync_store_entry *entries;	/* full keys (with the prefix) */
	size_t n_entries, cap_entries;
	char **prefixes;			/* CommonPrefixes, with the delimiter */
	size_t n_prefixes, cap_prefixes;
	bool truncated;
	char *next_token;			/* NextContinuationToken, or NULL */
};

/* Parse a ListBucketResult.  0, or -EPROTO (err says why) or -ENOMEM.
 * page must be zeroed; free it with wsync_s3_list_page_free() either way. */
int wsync_s3_parse_list(const void *xml, size_t len, struct wsync_s3_list_page *page,
			struct wsync_error *err);
void wsync_s3_list_page_free(struct wsync_s3_list_page *page);

/* If xml is an <Error> document, copy its Code and Message (truncated to
 * fit) and return true. */
bool wsync_s3_parse_error(const void *xml, size_t len, char *code, size_t code_len,
			  char *msg, size_t msg_len);

/* The UploadId of an InitiateMultipartUploadResult, malloc'd.  0, -EPROTO
 * or -ENOMEM. */
int wsync_s3_parse_upload_id(const void *xml, size_t len, char **upload_id,
			     struct wsync_error *err);

/* "2009-10-12T17:50:30.000Z" -> seconds since the epoch; -1 if malformed. */
int64_t wsync_s3_parse_time(const char *iso8601);

/* Append s to b with &, <, >, ", ' escaped (for request bodies). */
struct wsync_buf;
int wsync_s3_xml_escape(struct wsync_buf *b, const char *s);

#endif
