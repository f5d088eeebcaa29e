/* Tests of the atomic writer, of the files zerosim creates (never through a
 * symlink), and of the safetensors reader and writer, sharded too. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "zerosim/error.h"
#include "zerosim/file.h"
#include "zerosim/io.h"
#include "zerosim/report.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/zs_check_io.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", dir, name);
}

/* Files in dir other than "." and ".." */
static int count_files(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ls -A %s | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    ck_assert_int_eq(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    ck_assert_int_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

START_TEST(test_afile_commit_and_abort)
{
    char p[128];
    path_of(p, sizeof p, "a.bin");
    zs_afile a;
    ck_assert_int_eq(zs_afile_open(&a, p), 0);
    ck_assert_int_eq(zs_afile_write(&a, "hello ", 6), 0);
    /* nothing under the name until the commit */
    ck_assert_int_ne(access(p, F_OK), 0);
    ck_assert_int_eq(zs_afile_write(&a, "world", 5), 0);
    uint64_t h = 0, h2 = 0, n = 0;
    ck_assert_int_eq(zs_afile_commit(&a, &h), 0);
    ck_assert_uint_eq(h, XXH3_64bits("hello world", 11));
    ck_assert_int_eq(zs_io_hash_file(p, &h2, &n), 0);
    ck_assert_uint_eq(h2, h);
    ck_assert_uint_eq(n, 11);
    ck_assert_int_eq(count_files(), 1);
    /* an aborted rewrite leaves the old file and no temporary */
    ck_assert_int_eq(zs_afile_open(&a, p), 0);
    ck_assert_int_eq(zs_afile_write(&a, "x", 1), 0);
    zs_afile_abort(&a);
    ck_assert_int_eq(zs_io_hash_file(p, &h2, &n), 0);
    ck_assert_uint_eq(h2, h);
    ck_assert_int_eq(count_files(), 1);
    /* a directory that does not exist: one line naming the path */
    char q[160];
    snprintf(q, sizeof q, "%s/no/such/file", dir);
    ck_assert_int_ne(zs_afile_open(&a, q), 0);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), q));
}
END_TEST

/* A file with a 2x3 F32 tensor, a 4-element I32 one and metadata. */
static void write_sample(const char *p, uint64_t *hash)
{
    zs_st_writer w;
    float a[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[4] = {-1, 7, 65535, 3};
    uint64_t sa[2] = {2, 3}, sb[1] = {4};
    ck_assert_int_eq(zs_st_writer_open(&w, p), 0);
    ck_assert_int_eq(zs_st_writer_add(&w, "a.weight", ZS_ST_F32, 2, sa), 0);
    ck_assert_int_eq(zs_st_writer_add(&w, "b", ZS_ST_I32, 1, sb), 0);
    ck_assert_int_eq(zs_st_writer_meta(&w, "format", "pt"), 0);
    ck_assert_int_eq(zs_st_writer_data(&w, a, 8), 0); /* in pieces */
    ck_assert_int_eq(zs_st_writer_data(&w, (char *)a + 8, sizeof a - 8), 0);
    ck_assert_int_eq(zs_st_writer_data(&w, b, sizeof b), 0);
    ck_assert_int_eq(zs_st_writer_commit(&w, hash), 0);
}

START_TEST(test_safetensors_round_trip)
{
    char p[128];
    path_of(p, sizeof p, "s.safetensors");
    uint64_t h;
    write_sample(p, &h);
    size_t n;
    unsigned char *raw = slurp(p, &n);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)raw[i] << (8 * i);
    ck_assert_uint_eq(hlen % 8, 0);                 /* padded to 8 */
    ck_assert_uint_eq(n, 8 + hlen + 24 + 16);       /* header, then the bytes */
    ck_assert_int_eq(raw[8], '{');
    /* the data section is the tensors in order, little-endian */
    float a0;
    memcpy(&a0, raw + 8 + hlen, 4);
    ck_assert_float_eq(a0, 1.0f);
    free(raw);

    zs_st_file f;
    ck_assert_int_eq(zs_st_open(&f, p), 0);
    ck_assert_int_eq(f.n, 2);
    const zs_st_tensor *ta = zs_st_find(&f, "a.weight"), *tb = zs_st_find(&f, "b");
    ck_assert_ptr_nonnull(ta);
    ck_assert_ptr_nonnull(tb);
    ck_assert_ptr_null(zs_st_find(&f, "c"));
    ck_assert_int_eq(ta->dtype, ZS_ST_F32);
    ck_assert_int_eq(ta->ndim, 2);
    ck_assert_uint_eq(ta->shape[0], 2);
    ck_assert_uint_eq(ta->shape[1], 3);
    ck_assert_uint_eq(zs_st_numel(ta), 6);
    ck_assert_int_eq(tb->dtype, ZS_ST_I32);
    ck_assert_str_eq(zs_st_meta(&f, "format"), "pt");
    ck_assert_ptr_null(zs_st_meta(&f, "other"));
    float got[3];
    ck_assert_int_eq(zs_st_read(&f, ta, 12, got, 12), 0);
    ck_assert_float_eq(got[0], 4.0f);
    ck_assert_float_eq(got[2], 6.0f);
    int32_t gb[4];
    ck_assert_int_eq(zs_st_read(&f, tb, 0, gb, 16), 0);
    ck_assert_int_eq(gb[2], 65535);
    /* reading past the tensor is refused */
    ck_assert_int_ne(zs_st_read(&f, tb, 8, gb, 12), 0);
    zs_st_close(&f);
}
END_TEST

