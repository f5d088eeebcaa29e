/* Tests of the accounting allocator and size parsing. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "zerosim/backend.h"
#include "zerosim/error.h"
#include "zerosim/mem.h"

static zs_backend_t be;

static void setup(void)
{
    char err[256];
    be = zs_backend_init("cpu", err, sizeof err);
    ck_assert_msg(be != NULL, "cpu backend: %s", err);
}

static void teardown(void) { zs_backend_release(be); }

START_TEST(test_current_and_peak)
{
    zs_mem_t m = zs_mem_create(be, 0, 0);
    void *a, *b, *c;
    ck_assert_int_eq(zs_mem_alloc(m, ZS_MEM_PARAMS, 1000, &a), 0);
    ck_assert_int_eq(zs_mem_alloc(m, ZS_MEM_GRADS, 500, &b), 0);
    zs_mem_stats s;
    zs_mem_get_stats(m, &s);
    ck_assert_uint_eq(s.current[ZS_MEM_PARAMS], 1000);
    ck_assert_uint_eq(s.current[ZS_MEM_GRADS], 500);
    ck_assert_uint_eq(s.total_current, 1500);
    zs_mem_free(m, ZS_MEM_GRADS, b, 500);
    ck_assert_int_eq(zs_mem_alloc(m, ZS_MEM_ACTIVATIONS, 200, &c), 0);
    zs_mem_get_stats(m, &s);
    ck_assert_uint_eq(s.current[ZS_MEM_GRADS], 0);
    ck_assert_uint_eq(s.peak[ZS_MEM_GRADS], 500);
    ck_assert_uint_eq(s.total_current, 1200);
    ck_assert_uint_eq(s.total_peak, 1500);
    /* the category mix at the total peak: params + grads, no activations */
    ck_assert_uint_eq(s.at_total_peak[ZS_MEM_PARAMS], 1000);
    ck_assert_uint_eq(s.at_total_peak[ZS_MEM_GRADS], 500);
    ck_assert_uint_eq(s.at_total_peak[ZS_MEM_ACTIVATIONS], 0);
    /* memory is zero-filled and usable */
    unsigned char *p = a;
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(p[i], 0);
    memset(a, 7, 1000);
    zs_mem_free(m, ZS_MEM_PARAMS, a, 1000);
    zs_mem_free(m, ZS_MEM_ACTIVATIONS, c, 200);
    zs_mem_get_stats(m, &s);
    ck_assert_uint_eq(s.total_current, 0);
    zs_mem_destroy(m);
}
END_TEST

START_TEST(test_capacity_out_of_memory)
{
    zs_mem_t m = zs_mem_create(be, 4096, 3);
    void *a, *b;
    ck_assert_int_eq(zs_mem_alloc(m, ZS_MEM_PARAMS, 3000, &a), 0);
    ck_assert_int_ne(zs_mem_alloc(m, ZS_MEM_OPT_M, 2000, &b), 0);
    ck_assert_ptr_null(b);
    const char *msg = zs_error_msg();
    ck_assert_msg(strstr(msg, "out of memory") != NULL, "%s", msg);
    ck_assert_msg(strstr(msg, "rank 3") != NULL, "%s", msg);
    ck_assert_msg(strstr(msg, "optimizer_m asked for 2000 bytes") != NULL, "%s", msg);
    ck_assert_msg(strstr(msg, "params=3000") != NULL, "%s", msg);
    ck_assert_msg(strchr(msg, '\n') == NULL, "message must be one line: %s", msg);
    zs_mem_stats s;
    zs_mem_get_stats(m, &s);
    ck_assert_uint_eq(s.total_current, 3000); /* the failed allocation left no trace */
    /* exactly at capacity fits */
    ck_assert_int_eq(zs_mem_alloc(m, ZS_MEM_OPT_M, 1096, &b), 0);
    zs_mem_free(m, ZS_MEM_OPT_M, b, 1096);
    zs_mem_free(m, ZS_MEM_PARAMS, a, 3000);
    zs_mem_destroy(m);
}
END_TEST

/* Freed blocks of 64 KiB and more are kept and handed out again, zeroed,
 * outside the ledger and its capacity. */
