/* zerosim — canonical Huffman codes and bit streams (see zerosim/huffman.h). */
#include "zerosim/huffman.h"
#include "zerosim/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t f;
    int sym;
} zs_hsym;

static int zs_hsym_cmp(const void *a, const void *b)
{
    const zs_hsym *x = a, *y = b;
    if (x->f != y->f)
        return x->f < y->f ? -1 : 1;
    return x->sym - y->sym;
}

/* Huffman's algorithm with two queues over the sorted leaves; depth of
 * each leaf into len. Returns the largest depth, -1 out of memory. */
static int zs_huff_depths(const uint64_t *freq, int n, uint8_t *len)
{
    int m = 0;
    if (n <= 0)
        return 0;
    for (int i = 0; i < n; i++)
        m += freq[i] > 0;
    memset(len, 0, (size_t)n);
    if (m == 0)
        return 0;
    zs_hsym *leaf = malloc((size_t)m * sizeof *leaf);
    uint64_t *w = malloc((size_t)(2 * m) * sizeof *w);
    int *parent = malloc((size_t)(2 * m) * sizeof *parent);
    int *depth = malloc((size_t)(2 * m) * sizeof *depth);
    if (!leaf || !w || !parent || !depth) {
        free(leaf), free(w), free(parent), free(depth);
        return -1;
    }
    for (int i = 0, k = 0; i < n; i++)
        if (freq[i])
            leaf[k++] = (zs_hsym){freq[i], i};
    qsort(leaf, (size_t)m, sizeof *leaf, zs_hsym_cmp);
    int maxd = 1;
    if (m == 1) {
        len[leaf[0].sym] = 1;
    } else {
        /* nodes 0..m-1 leaves (sorted), m.. internal in creation order */
        for (int i = 0; i < m; i++)
            w[i] = leaf[i].f;
        int li = 0, ii = m, next = m;
        while (next < 2 * m - 1) {
            int pick[2];
            for (int k = 0; k < 2; k++) {
                if (li < m && (ii >= next || w[li] <= w[ii]))
                    pick[k] = li++;
                else
                    pick[k] = ii++;
            }
            w[next] = w[pick[0]] + w[pick[1]];
            parent[pick[0]] = parent[pick[1]] = next;
            next++;
        }
        depth[2 * m - 2] = 0;
        for (int i = 2 * m - 3; i >= 0; i--)
            depth[i] = depth[parent[i]] + 1;
        maxd = 0;
        for (int i = 0; i < m; i++) {
            len[leaf[i].sym] = (uint8_t)(depth[i] > 255 ? 255 : depth[i]);
            if (depth[i] > maxd)
                maxd = depth[i];
        }
    }
    free(leaf), free(w), free(parent), free(depth);
    return maxd;
}

int zs_huff_lengths(const uint64_t *freq, int n, uint8_t *len)
{
    uint64_t *f = malloc((size_t)n * sizeof *f + 1);
    if (!f)
        ZS_FAIL("out of host memory building a Huffman code");
    memcpy(f, freq, (size_t)n * sizeof *f);
    for (;;) { /* too deep: flatten the frequencies (nonzero stay nonzero) */
        int d = zs_huff_depths(f, n, len);
        if (d < 0) {
            free(f);
            ZS_FAIL("out of host memory building a Huffman code");
        }
        if (d <= ZS_HUFF_MAX_LEN)
            break;
        for (int i = 0; i < n; i++)
            if (f[i])
                f[i] = f[i] / 2 + 1;
    }
    free(f);
    return 0;
}

uint64_t zs_huff_bits(const uint64_t *freq, const uint8_t *len, int n)
{
    uint64_t b = 0;
    for (int i = 0; i < n; i++)
        b += freq[i] * len[i];
    return b;
}

void zs_huff_free(zs_huff *h)
{
    free(h->len);
    free(h->code);
    free(h->sorted);
    memset(h, 0, sizeof *h);
}

int zs_huff_build(zs_huff *h, const uint8_t *len, int n)
{
    memset(h, 0, sizeof *h);
    h->n = n;
    h->len = malloc((size_t)n + 1);
    h->code = malloc((size_t)n * sizeof *h->code + 1);
    h->sorted = malloc((size_t)n * sizeof *h->sorted + 1);
    if (!h->len || !h->code || !h->sorted) {
        zs_huff_free(h);
        ZS_FAIL("out of host memory building a Huffman code");
    }
    memcpy(h->len, len, (size_t)n);
    uint64_t kraft = 0; /* in units of 2^-MAX */
    for (int i = 0; i < n; i++) {
        if (len[i] > ZS_HUFF_MAX_LEN) {
            zs_huff_free(h);
            ZS_FAIL("a Huffman code length of %d bits (at most %d)", len[i], ZS_HUFF_MAX_LEN);
        }
        if (len[i]) {
            h->count[len[i]]++;
            kraft += (uint64_t)1 << (ZS_HUFF_MAX_LEN - len[i]);
        }
    }
    if (kraft > ((uint64_t)1 << ZS_HUFF_MAX_LEN)) {
        zs_huff_free(h);
        ZS_FAIL("Huffman code lengths that no prefix code has (Kraft sum above 1)");
    }
    uint32_t code = 0;
    int pos = 0;
    for (int L = 1; L <= ZS_HUFF_MAX_LEN; L++) {
        code = (code + (uint32_t)h->count[L - 1]) << 1;
        if (L == 1)
            code = 0;
        h->first[L] = code;
        h->start[L] = pos;
        for (int i = 0; i < n; i++)
            if (len[i] == L) {
                h->code[i] = code + (uint32_t)(pos - h->start[L]);
                h->sorted[pos++] = i;
            }
    }
    return 0;
}

static int zs_bitw_put(zs_bitw *w, uint32_t v, int nbits)
{
    if ((w->nbits + (size_t)nbits + 7) / 8 > w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 256;
        uint8_t *b = realloc(w->buf, cap);
        if (!b)
            ZS_FAIL("out of host memory writing a Huffman stream");
        memset(b + w->cap, 0, cap - w->cap);
        w->buf = b;
        w->cap = cap;
    }
    for (int k = nbits - 1; k >= 0; k--, w->nbits++)
        if ((v >> k) & 1)
            w->buf[w->nbits / 8] |= (uint8_t)(0x80 >> (w->nbits % 8));
    return 0;
}

int zs_huff_put(zs_bitw *w, const zs_huff *h, int sym)
{
    if (sym < 0 || sym >= h->n || !h->len[sym])
        ZS_FAIL("internal: symbol %d has no Huffman code", sym);
    return zs_bitw_put(w, h->code[sym], h->len[sym]);
}

int zs_huff_get(zs_bitr *r, const zs_huff *h)
{
    uint32_t code = 0;
    for (int L = 1; L <= ZS_HUFF_MAX_LEN; L++) {
        if (r->pos >= r->nbits)
            return -1;
        code = (code << 1) | ((r->buf[r->pos / 8] >> (7 - r->pos % 8)) & 1);
        r->pos++;
        if (h->count[L] && code - h->first[L] < (uint32_t)h->count[L] && code >= h->first[L])
            return h->sorted[h->start[L] + (int)(code - h->first[L])];
    }
    return -1;
}

void zs_bitw_free(zs_bitw *w)
{
    free(w->buf);
    memset(w, 0, sizeof *w);
}
