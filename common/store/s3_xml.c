/* SPDX-License-Identifier: Apache-2.0 */
/*
 * s3_xml.c -- S3 response documents through expat (s3_xml.h).
 *
 * One generic walker: it tracks the path of open elements ("A/B/C", at
 * most MAX_DEPTH deep, deeper ones ignored), gathers the text of each
 * element (at most TEXT_MAX bytes: longer is an error, not a truncation),
 * and hands (path, text) to a per-document handler when the element ends.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <expat.h>

#include "buf.h"
#include "s3_xml.h"

#define MAX_DEPTH 6
#define NAME_MAX_ 64
#define TEXT_MAX 4096

struct walker {
	XML_Parser parser;
	char path[MAX_DEPTH * (NAME_MAX_ + 1) + 1];
	size_t path_len[MAX_DEPTH + 1];	/* path length at each depth */
	unsigned depth;			/* open elements, even those not tracked */
	char text[TEXT_MAX + 1];
	size_t text_len;
	bool text_overflow;
	int (*leaf)(struct walker *w, const char *path, const char *text);
	void *ctx;
	int err;
	struct wsync_error *error;
};

static void XMLCALL on_start(void *ud, const XML_Char *name, const XML_Char **attrs)
{
	struct walker *w = ud;
	size_t n = strlen(name), at;

	(void)attrs;
	w->depth++;
	w->text_len = 0;
	w->text_overflow = false;
	if (w->depth > MAX_DEPTH)
		return;
	at = w->path_len[w->depth - 1];
	if (n > NAME_MAX_)
		n = NAME_MAX_;
	if (w->depth > 1)
		w->path[at++] = '/';
	memcpy(w->path + at, name, n);
	at += n;
	w->path[at] = '\0';
	w->path_len[w->depth] = at;
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len)
{
	struct walker *w = ud;

	if (w->text_len + (size_t)len > TEXT_MAX) {
		w->text_overflow = true;
		return;
	}
	memcpy(w->text + w->text_len, s, (size_t)len);
	w->text_len += (size_t)len;
}

static void XMLCALL on_end(void *ud, const XML_Char *name)
{
	struct walker *w = ud;

	(void)name;
	if (w->depth <= MAX_DEPTH && w->err == 0) {
		if (w->text_overflow) {
			w->err = wsync_error_set(w->error, -EPROTO,
						 "XML element %s longer than %d bytes",
						 w->path, TEXT_MAX);
		} else {
			w->text[w->text_len] = '\0';
			w->err = w->leaf(w, w->path, w->text);
		}
		if (w->err)
			XML_StopParser(w->parser, XML_FALSE);
	}
	w->text_len = 0;
	w->text_overflow = false;
	if (w->depth <= MAX_DEPTH)
		w->path[w->path_len[w->depth - 1]] = '\0';
	w->depth--;
}

/* DOCTYPE declarations are refused: no entity expansion games. */
static void XMLCALL on_doctype(void *ud, const XML_Char *name, const XML_Char *sysid,
			       const XML_Char *pubid, int has_internal)
{
	struct walker *w = ud;

	(void)name, (void)sysid, (void)pubid, (void)has_internal;
	w->err = wsync_error_set(w->error, -EPROTO, "XML with a DOCTYPE refused");
	XML_StopParser(w->parser, XML_FALSE);
}

static int walk(const void *xml, size_t len, int (*leaf)(struct walker *, const char *,
							 const char *),
		void *ctx, struct wsync_error *err)
{
	struct walker *w;
	int r;

	if (len > INT32_MAX)
		return wsync_error_set(err, -EPROTO, "XML document too large");
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->parser = XML_ParserCreate("UTF-8");
	if (!w->parser) {
		free(w);
		return -ENOMEM;
	}
	w->leaf = leaf;
	w->ctx = ctx;
	w->error = err;
	XML_SetUserData(w->parser, w);
	XML_SetElementHandler(w->parser, on_start, on_end);
	XML_SetCharacterDataHandler(w->parser, on_text);
	XML_SetStartDoctypeDeclHandler(w->parser, on_doctype);
	if (XML_Parse(w->parser, xml, (int)len, XML_TRUE) == XML_STATUS_ERROR && !w->err)
		w->err = wsync_error_set(err, -EPROTO, "malformed XML at line %lu: %s",
					 (unsigned long)XML_GetCurrentLineNumber(w->parser),
					 XML_ErrorString(XML_GetErrorCode(w->parser)));
	r = w->err;
	XML_ParserFree(w->parser);
	free(w);
	return r;
}