START_TEST(test_block_cache)
{
    const size_t big = (size_t)8 << 20;
    unsetenv("ZEROSIM_ALLOC_CACHE");
    zs_mem_t m = zs_mem_create(be, 3 * big / 2 + 4096, 0);
    void *a, *c;
    ck_assert_int_eq(zs_mem_alloc(m, ZS_MEM_COMM_BUFFERS, big, &a), 0);
    memset(a, 0x5a, big);
    zs_mem_free(m, ZS_MEM_COMM_BUFFERS, a, big);
    zs_mem_stats s;
    zs_mem_get_stats(m, &s);
    ck_assert_uint_eq(s.total_current, 0);
#if defined(__SANITIZE_ADDRESS__)
    ck_assert_uint_eq(zs_mem_cached_bytes(m), 0); /* off, so ASan sees every free */
#else
    ck_assert_uint_eq(zs_mem_cached_bytes(m), big);
    void *b;
    ck_assert_int_eq(zs_mem_alloc(m, ZS_MEM_COMM_BUFFERS, big, &b), 0);
    ck_assert_ptr_eq(b, a); /* the same block, zero-filled again */
    ck_assert_uint_eq(zs_mem_cached_bytes(m), 0);
    const unsigned char *p = b;
    size_t nonzero = 0;
    for (size_t i = 0; i < big; i++)
        nonzero += p[i] != 0;
    ck_assert_uint_eq(nonzero, 0);
    zs_mem_free(m, ZS_MEM_COMM_BUFFERS, b, big);
    /* the threshold: 64 KiB is kept, a byte less is not */
    const size_t edge = (size_t)64 << 10;
    ck_assert_int_eq(zs_mem_alloc(m, ZS_MEM_COMM_BUFFERS, edge - 1, &b), 0);
    zs_mem_free(m, ZS_MEM_COMM_BUFFERS, b, edge - 1);
    ck_assert_uint_eq(zs_mem_cached_bytes(m), big);
    ck_assert_int_eq(zs_mem_alloc(m, ZS_MEM_COMM_BUFFERS, edge, &b), 0);
    zs_mem_free(m, ZS_MEM_COMM_BUFFERS, b, edge);
    ck_assert_uint_eq(zs_mem_cached_bytes(m), big + edge);
#endif
    /* the capacity counts the ledger: a block of another size still fits
     * beside the cached one */
    ck_assert_int_eq(zs_mem_alloc(m, ZS_MEM_GRADS, 3 * big / 2, &c), 0);
    zs_mem_get_stats(m, &s);
    ck_assert_uint_eq(s.total_current, 3 * big / 2);
    zs_mem_free(m, ZS_MEM_GRADS, c, 3 * big / 2);
    zs_mem_destroy(m); /* frees what the cache holds (valgrind, LSan) */

    setenv("ZEROSIM_ALLOC_CACHE", "off", 1);
    m = zs_mem_create(be, 0, 0);
    ck_assert_int_eq(zs_mem_alloc(m, ZS_MEM_COMM_BUFFERS, big, &a), 0);
    zs_mem_free(m, ZS_MEM_COMM_BUFFERS, a, big);
    ck_assert_uint_eq(zs_mem_cached_bytes(m), 0);
    zs_mem_destroy(m);
    unsetenv("ZEROSIM_ALLOC_CACHE");
}
END_TEST

START_TEST(test_category_names)
{
    ck_assert_str_eq(zs_mem_category_name(ZS_MEM_PARAMS), "params");
    ck_assert_str_eq(zs_mem_category_name(ZS_MEM_WORKSPACE), "workspace");
    ck_assert_str_eq(zs_mem_category_group(ZS_MEM_OPT_MASTER), "optimizer");
    ck_assert_str_eq(zs_mem_category_group(ZS_MEM_OPT_V), "optimizer");
    ck_assert_str_eq(zs_mem_category_group(ZS_MEM_CHECKPOINTS), "checkpoints");
}
END_TEST

START_TEST(test_parse_size)
{
    size_t b;
    ck_assert_int_eq(zs_parse_size("123", &b), 0);
    ck_assert_uint_eq(b, 123);
    ck_assert_int_eq(zs_parse_size("4KiB", &b), 0);
    ck_assert_uint_eq(b, 4096);
    ck_assert_int_eq(zs_parse_size("1.5GiB", &b), 0);
    ck_assert_uint_eq(b, 1610612736ULL);
    ck_assert_int_eq(zs_parse_size("2GB", &b), 0);
    ck_assert_uint_eq(b, 2000000000ULL);
    ck_assert_int_eq(zs_parse_size("512MiB", &b), 0);
    ck_assert_uint_eq(b, 536870912ULL);
    ck_assert_int_eq(zs_parse_size("3MB", &b), 0);
    ck_assert_uint_eq(b, 3000000ULL);
    ck_assert_int_ne(zs_parse_size("", &b), 0);
    ck_assert_int_ne(zs_parse_size("abc", &b), 0);
    ck_assert_int_ne(zs_parse_size("-5", &b), 0);
    ck_assert_int_ne(zs_parse_size("5 furlongs", &b), 0);
    ck_assert_msg(strstr(zs_error_msg(), "furlongs") != NULL, "%s", zs_error_msg());
    ck_assert_int_ne(zs_parse_size("1.5", &b), 0);
    ck_assert_int_ne(zs_parse_size("1e30GB", &b), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mem");
    TCase *tc = tcase_create("allocator");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_current_and_peak);
    tcase_add_test(tc, test_capacity_out_of_memory);
    tcase_add_test(tc, test_block_cache);
    tcase_add_test(tc, test_category_names);
    tcase_add_test(tc, test_parse_size);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
