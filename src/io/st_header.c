/* zerosim — the safetensors header, parsed in one pass (see zerosim/io.h).
 *
 * The header is JSON of a fixed shape: an object whose members are tensors
 * ({"dtype": S, "shape": [ints], "data_offsets": [begin, end]}, other keys
 * skipped) and one "__metadata__" object of strings. It is read here by a
 * small parser of exactly that shape, straight into the file's tensor table:
 * time and memory linear in the header (a million tensors in about a second;
 * a general JSON tree cost 30 s and 1.3 GB for them), nesting at most
 * ZS_STH_MAX_DEPTH deep in skipped values, strings checked as UTF-8. Every
 * error is one line naming the file and the byte of the header, quoting no
 * text of the file unescaped.
 */
#include "io_impl.h"
#include "zerosim/error.h"
#include "zerosim/file.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZS_STH_MAX_DEPTH 32

typedef struct {
    const char *path;
    const char *text, *p, *end; /* the header, the next byte, its end */
    char *scratch;              /* a decoded string (at most the header's length) */
    size_t scratch_len;
} zs_sth;

static int zs_sth_syntax(const zs_sth *s, const char *what)
{
    ZS_FAIL("%s: the safetensors header is not valid JSON (byte %zu: %s); the file is not "
            "safetensors or is damaged", s->path, (size_t)(s->p - s->text), what);
}

static void zs_sth_ws(zs_sth *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* Expect byte c (after white space). */
static int zs_sth_expect(zs_sth *s, char c)
{
    zs_sth_ws(s);
    if (s->p >= s->end || *s->p != c) {
        char what[32];
        snprintf(what, sizeof what, "'%c' expected", c);
        return zs_sth_syntax(s, what);
    }
    s->p++;
    return 0;
}

/* The next byte after white space is c: consumed, 1; else 0. */
static int zs_sth_take(zs_sth *s, char c)
{
    zs_sth_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return 1;
    }
    return 0;
}

static int zs_sth_hex4(const char *p, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int c = (unsigned char)p[i], d = c >= '0' && c <= '9' ? c - '0'
                                       : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        *v = *v * 16 + (unsigned)d;
    }
    return 0;
}

static size_t zs_sth_utf8_put(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Length of the valid UTF-8 sequence at p (before end), or 0. */
static size_t zs_sth_utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0], cp;
    size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
             : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!n || (size_t)(end - p) < n)
        return 0;
    cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    static const unsigned least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0; /* overlong, beyond Unicode, or a surrogate */
    return n;
}

/* A JSON string, decoded into s->scratch (NUL-terminated, s->scratch_len
 * bytes); \u0000 is refused, so the result is a C string. */