int64_t wsync_s3_parse_time(const char *s)
{
	struct tm tm = { 0 };
	char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);

	if (!end)
		return -1;
	if (*end == '.')
		for (end++; *end >= '0' && *end <= '9'; end++)
			;
	if (strcmp(end, "Z") != 0 && strcmp(end, "+00:00") != 0)
		return -1;
	return (int64_t)timegm(&tm);
}

/* --- ListBucketResult ------------------------------------------------------ */

/* A Size: decimal digits only, at most 2^63-1 (BUCKET.md's sizes).  Not
 * strtoull, which takes "-1" and " +5" and wraps the first to 2^64-1. */
static int parse_size(const char *s, uint64_t *ret)
{
	uint64_t v = 0;
	size_t n = strlen(s);

	if (n == 0 || n > 19)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > (uint64_t)INT64_MAX)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return 0;
	if (n >= WSYNC_S3_LIST_PAGE_MAX)
		return -E2BIG;
	return wsync_grow(arr, cap, n, size, 64);
}

static int list_leaf(struct walker *w, const char *path, const char *text)
{
	struct wsync_s3_list_page *pg = w->ctx;
	struct wsync_store_entry *e = pg->n_entries ? &pg->entries[pg->n_entries - 1] : NULL;
	int r;

	if (strncmp(path, "ListBucketResult", 16) != 0)
		return wsync_error_set(w->error, -EPROTO, "not a ListBucketResult (<%s>)", path);
	path += 16;
	if (strcmp(path, "/Contents/Key") == 0) {
		r = grow((void **)&pg->entries, &pg->cap_entries, pg->n_entries,
			 sizeof(*pg->entries));
		if (r == -E2BIG)
			return wsync_error_set(w->error, -EPROTO, "more than %d keys in a page",
					       WSYNC_S3_LIST_PAGE_MAX);
		if (r < 0)
			return r;
		e = &pg->entries[pg->n_entries++];
		memset(e, 0, sizeof(*e));
		e->key = strdup(text);
		return e->key ? 0 : -ENOMEM;
	}
	if (strcmp(path, "/Contents/Size") == 0 || strcmp(path, "/Contents/ETag") == 0 ||
	    strcmp(path, "/Contents/LastModified") == 0) {
		/* Key comes first in every server's output; fields of an
		 * entry without one are dropped. */
		if (!e)
			return 0;
		if (path[10] == 'S') {
			if (parse_size(text, &e->size) < 0)
				return wsync_error_set(w->error, -EPROTO, "bad Size \"%.40s\"",
						       text);
		} else if (path[10] == 'E') {
			free(e->etag);
			e->etag = strdup(text);
			return e->etag ? 0 : -ENOMEM;
		} else {
			int64_t t = wsync_s3_parse_time(text);

			e->mtime = t < 0 ? 0 : t;
		}
		return 0;
	}
	if (strcmp(path, "/CommonPrefixes/Prefix") == 0) {
		r = grow((void **)&pg->prefixes, &pg->cap_prefixes, pg->n_prefixes,
			 sizeof(*pg->prefixes));
		if (r == -E2BIG)
			return wsync_error_set(w->error, -EPROTO, "more than %d prefixes",
					       WSYNC_S3_LIST_PAGE_MAX);
		if (r < 0)
			return r;
		pg->prefixes[pg->n_prefixes] = strdup(text);
		return pg->prefixes[pg->n_prefixes++] ? 0 : -ENOMEM;
	}
	if (strcmp(path, "/IsTruncated") == 0) {
		pg->truncated = strcmp(text, "true") == 0;
		return 0;
	}
	if (strcmp(path, "/NextContinuationToken") == 0) {
		free(pg->next_token);
		pg->next_token = strdup(text);
		return pg->next_token ? 0 : -ENOMEM;
	}
	return 0;
}