/* Each damaged variant is refused with a message naming the file and saying
 * what is wrong. */
static void expect_refused(const void *b, size_t n, const char *what)
{
    char p[128];
    path_of(p, sizeof p, "bad.safetensors");
    spit(p, b, n);
    zs_st_file f;
    ck_assert_msg(zs_st_open(&f, p) != 0, "opened, expected \"%s\"", what);
    ck_assert_msg(strstr(zs_error_msg(), p) != NULL, "no path in: %s", zs_error_msg());
    ck_assert_msg(strstr(zs_error_msg(), what) != NULL, "expected \"%s\" in: %s", what,
                  zs_error_msg());
    ck_assert_ptr_null(strchr(zs_error_msg(), '\n'));
}

/* A file built by hand from a header string and n data bytes. */
static size_t handmade(unsigned char *out, const char *header, size_t data)
{
    size_t h = strlen(header);
    for (int i = 0; i < 8; i++)
        out[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(out + 8, header, h);
    memset(out + 8 + h, 0, data);
    return 8 + h + data;
}

START_TEST(test_safetensors_refused)
{
    char p[128];
    path_of(p, sizeof p, "s.safetensors");
    uint64_t h;
    write_sample(p, &h);
    size_t n;
    unsigned char *raw = slurp(p, &n);
    expect_refused(raw, n - 1, "truncated");           /* one byte short */
    expect_refused(raw, 5, "too short");
    unsigned char big[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
    expect_refused(big, 8, "not safetensors");
    free(raw);
    unsigned char buf[512];
    expect_refused(buf, handmade(buf, "[1,2]", 0), "not a JSON object");
    expect_refused(buf, handmade(buf, "{\"x\":", 0), "not valid JSON (byte 5: a value");
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8),
                   "lacks");
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"Q4\",\"shape\":[2],"
                                      "\"data_offsets\":[0,8]}}", 8), "Q4");
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],"
                                      "\"data_offsets\":[0,8]}}", 8), "need 12");
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],"
                                      "\"data_offsets\":[0,8]}}", 8), "bad shape");
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],"
                                      "\"data_offsets\":[0,8]},\"y\":{\"dtype\":\"F32\","
                                      "\"shape\":[1],\"data_offsets\":[4,8]}}", 8), "overlap");
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],"
                                      "\"data_offsets\":[0,8]},\"x\":{\"dtype\":\"F32\","
                                      "\"shape\":[2],\"data_offsets\":[0,8]}}", 8),
                   "tensor \"x\" is named twice");
    expect_refused(buf, handmade(buf, "{\"__metadata__\":{\"k\":1}}", 0), "not a string");
    /* text of the file in the line is escaped: a newline forges no line */
    expect_refused(buf, handmade(buf, "{\"a\\nzerosim: b\":{\"dtype\":\"F32\",\"shape\":[2],"
                                      "\"data_offsets\":[0,8]}}", 8),
                   "\"a\\nzerosim: b\" holds control characters");
    expect_refused(buf, handmade(buf, "{\"__metadata__\":{\"k\\r\":\"v\"}}", 0),
                   "\"k\\x0d\" holds control characters");
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"Q\\n4\",\"shape\":[2],"
                                      "\"data_offsets\":[0,8]}}", 8), "dtype Q\\n4,");
    /* each bound of the header's length on its own line, the file's size
     * as it is (it said "in a file of 0" for all three) */
    unsigned char one[16] = {1, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    expect_refused(one, 16, "header of 1 bytes, too short for a JSON object");
    unsigned char huge[16] = {0, 0, 0, 0, 1, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    expect_refused(huge, 16, "header of 4294967296 bytes, more than the 100 MiB");
    unsigned char over[16] = {9, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    expect_refused(over, 16, "header of 9 bytes in a file of 16;");
    /* the data is the tensors, whole: a hole, bytes after the last tensor */
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],"
                                      "\"data_offsets\":[4,8]}}", 8), "bytes 0..4 of the data");
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],"
                                      "\"data_offsets\":[0,4]}}", 8),
                   "4 bytes after the last tensor's end (byte 4 of the data)");
    /* sizes overflow-checked: a shape whose product wraps 64 bits */
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,"
                                      "4294967296],\"data_offsets\":[0,0]}}", 8), "bad shape");
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904"
                                      "],\"data_offsets\":[0,0]}}", 8), "more bytes than 64");
    /* JSON the parser refuses: nesting, encodings, numbers */
    char deep[256] = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"o\":";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    expect_refused(buf, handmade(buf, deep, 4), "nested too deep");
    expect_refused(buf, handmade(buf, "{\"\xff\":1}", 0), "not UTF-8");
    expect_refused(buf, handmade(buf, "{\"\\ud800\":1}", 0), "lone surrogate");
    expect_refused(buf, handmade(buf, "{\"\\u0000\":1}", 0), "\\u0000");
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[01],"
                                      "\"data_offsets\":[0,4]}}", 4), "leading zero");
    expect_refused(buf, handmade(buf, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1.0],"
                                      "\"data_offsets\":[0,4]}}", 4), "bad shape");
    expect_refused(buf, handmade(buf, "{} x", 0), "bytes after the header's object");
    expect_refused(buf, handmade(buf, "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0),
                   "key \"k\" is given twice");
    /* a hand-made file that is right opens */
    char q[128];
    path_of(q, sizeof q, "good.safetensors");
    spit(q, buf, handmade(buf, "{\"x\":{\"dtype\":\"U16\",\"shape\":[4],"
                               "\"data_offsets\":[0,8]}}", 8));
    zs_st_file f;
    ck_assert_int_eq(zs_st_open(&f, q), 0);
    ck_assert_int_eq(zs_st_find(&f, "x")->dtype, ZS_ST_U16);
    zs_st_close(&f);
    /* escapes decoded, unknown keys skipped, empty tensors anywhere */
    spit(q, buf, handmade(buf, "{\"\\u00e9\\ud83d\\ude00\\t\\\"\":{\"dtype\":\"U8\",\"shape\":[0],"
                               "\"data_offsets\":[9,9],\"x\":[{\"a\":null},true,-1.5e3]}, "
                               "\"y\" : {\"shape\":[2,4],\"dtype\":\"U8\",\"data_offsets\":[0,8]}"
                               "}  ", 8));
    ck_assert_int_ne(zs_st_open(&f, q), 0); /* the name holds a tab */
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "\\xc3\\xa9\\xf0\\x9f\\x98\\x80\\t\""));
    spit(q, buf, handmade(buf, "{\"\\u00e9\\ud83d\\ude00\\/\\\"\":{\"dtype\":\"U8\",\"shape\":[0],"
                               "\"data_offsets\":[8,8],\"x\":[{\"a\":null},true,-1.5e3]}, "
                               "\"y\" : {\"shape\":[2,4],\"dtype\":\"U8\",\"data_offsets\":[0,8]}"
                               "}  ", 8));
    ck_assert_msg(zs_st_open(&f, q) == 0, "%s", zs_error_msg());
    ck_assert_int_eq(f.n, 2);
    ck_assert_ptr_nonnull(zs_st_find(&f, "\xc3\xa9\xf0\x9f\x98\x80/\""));
    ck_assert_int_eq(zs_st_find(&f, "y")->ndim, 2);
    zs_st_close(&f);
}
END_TEST