static int zs_sth_string(zs_sth *s)
{
    zs_sth_ws(s);
    if (s->p >= s->end || *s->p != '"')
        return zs_sth_syntax(s, "a string expected");
    s->p++;
    size_t k = 0;
    for (;;) {
        if (s->p >= s->end)
            return zs_sth_syntax(s, "a string does not end");
        unsigned char c = (unsigned char)*s->p;
        if (c == '"') {
            s->p++;
            break;
        }
        if (c < 0x20)
            return zs_sth_syntax(s, "a control character in a string");
        if (c != '\\') {
            size_t n = zs_sth_utf8_len((const unsigned char *)s->p, (const unsigned char *)s->end);
            if (!n)
                return zs_sth_syntax(s, "a string that is not UTF-8");
            memcpy(s->scratch + k, s->p, n);
            k += n;
            s->p += n;
            continue;
        }
        if (s->end - s->p < 2)
            return zs_sth_syntax(s, "a string does not end");
        char e = s->p[1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            s->scratch[k++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            s->p += 2;
            continue;
        }
        unsigned cp, lo;
        if (e != 'u' || s->end - s->p < 6 || zs_sth_hex4(s->p + 2, &cp))
            return zs_sth_syntax(s, "a bad escape in a string");
        s->p += 6;
        if (cp >= 0xd800 && cp <= 0xdbff) { /* a surrogate pair */
            if (s->end - s->p < 6 || s->p[0] != '\\' || s->p[1] != 'u' ||
                zs_sth_hex4(s->p + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
                return zs_sth_syntax(s, "a lone surrogate in a string");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            s->p += 6;
        } else if ((cp >= 0xdc00 && cp <= 0xdfff) || cp == 0) {
            return zs_sth_syntax(s, cp ? "a lone surrogate in a string" : "\\u0000 in a string");
        }
        k += zs_sth_utf8_put(s->scratch + k, cp);
    }
    s->scratch[k] = '\0';
    s->scratch_len = k;
    return 0;
}

/* A JSON number: *is_int = 1 and *v its value when it is an integer in
 * 0..INT64_MAX, else 0 (a fraction, an exponent, a sign or too large). */
static int zs_sth_number(zs_sth *s, int *is_int, uint64_t *v)
{
    zs_sth_ws(s);
    const char *start = s->p;
    int neg = s->p < s->end && *s->p == '-', big = 0;
    s->p += neg;
    if (s->p >= s->end || *s->p < '0' || *s->p > '9')
        return zs_sth_syntax(s, "a value expected");
    uint64_t x = 0;
    int lead_zero = *s->p == '0';
    for (; s->p < s->end && *s->p >= '0' && *s->p <= '9'; s->p++) {
        if (x > (uint64_t)(INT64_MAX - 9) / 10)
            big = 1;
        x = big ? x : x * 10 + (uint64_t)(*s->p - '0');
    }
    if (lead_zero && s->p - start > 1 + neg)
        return zs_sth_syntax(s, "a number with a leading zero");
    int frac = 0;
    if (s->p < s->end && *s->p == '.') {
        frac = 1;
        s->p++;
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return zs_sth_syntax(s, "a bad number");
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    }
    if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
        frac = 1;
        s->p++;
        if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
            s->p++;
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return zs_sth_syntax(s, "a bad number");
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9')
            s->p++;
    }
    *is_int = !neg && !frac && !big;
    *v = x;
    return 0;
}

/* Any JSON value, skipped (depth levels of nesting so far). */
static int zs_sth_skip(zs_sth *s, int depth)
{
    if (depth > ZS_STH_MAX_DEPTH)
        return zs_sth_syntax(s, "nested too deep");
    zs_sth_ws(s);
    if (s->p >= s->end)
        return zs_sth_syntax(s, "a value expected");
    static const char *const lit[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lit[i]);
        if ((size_t)(s->end - s->p) >= n && !memcmp(s->p, lit[i], n)) {
            s->p += n;
            return 0;
        }
    }
    if (*s->p == '"')
        return zs_sth_string(s);
    char open = *s->p;
    if (open != '[' && open != '{') {
        int is_int;
        uint64_t v;
        return zs_sth_number(s, &is_int, &v);
    }
    s->p++;
    char close = open == '[' ? ']' : '}';
    if (zs_sth_take(s, close))
        return 0;
    do {
        if (open == '{') {
            ZS_TRY(zs_sth_string(s));
            ZS_TRY(zs_sth_expect(s, ':'));
        }
        ZS_TRY(zs_sth_skip(s, depth + 1));
    } while (zs_sth_take(s, ','));
    return zs_sth_expect(s, close);
}

/* An array of integers into v (at most cap; *n the count, cap + 1 when
 * more); *all_int = 0 when one is not an integer in 0..INT64_MAX. */
static int zs_sth_ints(zs_sth *s, uint64_t *v, int cap, int *n, int *all_int)
{
    *n = 0;
    *all_int = 1;
    ZS_TRY(zs_sth_expect(s, '['));
    if (zs_sth_take(s, ']'))
        return 0;
    do {
        int is_int;
        uint64_t x;
        zs_sth_ws(s);
        if (s->p < s->end && (*s->p == '"' || *s->p == '[' || *s->p == '{' || *s->p == 't' ||
                              *s->p == 'f' || *s->p == 'n')) {
            ZS_TRY(zs_sth_skip(s, 1));
            is_int = 0;
        } else {
            ZS_TRY(zs_sth_number(s, &is_int, &x));
        }
        *all_int &= is_int;
        if (*n < cap && is_int)
            v[*n] = x;
        *n += *n <= cap;
    } while (zs_sth_take(s, ','));
    return zs_sth_expect(s, ']');
}

/* A tensor's entry as written: what was found of its three keys. */
typedef struct {
    int has_dtype, has_shape, has_offsets;
    int dtype;                 /* ZS_ST_NDTYPES when unknown */
    char dtype_text[48];       /* an unknown dtype, escaped */
    uint64_t shape[ZS_ST_MAX_DIMS + 1], offsets[3];
    int ndim, noffsets, shape_ints, offsets_ints;
} zs_sth_entry;

static int zs_sth_entry_parse(zs_sth *s, zs_sth_entry *e)
{
    memset(e, 0, sizeof *e);
    ZS_TRY(zs_sth_expect(s, '{'));
    if (zs_sth_take(s, '}'))
        return 0;
    do {
        ZS_TRY(zs_sth_string(s));
        ZS_TRY(zs_sth_expect(s, ':'));
        int *seen = !strcmp(s->scratch, "dtype") ? &e->has_dtype
                  : !strcmp(s->scratch, "shape") ? &e->has_shape
                  : !strcmp(s->scratch, "data_offsets") ? &e->has_offsets : NULL;
        if (seen && *seen)
            return zs_sth_syntax(s, "a key given twice in a tensor's entry");
        if (seen)
            *seen = 1;
        zs_sth_ws(s);
        int is_string = s->p < s->end && *s->p == '"', is_array = s->p < s->end && *s->p == '[';
        if (seen == &e->has_dtype && is_string) {
            ZS_TRY(zs_sth_string(s));
            e->dtype = ZS_ST_NDTYPES;
            for (int d = 0; d < ZS_ST_NDTYPES; d++)
                if (!strcmp(s->scratch, zs_st_dtype_name((zs_st_dtype)d)))
                    e->dtype = d;
            zs_file_escape(s->scratch, s->scratch_len, e->dtype_text, sizeof e->dtype_text);
        } else if (seen == &e->has_shape && is_array) {
            ZS_TRY(zs_sth_ints(s, e->shape, ZS_ST_MAX_DIMS, &e->ndim, &e->shape_ints));
        } else if (seen == &e->has_offsets && is_array) {
            ZS_TRY(zs_sth_ints(s, e->offsets, 2, &e->noffsets, &e->offsets_ints));
        } else {
            ZS_TRY(zs_sth_skip(s, 2));
            if (seen) /* of another type: as if missing */
                *seen = 0;
        }
    } while (zs_sth_take(s, ','));
    return zs_sth_expect(s, '}');
}

/* Tensor name's entry e checked into t; data_bytes: the data section's. */
static int zs_sth_tensor(const char *path, const char *name, const zs_sth_entry *e,
                         uint64_t data_bytes, zs_st_tensor *t)
{
    if (!e->has_dtype || !e->has_shape || !e->has_offsets || e->noffsets != 2)
        ZS_FAIL("%s: tensor \"%s\" lacks dtype, shape or data_offsets", path, name);
    if (e->dtype == ZS_ST_NDTYPES)
        ZS_FAIL("%s: tensor \"%s\" has dtype %s, which zerosim does not read", path, name,
                e->dtype_text);
    if (e->ndim > ZS_ST_MAX_DIMS)
        ZS_FAIL("%s: tensor \"%s\" has more than %d dimensions", path, name, ZS_ST_MAX_DIMS);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = (zs_st_dtype)e->dtype;
    t->ndim = e->ndim;
    uint64_t numel = 1, bytes;
    for (int d = 0; d < t->ndim; d++) {
        if (!e->shape_ints || __builtin_mul_overflow(numel, e->shape[d], &numel))
            ZS_FAIL("%s: tensor \"%s\" has a bad shape (integers from 0, their product "
                    "below 2^64)", path, name);
        t->shape[d] = e->shape[d];
    }
    if (!e->offsets_ints || e->offsets[1] < e->offsets[0])
        ZS_FAIL("%s: tensor \"%s\" has bad data_offsets (two integers from 0, begin <= end)",
                path, name);
    t->begin = e->offsets[0];
    t->end = e->offsets[1];
    if (__builtin_mul_overflow(numel, (uint64_t)zs_st_dtype_size(t->dtype), &bytes))
        ZS_FAIL("%s: tensor \"%s\"'s shape and dtype need more bytes than 64 bits count", path,
                name);
    if (t->end - t->begin != bytes)
        ZS_FAIL("%s: tensor \"%s\" spans %" PRIu64 " bytes, its shape and dtype need %" PRIu64,
                path, name, t->end - t->begin, bytes);
    if (t->end > data_bytes)
        ZS_FAIL("%s: tensor \"%s\" ends at byte %" PRIu64 " of the data, the file holds %" PRIu64
                ": the file is truncated", path, name, t->end, data_bytes);
    return 0;
}

/* A name that an error line could not quote as it is: control characters
 * (a newline would forge a line of its own). */
static int zs_sth_bad_name(const char *name)
{
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        if (*c < 32 || *c == 127)
            return 1;
    return 0;
}

/* The __metadata__ object: its strings appended to f->meta. */
static int zs_sth_meta(zs_sth *s, zs_st_file *f)
{
    char quoted[160];
    zs_sth_ws(s);
    if (s->p >= s->end || *s->p != '{')
        ZS_FAIL("%s: __metadata__ is not an object of strings", f->path);
    s->p++;
    if (zs_sth_take(s, '}'))
        return 0;
    int cap = f->nmeta;
    do {
        ZS_TRY(zs_sth_string(s));
        if (zs_sth_bad_name(s->scratch))
            ZS_FAIL("%s: the __metadata__ key \"%s\" holds control characters; the file is "
                    "damaged", f->path, zs_file_escape(s->scratch, s->scratch_len, quoted,
                                                       sizeof quoted));
        if (f->nmeta + 2 > cap) {
            cap = cap ? 2 * cap : 16;
            char **m = realloc(f->meta, (size_t)cap * sizeof *m);
            if (!m)
                ZS_FAIL("out of host memory reading %s", f->path);
            f->meta = m;
        }
        f->meta[f->nmeta] = strdup(s->scratch);
        f->meta[f->nmeta + 1] = NULL;
        f->nmeta += 2;
        if (!f->meta[f->nmeta - 2])
            ZS_FAIL("out of host memory reading %s", f->path);
        ZS_TRY(zs_sth_expect(s, ':'));
        zs_sth_ws(s);
        if (s->p >= s->end || *s->p != '"')
            ZS_FAIL("%s: __metadata__ value of \"%s\" is not a string", f->path,
                    f->meta[f->nmeta - 2]);
        ZS_TRY(zs_sth_string(s));
        if (!(f->meta[f->nmeta - 1] = strdup(s->scratch)))
            ZS_FAIL("out of host memory reading %s", f->path);
    } while (zs_sth_take(s, ','));
    return zs_sth_expect(s, '}');
}

/* The header's members into f->t and f->meta. */
static int zs_sth_members(zs_sth *s, zs_st_file *f)
{
    char quoted[160];
    int cap = 0, have_meta = 0;
    uint64_t data_bytes = f->file_bytes - f->data_start;
    zs_sth_ws(s);
    if (s->p >= s->end || *s->p != '{')
        ZS_FAIL("%s: the safetensors header is not a JSON object; the file is not safetensors "
                "or is damaged", f->path);
    s->p++;
    int empty = zs_sth_take(s, '}'), members = !empty;
    while (members) {
        ZS_TRY(zs_sth_string(s));
        if (zs_sth_bad_name(s->scratch)) /* every later line may quote a name as it is */
            ZS_FAIL("%s: the name \"%s\" holds control characters; the file is damaged",
                    f->path, zs_file_escape(s->scratch, s->scratch_len, quoted, sizeof quoted));
        ZS_TRY(zs_sth_expect(s, ':'));
        if (!strcmp(s->scratch, "__metadata__")) {
            if (have_meta++)
                ZS_FAIL("%s: __metadata__ is given twice; the file is damaged", f->path);
            ZS_TRY(zs_sth_meta(s, f));
            members = zs_sth_take(s, ',');
            continue;
        }
        if (s->scratch_len >= sizeof f->t[0].name)
            ZS_FAIL("%s: a tensor name of %zu bytes is longer than zerosim reads (%zu)", f->path,
                    s->scratch_len, sizeof f->t[0].name - 1);
        char name[sizeof f->t[0].name];
        memcpy(name, s->scratch, s->scratch_len + 1);
        if (f->n == cap) {
            if (cap > INT32_MAX / 2)
                ZS_FAIL("%s: more tensors than zerosim reads", f->path);
            cap = cap ? 2 * cap : 64;
            zs_st_tensor *t = realloc(f->t, (size_t)cap * sizeof *t);
            if (!t)
                ZS_FAIL("out of host memory reading %s", f->path);
            f->t = t;
        }
        zs_sth_entry e;
        zs_sth_ws(s);
        if (s->p >= s->end)
            return zs_sth_syntax(s, "a value expected");
        if (*s->p != '{')
            ZS_FAIL("%s: tensor \"%s\" lacks dtype, shape or data_offsets", f->path, name);
        ZS_TRY(zs_sth_entry_parse(s, &e));
        memset(&f->t[f->n], 0, sizeof f->t[0]);
        ZS_TRY(zs_sth_tensor(f->path, name, &e, data_bytes, &f->t[f->n]));
        f->n++;
        members = zs_sth_take(s, ',');
    }
    if (!empty)
        ZS_TRY(zs_sth_expect(s, '}'));
    zs_sth_ws(s);
    if (s->p != s->end)
        return zs_sth_syntax(s, "bytes after the header's object");
    return 0;
}

static int zs_sth_cmp_begin(const void *a, const void *b)
{
    const zs_st_tensor *x = *(const zs_st_tensor *const *)a, *y = *(const zs_st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x > y) - (x < y);
}

/* The data section is the tensors, whole: no overlap, no bytes between
 * them or after the last (safetensors' own rule; zerosim writes none). */
static int zs_sth_layout(zs_st_file *f)
{
    uint64_t data_bytes = f->file_bytes - f->data_start, covered = 0;
    zs_st_tensor **order = malloc(((size_t)f->n + 1) * sizeof *order);
    if (!order)
        ZS_FAIL("out of host memory reading %s", f->path);
    for (int i = 0; i < f->n; i++)
        order[i] = &f->t[i];
    qsort(order, (size_t)f->n, sizeof *order, zs_sth_cmp_begin);
    int rc = 0;
    const zs_st_tensor *last = NULL; /* the tensor that ends at covered */
    for (int i = 0; i < f->n && !rc; i++) {
        if (order[i]->begin == order[i]->end) /* empty: anywhere in the data */
            continue;
        if (order[i]->begin < covered)
            rc = zs_error_set("%s: tensors \"%s\" and \"%s\" overlap", f->path, last->name,
                              order[i]->name);
        else if (order[i]->begin > covered)
            rc = zs_error_set("%s: bytes %" PRIu64 "..%" PRIu64 " of the data are in no tensor "
                              "(a hole before \"%s\"); the file is damaged", f->path, covered,
                              order[i]->begin, order[i]->name);
        if (order[i]->end > covered) {
            covered = order[i]->end;
            last = order[i];
        }
    }
    if (!rc && covered < data_bytes)
        rc = zs_error_set("%s: %" PRIu64 " bytes after the last tensor's end (byte %" PRIu64
                          " of the data): the file is longer than its header says", f->path,
                          data_bytes - covered, covered);
    free(order);
    return rc;
}

static const char *zs_sth_name_of(const void *f, int i)
{
    return ((const zs_st_file *)f)->t[i].name;
}

static const char *zs_sth_meta_key_of(const void *f, int i)
{
    return ((const zs_st_file *)f)->meta[2 * i];
}

int zs_st_header_parse(zs_st_file *f, const char *text, size_t len)
{
    zs_sth s = {f->path, text, text, text + len, malloc(len + 1), 0};
    if (!s.scratch)
        ZS_FAIL("out of host memory reading %s", f->path);
    int rc = zs_sth_members(&s, f);
    free(s.scratch);
    int dup = -1;
    if (!rc)
        rc = zs_name_index_build(&f->by_name, f->n, zs_sth_name_of, f, &dup);
    if (!rc && dup >= 0)
        rc = zs_error_set("%s: tensor \"%s\" is named twice; the file is damaged", f->path,
                          f->t[dup].name);
    if (!rc)
        rc = zs_sth_layout(f);
    zs_name_index keys = {0};
    if (!rc)
        rc = zs_name_index_build(&keys, f->nmeta / 2, zs_sth_meta_key_of, f, &dup);
    if (!rc && dup >= 0)
        rc = zs_error_set("%s: the __metadata__ key \"%s\" is given twice; the file is damaged",
                          f->path, f->meta[2 * dup]);
    zs_name_index_free(&keys);
    return rc;
}
