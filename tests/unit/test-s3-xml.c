/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-s3-xml.c -- common/store/s3_xml.h: the S3 answers wsync reads parse to
 * the right fields (a ListObjectsV2 page as AWS, s3rver and Swift write
 * it, an <Error>, an upload id), and hostile documents -- a DOCTYPE, text
 * past the limit, the wrong document, a truncated page without a token,
 * junk -- are refused with a reason instead of being half-understood.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "s3_xml.h"
#include "tap.h"

static const char list_page[] =
	"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
	"<Name>bucket</Name><Prefix>runs/</Prefix><KeyCount>2</KeyCount>"
	"<MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>"
	"<Contents><Key>runs/a &amp; b.delta</Key>"
	"<LastModified>2026-12-02T10:00:01.000Z</LastModified>"
	"<ETag>&quot;0123abcd&quot;</ETag><Size>5368709121</Size>"
	"<StorageClass>STANDARD</StorageClass></Contents>"
	"<Contents><Key>runs/HEAD</Key><LastModified>2026-12-02T10:00:02Z</LastModified>"
	"<ETag>\"ff\"</ETag><Size>0</Size></Contents>"
	"<CommonPrefixes><Prefix>runs/v/</Prefix></CommonPrefixes>"
	"<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
	"</ListBucketResult>";