START_TEST(test_writer_checks_bytes)
{
    char p[128];
    path_of(p, sizeof p, "w.safetensors");
    zs_st_writer w;
    uint64_t s[1] = {4};
    float x[4] = {0};
    /* fewer bytes than declared: nothing is written */
    ck_assert_int_eq(zs_st_writer_open(&w, p), 0);
    ck_assert_int_eq(zs_st_writer_add(&w, "x", ZS_ST_F32, 1, s), 0);
    ck_assert_int_eq(zs_st_writer_data(&w, x, 8), 0);
    ck_assert_int_ne(zs_st_writer_commit(&w, NULL), 0);
    ck_assert_int_eq(count_files(), 0);
    /* more bytes than declared are refused */
    ck_assert_int_eq(zs_st_writer_open(&w, p), 0);
    ck_assert_int_eq(zs_st_writer_add(&w, "x", ZS_ST_F32, 1, s), 0);
    ck_assert_int_ne(zs_st_writer_data(&w, x, 20), 0);
    zs_st_writer_abort(&w);
    ck_assert_int_eq(count_files(), 0);
}
END_TEST

/* The canary: a file that a symlink planted by someone else points at. */
static const char canary_text[] = "root:x:0:0:canary\nsecond line\n";

static void plant(const char *canary, const char *link)
{
    ck_assert_int_eq(symlink(canary, link), 0);
}