int wsync_s3_parse_list(const void *xml, size_t len, struct wsync_s3_list_page *page,
			struct wsync_error *err)
{
	int r = walk(xml, len, list_leaf, page, err);

	if (r == 0 && page->truncated && (!page->next_token || !*page->next_token))
		r = wsync_error_set(err, -EPROTO,
				    "truncated listing without a continuation token");
	return r;
}

void wsync_s3_list_page_free(struct wsync_s3_list_page *page)
{
	for (size_t i = 0; i < page->n_entries; i++) {
		free(page->entries[i].key);
		free(page->entries[i].etag);
	}
	for (size_t i = 0; i < page->n_prefixes; i++)
		free(page->prefixes[i]);
	free(page->entries);
	free(page->prefixes);
	free(page->next_token);
	memset(page, 0, sizeof(*page));
}

/* --- Error ------------------------------------------------------------------ */

struct error_ctx {
	char *code, *msg;
	size_t code_len, msg_len;
	bool seen;
};

static void copy_text(char *dst, size_t n, const char *src)
{
	if (n == 0)
		return;
	size_t l = strlen(src);

	if (l >= n)
		l = n - 1;
	memcpy(dst, src, l);
	dst[l] = '\0';
}

static int error_leaf(struct walker *w, const char *path, const char *text)
{
	struct error_ctx *c = w->ctx;

	if (strncmp(path, "Error", 5) != 0)
		return 0;
	c->seen = true;
	if (strcmp(path, "Error/Code") == 0)
		copy_text(c->code, c->code_len, text);
	else if (strcmp(path, "Error/Message") == 0)
		copy_text(c->msg, c->msg_len, text);
	return 0;
}

bool wsync_s3_parse_error(const void *xml, size_t len, char *code, size_t code_len,
			  char *msg, size_t msg_len)
{
	struct error_ctx c = { code, msg, code_len, msg_len, false };

	copy_text(code, code_len, "");
	copy_text(msg, msg_len, "");
	if (len == 0 || walk(xml, len, error_leaf, &c, NULL) < 0)
		return false;
	return c.seen;
}

/* --- InitiateMultipartUploadResult ------------------------------------------ */

static int upload_id_leaf(struct walker *w, const char *path, const char *text)
{
	char **id = w->ctx;

	if (strcmp(path, "InitiateMultipartUploadResult/UploadId") != 0)
		return 0;
	free(*id);
	*id = strdup(text);
	return *id ? 0 : -ENOMEM;
}

int wsync_s3_parse_upload_id(const void *xml, size_t len, char **upload_id,
			     struct wsync_error *err)
{
	char *id = NULL;
	int r = walk(xml, len, upload_id_leaf, &id, err);

	if (r == 0 && (!id || !*id))
		r = wsync_error_set(err, -EPROTO, "no UploadId in the answer");
	if (r < 0) {
		free(id);
		return r;
	}
	*upload_id = id;
	return 0;
}

int wsync_s3_xml_escape(struct wsync_buf *b, const char *s)
{
	for (; *s; s++) {
		const char *rep = NULL;
		int r;

		switch (*s) {
		case '&': rep = "&amp;"; break;
		case '<': rep = "&lt;"; break;
		case '>': rep = "&gt;"; break;
		case '"': rep = "&quot;"; break;
		case '\'': rep = "&apos;"; break;
		}
		r = rep ? wsync_buf_append(b, rep, strlen(rep)) : wsync_buf_put_u8(b, (uint8_t)*s);
		if (r < 0)
			return r;
	}
	return 0;
}