static void test_list_page(void)
{
	struct wsync_s3_list_page pg = { 0 };
	struct wsync_error err = { 0 };

	CHECK(wsync_s3_parse_list(list_page, strlen(list_page), &pg, &err) == 0);
	CHECK_EQ_U64(pg.n_entries, 2);
	if (pg.n_entries == 2) {
		CHECK_STR(pg.entries[0].key, "runs/a & b.delta");
		CHECK_EQ_U64(pg.entries[0].size, 5368709121ull);
		CHECK_STR(pg.entries[0].etag, "\"0123abcd\"");
		CHECK_EQ_U64(pg.entries[0].mtime, 1796205601);
		CHECK_STR(pg.entries[1].key, "runs/HEAD");
		CHECK_EQ_U64(pg.entries[1].size, 0);
		CHECK_EQ_U64(pg.entries[1].mtime, 1796205602);
	}
	CHECK_EQ_U64(pg.n_prefixes, 1);
	if (pg.n_prefixes == 1)
		CHECK_STR(pg.prefixes[0], "runs/v/");
	CHECK(pg.truncated);
	CHECK_STR(pg.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
	wsync_s3_list_page_free(&pg);
}

static void test_list_empty(void)
{
	static const char doc[] = "<ListBucketResult><Name>b</Name><KeyCount>0</KeyCount>"
				  "<IsTruncated>false</IsTruncated></ListBucketResult>";
	struct wsync_s3_list_page pg = { 0 };

	CHECK(wsync_s3_parse_list(doc, strlen(doc), &pg, NULL) == 0);
	CHECK_EQ_U64(pg.n_entries, 0);
	CHECK(!pg.truncated);
	wsync_s3_list_page_free(&pg);
}

static void check_bad_list(const char *doc, const char *why)
{
	struct wsync_s3_list_page pg = { 0 };
	struct wsync_error err = { 0 };
	int r = wsync_s3_parse_list(doc, strlen(doc), &pg, &err);

	CHECK(r == -EPROTO);
	CHECK_CONTAINS(wsync_error_str(&err), why);
	wsync_s3_list_page_free(&pg);
}

static void test_list_hostile(void)
{
	char *big = malloc(10000);

	check_bad_list("<Error><Code>AccessDenied</Code></Error>", "not a ListBucketResult");
	check_bad_list("<ListBucketResult><Contents><Key>a</Key>", "malformed XML");
	check_bad_list("not xml at all", "malformed XML");
	check_bad_list("<!DOCTYPE lolz [<!ENTITY lol \"lol\">]><ListBucketResult>&lol;"
		       "</ListBucketResult>", "DOCTYPE");
	check_bad_list("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
		       "continuation token");
	check_bad_list("<ListBucketResult><Contents><Key>a</Key><Size>12x</Size></Contents>"
		       "</ListBucketResult>", "bad Size");
	if (big) {
		strcpy(big, "<ListBucketResult><Contents><Key>");
		size_t l = strlen(big);

		memset(big + l, 'k', 5000);
		strcpy(big + l + 5000, "</Key></Contents></ListBucketResult>");
		check_bad_list(big, "longer than");
		free(big);
	}
}

/* Size is decimal digits up to 2^63-1: a negative one does not wrap
 * through strtoull into a huge size, nor does anything else pass. */
static void test_list_sizes(void)
{
	static const char *const bad[] = {
		"-1", "-18446744073709551615", "+5", " 5", "5 ", "0x10", "1e3", "",
		"9223372036854775808", "18446744073709551615", "99999999999999999999",
		"00000000000000000001",
	};
	char doc[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(doc, sizeof(doc), "<ListBucketResult><Contents><Key>a</Key><Size>%s"
			 "</Size></Contents></ListBucketResult>", bad[i]);
		check_bad_list(doc, "bad Size");
	}
	struct wsync_s3_list_page pg = { 0 };

	snprintf(doc, sizeof(doc), "<ListBucketResult><Contents><Key>a</Key><Size>%s"
		 "</Size></Contents></ListBucketResult>", "9223372036854775807");
	CHECK(wsync_s3_parse_list(doc, strlen(doc), &pg, NULL) == 0);
	CHECK(pg.n_entries == 1 && pg.entries[0].size == (uint64_t)INT64_MAX);
	wsync_s3_list_page_free(&pg);
}

static void test_error_doc(void)
{
	static const char doc[] = "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code>"
				  "<Message>The request signature we calculated does not match"
				  "</Message><RequestId>4442587FB7D0A2F9</RequestId></Error>";
	char code[32], msg[24];

	CHECK(wsync_s3_parse_error(doc, strlen(doc), code, sizeof(code), msg, sizeof(msg)));
	CHECK_STR(code, "SignatureDoesNotMatch");
	CHECK_STR(msg, "The request signature w");	/* cut to fit, still a string */
	CHECK(!wsync_s3_parse_error(list_page, strlen(list_page), code, sizeof(code), msg,
				    sizeof(msg)));
	CHECK_STR(code, "");
	CHECK(!wsync_s3_parse_error("", 0, code, sizeof(code), msg, sizeof(msg)));
	CHECK(!wsync_s3_parse_error("<html>502 Bad Gateway", 21, code, sizeof(code), msg,
				    sizeof(msg)));
}

static void test_upload_id(void)
{
	static const char doc[] = "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>"
				  "<UploadId>VXBsb2FkIElE</UploadId></InitiateMultipartUploadResult>";
	struct wsync_error err = { 0 };
	char *id = NULL;

	CHECK(wsync_s3_parse_upload_id(doc, strlen(doc), &id, &err) == 0);
	CHECK_STR(id, "VXBsb2FkIElE");
	free(id);
	id = NULL;
	CHECK(wsync_s3_parse_upload_id("<Error/>", 8, &id, &err) == -EPROTO);
	CHECK(id == NULL);
	CHECK_CONTAINS(wsync_error_str(&err), "UploadId");
}

static void test_time_and_escape(void)
{
	struct wsync_buf b = { 0 };

	CHECK_EQ_U64(wsync_s3_parse_time("1970-01-01T00:00:00Z"), 0);
	CHECK_EQ_U64(wsync_s3_parse_time("2026-12-02T10:00:01.123456Z"), 1796205601);
	CHECK(wsync_s3_parse_time("2026-12-02 10:00:01") == -1);
	CHECK(wsync_s3_parse_time("2026-12-02T10:00:01+02:00") == -1);
	CHECK(wsync_s3_xml_escape(&b, "\"e&t<a>g'") == 0);
	CHECK(wsync_buf_put_u8(&b, 0) == 0);
	CHECK_STR((char *)b.data, "&quot;e&amp;t&lt;a&gt;g&apos;");
	wsync_buf_free(&b);
}

int main(void)
{
	TEST(test_list_page);
	TEST(test_list_empty);
	TEST(test_list_hostile);
	TEST(test_list_sizes);
	TEST(test_error_doc);
	TEST(test_upload_id);
	TEST(test_time_and_escape);
	return tap_done();
}