static void canary_untouched(const char *canary)
{
    size_t n;
    unsigned char *b = slurp(canary, &n);
    ck_assert_msg(n == sizeof canary_text - 1 && !memcmp(b, canary_text, n),
                  "the canary %s was written through a symlink", canary);
    free(b);
}

/* zs_file_create_new refuses any name that exists, a symlink (to a file, or
 * dangling: O_CREAT would create its target) included, with one line. */
START_TEST(test_file_create_new)
{
    char canary[128], link[128], dangle[128], absent[128], file[128], fresh[128];
    path_of(canary, sizeof canary, "canary");
    path_of(link, sizeof link, "link");
    path_of(dangle, sizeof dangle, "dangle");
    path_of(absent, sizeof absent, "absent");
    path_of(file, sizeof file, "file");
    path_of(fresh, sizeof fresh, "fresh");
    spit(canary, canary_text, sizeof canary_text - 1);
    spit(file, canary_text, sizeof canary_text - 1);
    plant(canary, link);
    plant(absent, dangle);
    ck_assert_int_eq(zs_file_create_new(link, O_WRONLY, 0600), -1);
    ck_assert_int_eq(errno, EEXIST);
    ck_assert_msg(strstr(zs_error_msg(), link) && strstr(zs_error_msg(), "a symlink of that name"),
                  "got: %s", zs_error_msg());
    ck_assert_ptr_null(strchr(zs_error_msg(), '\n'));
    ck_assert_int_eq(zs_file_create_new(dangle, O_RDWR, 0600), -1);
    ck_assert_int_ne(access(absent, F_OK), 0); /* its target not created */
    ck_assert_int_eq(zs_file_create_new(file, O_WRONLY, 0600), -1);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "something of that name exists"));
    canary_untouched(canary);
    canary_untouched(file);
    int fd = zs_file_create_new(fresh, O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "x", 1), 1);
    close(fd);
    struct stat sb;
    ck_assert_int_eq(lstat(fresh, &sb), 0);
    ck_assert(S_ISREG(sb.st_mode) && (sb.st_mode & 077) == 0 && sb.st_size == 1);
    /* a folder that does not exist: the write error naming the path */
    char q[160];
    snprintf(q, sizeof q, "%s/no/such", dir);
    ck_assert_int_eq(zs_file_create_new(q, O_WRONLY, 0600), -1);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "cannot write"));
}
END_TEST

/* zs_file_create_unique: STEM.<16 hex digits>, another name each time. */
START_TEST(test_file_create_unique)
{
    char stem[128], a[160], b[160];
    path_of(stem, sizeof stem, "x.swap");
    int fa = zs_file_create_unique(stem, a, sizeof a, O_RDWR, 0600);
    int fb = zs_file_create_unique(stem, b, sizeof b, O_RDWR, 0600);
    ck_assert(fa >= 0 && fb >= 0);
    close(fa);
    close(fb);
    ck_assert_str_ne(a, b);
    ck_assert_int_eq(strncmp(a, stem, strlen(stem)), 0);
    ck_assert_int_eq(strlen(a), strlen(stem) + 17);
    ck_assert_int_eq(a[strlen(stem)], '.');
    ck_assert_uint_eq(strspn(a + strlen(stem) + 1, "0123456789abcdef"), 16);
    ck_assert_int_eq(count_files(), 2);
    char tiny[8];
    ck_assert_int_eq(zs_file_create_unique(stem, tiny, sizeof tiny, O_RDWR, 0600), -1);
    ck_assert_ptr_nonnull(strstr(zs_error_msg(), "too long"));
}
END_TEST

/* The atomic writers (zs_afile, the report's) never write through a symlink
 * planted at the final name or at the temporary name they used to take
 * (PATH.tmp.PID): the final symlink is replaced by the file, the target
 * untouched, and nothing is left at the temporary name. */
START_TEST(test_writers_never_follow_symlinks)
{
    char canary[128], out[128], tmp[160], rep[128], rtmp[160];
    path_of(canary, sizeof canary, "canary");
    path_of(out, sizeof out, "out.bin");
    path_of(rep, sizeof rep, "r.json");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    snprintf(rtmp, sizeof rtmp, "%s.tmp.%ld", rep, (long)getpid());
    spit(canary, canary_text, sizeof canary_text - 1);
    plant(canary, tmp);
    zs_afile a;
    ck_assert_int_eq(zs_afile_open(&a, out), 0);
    ck_assert_int_eq(zs_afile_write(&a, "new", 3), 0);
    ck_assert_int_eq(zs_afile_commit(&a, NULL), 0);
    canary_untouched(canary);
    unlink(out);
    plant(canary, out); /* the final name a symlink */
    ck_assert_int_eq(zs_afile_open(&a, out), 0);
    ck_assert_int_eq(zs_afile_write(&a, "new", 3), 0);
    ck_assert_int_eq(zs_afile_commit(&a, NULL), 0);
    canary_untouched(canary);
    struct stat sb;
    ck_assert_int_eq(lstat(out, &sb), 0);
    ck_assert(S_ISREG(sb.st_mode) && sb.st_size == 3);
    plant(canary, rtmp);
    ck_assert_int_eq(zs_report_write_text(rep, "{}\n", 3), 0);
    canary_untouched(canary);
    unlink(rep);
    plant(canary, rep);
    ck_assert_int_eq(zs_report_write_text(rep, "{}\n", 3), 0);
    canary_untouched(canary);
    ck_assert_int_eq(lstat(rep, &sb), 0);
    ck_assert(S_ISREG(sb.st_mode) && sb.st_size == 3);
    /* canary, the two planted temporary links, out.bin, r.json: no temporary left */
    ck_assert_int_eq(count_files(), 5);
}
END_TEST

/* Tensor i of test_sharded: element k is 100 i + k. */
static int sharded_data(void *ctx, int i, zs_st_writer *w)
{
    const zs_st_tensor *t = ctx;
    float v[32];
    for (uint64_t k = 0; k < t[i].shape[0]; k++)
        v[k] = (float)(100 * i + (int)k);
    return zs_st_writer_data(w, v, t[i].shape[0] * sizeof(float));
}

/* Shards of at most 64 bytes of tensors of 40, 24, 100, 8 and 8 bytes:
 * the first two fill one exactly, the third (larger than 64) is alone, the
 * last two share the third; names and index as Hugging Face's, read back
 * through the index and the folder. */
START_TEST(test_sharded)
{
    static const uint64_t len[5] = {10, 6, 25, 2, 2};
    static const int shard_of[5] = {1, 1, 2, 3, 3};
    zs_st_tensor t[5];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 5; i++) {
        snprintf(t[i].name, sizeof t[i].name, "t%d", i);
        t[i].dtype = ZS_ST_F32;
        t[i].ndim = 1;
        t[i].shape[0] = len[i];
    }
    const char *meta[2] = {"format", "pt"};
    char p[128];
    path_of(p, sizeof p, "model.safetensors");
    int shards = 0;
    ck_assert_int_eq(zs_st_write_sharded(p, 64, t, 5, meta, 1, sharded_data, t, &shards), 0);
    ck_assert_int_eq(shards, 3);
    ck_assert_int_eq(count_files(), 4); /* three shards and the index */
    for (int pass = 0; pass < 2; pass++) {
        char ip[128];
        path_of(ip, sizeof ip, "model.safetensors.index.json");
        zs_st_set set;
        ck_assert_int_eq(zs_st_set_open(&set, pass ? dir : ip), 0);
        ck_assert_int_eq(set.n_files, 3);
        ck_assert_int_eq(set.n, 5);
        ck_assert_str_eq(zs_st_set_meta(&set, "format"), "pt");
        for (int i = 0; i < 5; i++) {
            int k = zs_st_set_find(&set, t[i].name);
            ck_assert_int_ge(k, 0);
            char want[64];
            snprintf(want, sizeof want, "model-%05d-of-00003.safetensors", shard_of[i]);
            const char *file = strrchr(zs_st_set_file_path(&set, k), '/') + 1;
            ck_assert_str_eq(file, want);
            float v[32];
            ck_assert_int_eq(zs_st_set_read(&set, k, 0, v, len[i] * sizeof(float)), 0);
            for (uint64_t j = 0; j < len[i]; j++)
                ck_assert_float_eq(v[j], (float)(100 * i + (int)j));
        }
        ck_assert_int_eq(zs_st_set_find(&set, "t5"), -1);
        zs_st_set_close(&set);
    }
    /* all in one shard: one file, and the older index removed */
    ck_assert_int_eq(zs_st_write_sharded(p, 1000, t, 5, meta, 1, sharded_data, t, &shards), 0);
    ck_assert_int_eq(shards, 1);
    ck_assert_int_eq(count_files(), 4); /* the three older shards and model.safetensors */
    zs_st_set set;
    ck_assert_int_eq(zs_st_set_open(&set, dir), 0);
    ck_assert_int_eq(set.n_files, 1);
    ck_assert_int_eq(set.n, 5);
    zs_st_set_close(&set);
}
END_TEST

START_TEST(test_escape)
{
    char out[64];
    const char in[] = "a\nb\x1b\\c\xff";
    ck_assert_str_eq(zs_file_escape(in, sizeof in - 1, out, sizeof out), "a\\nb\\x1b\\\\c\\xff");
    char small[12];
    ck_assert_str_eq(zs_file_escape("0123456789abcdef", 16, small, sizeof small), "01234567...");
    ck_assert_str_eq(zs_file_escape("\n\n\n\n\n", 5, small, sizeof small), "\\n\\n\\n\\n...");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("io");
    TCase *tc = tcase_create("io");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_afile_commit_and_abort);
    tcase_add_test(tc, test_safetensors_round_trip);
    tcase_add_test(tc, test_safetensors_refused);
    tcase_add_test(tc, test_writer_checks_bytes);
    tcase_add_test(tc, test_file_create_new);
    tcase_add_test(tc, test_file_create_unique);
    tcase_add_test(tc, test_writers_never_follow_symlinks);
    tcase_add_test(tc, test_escape);
    tcase_add_test(tc, test_sharded);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
