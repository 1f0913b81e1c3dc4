/* The hand-written codec against protobuf-c's generated code, which is the
 * reference for the wire contract. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ratelimit.pb-c.h"
#include "rl_buf.h"
#include "rl_error.h"
#include "rl_msg.h"
#include "rl_validate.h"

static unsigned seed = 4242;

/* Random values that hit every varint length and zero (omitted) often. */
static uint64_t rnd_u64(void)
{
    int bits = rand_r(&seed) % 66;
    uint64_t v = (uint64_t)rand_r(&seed) << 33 ^ (uint64_t)rand_r(&seed) << 11 ^
                 (uint64_t)rand_r(&seed);

    if (bits == 0)
        return 0;
    return bits >= 64 ? v : v & ((UINT64_C(1) << bits) - 1);
}

static void rnd_str(char *dst, size_t max, size_t *len)
{
    size_t i;

    *len = (size_t)rand_r(&seed) % (max + 1);
    if (rand_r(&seed) % 4 == 0)
        *len = 0;
    for (i = 0; i < *len; i++)
        dst[i] = (char)('a' + rand_r(&seed) % 26);
    dst[*len] = '\0';
}

static void test_check_matches_protobuf_c(void **state)
{
    char key[600], rule[200], hnd[RL_HANDLE_MAX + 1];
    uint8_t ours[2048], theirs[2048];
    int i;

    (void)state;
    for (i = 0; i < 20000; i++) {
        Ratelimit__V1__CheckRequest pc = RATELIMIT__V1__CHECK_REQUEST__INIT;
        rl_check_t c = {0}, back;

        c.id = rnd_u64();
        rnd_str(key, 520, &c.key_len);
        c.key = key;
        c.cost = (uint32_t)rnd_u64();
        c.limit = rnd_u64();
        c.window_s = (uint32_t)rnd_u64();
        rnd_str(rule, 130, &c.rule_len);
        c.rule = rule;
        c.op = (uint32_t)(rnd_u64() % (RL_OP_MAX + 1));
        rnd_str(hnd, RL_HANDLE_MAX, &c.handle_len);
        c.handle = (const uint8_t *)hnd;
        c.actual = rnd_u64();

        pc.op = (Ratelimit__V1__CheckRequest__Op)c.op;
        pc.handle.data = (uint8_t *)hnd;
        pc.handle.len = c.handle_len;
        pc.actual = c.actual;
        pc.id = c.id;
        pc.key = key;
        pc.cost = c.cost;
        pc.limit = c.limit;
        pc.window_seconds = c.window_s;
        pc.rule = rule;

        size_t n = rl_check_size(&c);
        assert_int_equal(n, ratelimit__v1__check_request__get_packed_size(&pc));
        assert_int_equal(rl_check_encode(&c, ours), n);
        assert_int_equal(ratelimit__v1__check_request__pack(&pc, theirs), n);
        assert_memory_equal(ours, theirs, n);

        assert_int_equal(rl_check_decode(theirs, n, &back), RL_OK);
        assert_int_equal(back.id, c.id);
        assert_int_equal(back.key_len, c.key_len);
        if (c.key_len)
            assert_memory_equal(back.key, key, c.key_len);
        assert_int_equal(back.cost, c.cost);
        assert_int_equal(back.limit, c.limit);
        assert_int_equal(back.window_s, c.window_s);
        assert_int_equal(back.rule_len, c.rule_len);
        assert_int_equal(back.op, c.op);
        assert_int_equal(back.handle_len, c.handle_len);
        if (c.handle_len)
            assert_memory_equal(back.handle, hnd, c.handle_len);
        assert_int_equal(back.actual, c.actual);
    }
}

static void test_result_matches_protobuf_c(void **state)
{
    char err[300], hnd[RL_HANDLE_MAX + 1];
    uint8_t ours[2048], theirs[2048];
    int i;

    (void)state;
    for (i = 0; i < 20000; i++) {
        Ratelimit__V1__CheckResponse pc = RATELIMIT__V1__CHECK_RESPONSE__INIT;
        Ratelimit__V1__CheckResponse *up;
        rl_result_t r = {0}, back;

        r.id = rnd_u64();
        r.code = rand_r(&seed) % 4;
        r.limit = rnd_u64();
        r.used = rnd_u64();
        r.remaining = rnd_u64();
        r.reset_after_ms = rnd_u64();
        r.retry_after_ms = rnd_u64();
        rnd_str(err, 250, &r.error_len);
        r.error = err;
        r.notice = rand_r(&seed) % 3;
        rnd_str(hnd, RL_HANDLE_MAX, &r.handle_len);
        r.handle = (const uint8_t *)hnd;
        r.expires_at_ms = rnd_u64();
        r.failed_open = rand_r(&seed) % 2;

        pc.handle.data = (uint8_t *)hnd;
        pc.handle.len = r.handle_len;
        pc.expires_at_ms = r.expires_at_ms;
        pc.failed_open = r.failed_open;
        pc.id = r.id;
        pc.code = (Ratelimit__V1__CheckResponse__Code)r.code;
        pc.limit = r.limit;
        pc.used = r.used;
        pc.remaining = r.remaining;
        pc.reset_after_ms = r.reset_after_ms;
        pc.retry_after_ms = r.retry_after_ms;
        pc.error = err;
        pc.notice = (Ratelimit__V1__CheckResponse__Notice)r.notice;

        size_t n = rl_result_size(&r);
        assert_int_equal(n,
                         ratelimit__v1__check_response__get_packed_size(&pc));
        assert_int_equal(rl_result_encode(&r, ours), n);
        assert_int_equal(ratelimit__v1__check_response__pack(&pc, theirs), n);
        assert_memory_equal(ours, theirs, n);

        /* and protobuf-c reads what we wrote */
        up = ratelimit__v1__check_response__unpack(NULL, n, ours);
        assert_non_null(up);
        assert_int_equal(up->id, r.id);
        assert_int_equal(up->code, r.code);
        assert_int_equal(up->remaining, r.remaining);
        assert_string_equal(up->error, err);
        assert_int_equal(up->notice, r.notice);
        ratelimit__v1__check_response__free_unpacked(up, NULL);

        assert_int_equal(rl_result_decode(ours, n, &back), RL_OK);
        assert_int_equal(back.id, r.id);
        assert_int_equal(back.code, r.code);
        assert_int_equal(back.limit, r.limit);
        assert_int_equal(back.used, r.used);
        assert_int_equal(back.remaining, r.remaining);
        assert_int_equal(back.reset_after_ms, r.reset_after_ms);
        assert_int_equal(back.retry_after_ms, r.retry_after_ms);
        assert_int_equal(back.error_len, r.error_len);
        assert_int_equal(back.notice, r.notice);
        assert_int_equal(back.handle_len, r.handle_len);
        if (r.handle_len)
            assert_memory_equal(back.handle, hnd, r.handle_len);
        assert_int_equal(back.expires_at_ms, r.expires_at_ms);
        assert_int_equal(back.failed_open, r.failed_open);
    }
}

/* Levels (CheckRequest field 20, CheckResponse field 20): byte for byte
 * what protobuf-c writes, read back whole; a ninth level is counted and
 * not kept (validation refuses it), and a level's unknown field is
 * skipped. */
static void test_levels_match_protobuf_c(void **state)
{
    char keys[RL_LEVELS_MAX][40], rules[RL_LEVELS_MAX][40];
    uint8_t ours[2048], theirs[2048];
    int i;

    (void)state;
    for (i = 0; i < 5000; i++) {
        Ratelimit__V1__CheckRequest pc = RATELIMIT__V1__CHECK_REQUEST__INIT;
        Ratelimit__V1__CheckRequest__Level lv[RL_LEVELS_MAX + 1],
            *lp[RL_LEVELS_MAX + 1];
        Ratelimit__V1__CheckResponse pr = RATELIMIT__V1__CHECK_RESPONSE__INIT;
        rl_check_t c = {0}, back;
        rl_result_t r = {0}, rback;
        uint32_t j, nl = 1 + (uint32_t)(rnd_u64() % RL_LEVELS_MAX);
        size_t n;

        c.id = rnd_u64();
        c.cost = (uint32_t)rnd_u64();
        c.nlevels = nl;
        for (j = 0; j < nl; j++) {
            ratelimit__v1__check_request__level__init(&lv[j]);
            rnd_str(keys[j], 30, &c.levels[j].key_len);
            rnd_str(rules[j], 30, &c.levels[j].rule_len);
            c.levels[j].key = keys[j];
            c.levels[j].rule = rules[j];
            lv[j].key = keys[j];
            lv[j].rule = rules[j];
            lp[j] = &lv[j];
        }
        pc.id = c.id;
        pc.cost = c.cost;
        pc.n_levels = nl;
        pc.levels = lp;
        n = rl_check_size(&c);
        assert_int_equal(n, ratelimit__v1__check_request__get_packed_size(&pc));
        assert_int_equal(rl_check_encode(&c, ours), n);
        assert_int_equal(ratelimit__v1__check_request__pack(&pc, theirs), n);
        assert_memory_equal(ours, theirs, n);
        assert_int_equal(rl_check_decode(theirs, n, &back), RL_OK);
        assert_int_equal(back.nlevels, nl);
        for (j = 0; j < nl; j++) {
            assert_int_equal(back.levels[j].key_len, c.levels[j].key_len);
            assert_int_equal(back.levels[j].rule_len, c.levels[j].rule_len);
            if (c.levels[j].key_len)
                assert_memory_equal(back.levels[j].key, keys[j],
                                    c.levels[j].key_len);
            if (c.levels[j].rule_len)
                assert_memory_equal(back.levels[j].rule, rules[j],
                                    c.levels[j].rule_len);
        }

        r.id = c.id;
        r.level = (uint32_t)rnd_u64();
        pr.id = r.id;
        pr.level = r.level;
        n = rl_result_size(&r);
        assert_int_equal(n,
                         ratelimit__v1__check_response__get_packed_size(&pr));
        assert_int_equal(rl_result_encode(&r, ours), n);
        assert_int_equal(ratelimit__v1__check_response__pack(&pr, theirs), n);
        assert_memory_equal(ours, theirs, n);
        assert_int_equal(rl_result_decode(theirs, n, &rback), RL_OK);
        assert_int_equal(rback.level, r.level);
    }
    {
        /* Nine levels: eight kept, nine counted, and never more. */
        Ratelimit__V1__CheckRequest pc = RATELIMIT__V1__CHECK_REQUEST__INIT;
        Ratelimit__V1__CheckRequest__Level lv[RL_LEVELS_MAX + 3],
            *lp[RL_LEVELS_MAX + 3];
        rl_check_t back;
        size_t n;
        uint32_t j;
        for (j = 0; j < RL_LEVELS_MAX + 3; j++) {
            ratelimit__v1__check_request__level__init(&lv[j]);
            lv[j].key = "k";
            lv[j].rule = "r";
            lp[j] = &lv[j];
        }
        pc.n_levels = RL_LEVELS_MAX + 3;
        pc.levels = lp;
        n = ratelimit__v1__check_request__pack(&pc, theirs);
        assert_int_equal(rl_check_decode(theirs, n, &back), RL_OK);
        assert_int_equal(back.nlevels, RL_LEVELS_MAX + 1);
        assert_int_equal(rl_check_validate(&back), RL_ELEVELS);
    }
    {
        /* A level's unknown field (3, a varint) is skipped; a known one
         * of the wrong wire type is not. */
        static const uint8_t ok[] = {0xa2, 0x01, 0x08, 0x0a, 0x01, 'k',
                                     0x12, 0x01, 'r',  0x18, 0x05};
        static const uint8_t bad[] = {0xa2, 0x01, 0x02, 0x08, 0x01};
        rl_check_t back;
        assert_int_equal(rl_check_decode(ok, sizeof(ok), &back), RL_OK);
        assert_int_equal(back.nlevels, 1);
        assert_int_equal(back.levels[0].key_len, 1);
        assert_int_equal(back.levels[0].rule_len, 1);
        assert_int_equal(rl_check_decode(bad, sizeof(bad), &back), RL_EDECODE);
    }
}

/* rl_result_put's one-pass path must count the handle: a buffer with just
 * the room the fixed fields and the error need, plus not the handle, takes
 * the exact path (or is refused) and never writes past its end. */
static void test_result_put_counts_handle(void **state)
{
    uint8_t hnd[RL_HANDLE_MAX];
    size_t room;

    (void)state;
    memset(hnd, 0xab, sizeof(hnd));
    for (room = 100; room < 900; room += 7) {
        rl_buf_t b;
        rl_result_t r = {0}, back;

        r.id = UINT64_MAX;
        r.code = RL_CODE_OK;
        r.limit = r.used = r.remaining = UINT64_MAX;
        r.reset_after_ms = r.retry_after_ms = UINT64_MAX;
        r.decided_at_ms = r.expires_at_ms = UINT64_MAX;
        r.handle = hnd;
        r.handle_len = sizeof(hnd);
        r.failed_open = 1;
        uint8_t *w;

        /* Exactly room bytes allocated (the cap stops the growth). */
        rl_buf_init(&b, room);
        assert_int_equal(rl_buf_reserve(&b, room, &w), RL_OK);
        if (rl_result_put(&b, &r) == RL_OK) {
            assert_true(rl_buf_len(&b) <= room);
            assert_int_equal(rl_result_take(&b, 1u << 20, &back), RL_OK);
            assert_int_equal(back.handle_len, sizeof(hnd));
            assert_memory_equal(back.handle, hnd, sizeof(hnd));
        }
        rl_buf_free(&b);
    }
}

/* GOAWAY is told by its notice field: the same text without the field
 * (another notice, or a server older than the field) is not GOAWAY, and
 * the field with an id is not a notice. */
static void test_goaway_by_notice(void **state)
{
    rl_buf_t b;
    rl_result_t r;

    (void)state;
    assert_int_equal(rl_goaway_notice.error_len,
                     strlen(rl_strerror(RL_ESHUTDOWN)));
    assert_memory_equal(rl_goaway_notice.error, rl_strerror(RL_ESHUTDOWN),
                        rl_goaway_notice.error_len);

    rl_buf_init(&b, 1024);
    assert_int_equal(rl_result_put(&b, &rl_goaway_notice), RL_OK);
    assert_int_equal(rl_result_take(&b, 1024, &r), RL_OK);
    assert_int_equal(rl_buf_len(&b), 0);
    assert_true(rl_result_is_goaway(&r));

    r = rl_goaway_notice;
    r.notice = RL_NOTICE_NONE;
    assert_false(rl_result_is_goaway(&r));
    r = rl_goaway_notice;
    r.id = 7;
    assert_false(rl_result_is_goaway(&r));
    r = rl_goaway_notice;
    r.code = RL_CODE_OK;
    assert_false(rl_result_is_goaway(&r));
    r = rl_goaway_notice;
    r.error = "other";
    r.error_len = 5;
    assert_true(rl_result_is_goaway(&r));
    rl_buf_free(&b);
}

/* rl_result_take: whole responses one by one, RL_EAGAIN on a partial
 * frame (nothing consumed), errors without consuming. */
static void test_result_take(void **state)
{
    rl_buf_t b;
    rl_result_t a = {0}, r;
    size_t i, whole;

    (void)state;
    rl_buf_init(&b, 4096);
    a.id = 1;
    a.code = RL_CODE_OK;
    a.limit = 10;
    assert_int_equal(rl_result_put(&b, &a), RL_OK);
    a.id = 2;
    a.error = "why";
    a.error_len = 3;
    assert_int_equal(rl_result_put(&b, &a), RL_OK);
    whole = rl_buf_len(&b);

    /* Every split of the second frame: the first is taken, the second
     * waits. */
    for (i = 0; i < whole; i++) {
        rl_buf_t part;
        rl_buf_init(&part, 4096);
        assert_int_equal(rl_buf_append(&part, rl_buf_rptr(&b), i), RL_OK);
        int got = 0, rc;
        while ((rc = rl_result_take(&part, 1024, &r)) == RL_OK)
            assert_int_equal(r.id, (uint64_t)++got);
        assert_int_equal(rc, RL_EAGAIN);
        assert_true(got < 2);
        rl_buf_free(&part);
    }
    assert_int_equal(rl_result_take(&b, 1024, &r), RL_OK);
    assert_int_equal(r.id, 1);
    assert_int_equal(r.limit, 10);
    assert_int_equal(rl_result_take(&b, 1024, &r), RL_OK);
    assert_int_equal(r.id, 2);
    assert_int_equal(r.error_len, 3);
    assert_memory_equal(r.error, "why", 3);
    assert_int_equal(rl_buf_len(&b), 0);
    assert_int_equal(rl_result_take(&b, 1024, &r), RL_EAGAIN);

    /* Over the size cap, a bad flag, a payload that does not decode:
     * errors, and the bytes are left where they were. */
    assert_int_equal(rl_result_put(&b, &a), RL_OK);
    i = rl_buf_len(&b);
    assert_int_equal(rl_result_take(&b, 4, &r), RL_EFRAMESIZE);
    assert_int_equal(rl_buf_len(&b), i);
    rl_buf_reset(&b);
    assert_int_equal(rl_buf_append(&b, "\x01\0\0\0\0", 5), RL_OK);
    assert_int_equal(rl_result_take(&b, 1024, &r), RL_EFRAMEFLAG);
    assert_int_equal(rl_buf_len(&b), 5);
    rl_buf_reset(&b);
    assert_int_equal(rl_buf_append(&b, "\0\0\0\0\1\x07", 6), RL_OK);
    assert_int_equal(rl_result_take(&b, 1024, &r), RL_EDECODE);
    assert_int_equal(rl_buf_len(&b), 6);
    rl_buf_free(&b);
}

/* Fields this version does not know (a newer client's) are skipped. */
static void test_unknown_fields_skipped(void **state)
{
    const uint8_t p[] = {
        0x08, 0x07,                               /* id = 7 */
        0x48, 0x96, 0x01,                         /* 9: varint 150 */
        0x12, 0x01, 'k',                          /* key = "k" */
        0x52, 0x03, 'x', 'y', 'z',                /* 10: bytes */
        0x59, 1, 2, 3, 4, 5, 6, 7, 8,             /* 11: fixed64 */
        0x65, 1, 2, 3, 4,                         /* 12: fixed32 */
        0x20, 0x05,                               /* limit = 5 */
        0x28, 0x3c,                               /* window = 60 */
        0x80, 0x80, 0x04, 0x01,                   /* field 8192: varint 1 */
    };
    rl_check_t c;

    (void)state;
    assert_int_equal(rl_check_decode(p, sizeof(p), &c), RL_OK);
    assert_int_equal(c.id, 7);
    assert_int_equal(c.key_len, 1);
    assert_int_equal(c.key[0], 'k');
    assert_int_equal(c.limit, 5);
    assert_int_equal(c.window_s, 60);
}

/* The last occurrence of a scalar field wins, as in every protobuf
 * implementation. */
static void test_last_value_wins(void **state)
{
    const uint8_t p[] = {0x08, 0x01, 0x08, 0x02, 0x12, 0x01, 'a',
                         0x12, 0x02, 'b', 'c'};
    rl_check_t c;

    (void)state;
    assert_int_equal(rl_check_decode(p, sizeof(p), &c), RL_OK);
    assert_int_equal(c.id, 2);
    assert_int_equal(c.key_len, 2);
    assert_memory_equal(c.key, "bc", 2);
}

static void test_malformed(void **state)
{
    rl_check_t c;
    rl_result_t r;
    const uint8_t overlong[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                0xff, 0xff, 0xff, 0xff, 0x01};
    const uint8_t trunc_varint[] = {0x08, 0x80};
    const uint8_t trunc_len[] = {0x12, 0x05, 'a', 'b'};
    const uint8_t huge_len[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0x0f, 'a'};
    const uint8_t key_as_varint[] = {0x10, 0x01};
    const uint8_t id_as_bytes[] = {0x0a, 0x01, 'a'};
    const uint8_t group[] = {0x1b, 0x1c};
    const uint8_t field_zero[] = {0x00, 0x01};
    const uint8_t wt7[] = {0x0f, 0x01};
    const uint8_t trunc_fixed[] = {0x59, 1, 2, 3};
    const uint8_t code_as_bytes[] = {0x12, 0x01, 'a'};

    (void)state;
#define BAD(arr) assert_int_equal(rl_check_decode(arr, sizeof(arr), &c), \
                                  RL_EDECODE)
    BAD(overlong);
    BAD(trunc_varint);
    BAD(trunc_len);
    BAD(huge_len);
    BAD(key_as_varint);
    BAD(id_as_bytes);
    BAD(group);
    BAD(field_zero);
    BAD(wt7);
    BAD(trunc_fixed);
#undef BAD
    assert_int_equal(
        rl_result_decode(code_as_bytes, sizeof(code_as_bytes), &r),
        RL_EDECODE);
}

/* A NUL inside the key is kept with its exact length (protobuf-c's char *
 * would silently cut it), so validation can refuse it. */
static void test_nul_in_key_is_visible(void **state)
{
    const uint8_t p[] = {0x12, 0x03, 'a', 0x00, 'b'};
    rl_check_t c;

    (void)state;
    assert_int_equal(rl_check_decode(p, sizeof(p), &c), RL_OK);
    assert_int_equal(c.key_len, 3);
    assert_int_equal(c.key[1], '\0');
}

/* Random bytes: whenever protobuf-c accepts a message, we accept it too and
 * read the same values. (We may accept more: keys are bytes to us, where
 * protobuf-c may insist on UTF-8.) */
static void test_random_bytes_agree(void **state)
{
    uint8_t p[48];
    int i;
    size_t k;

    (void)state;
    for (i = 0; i < 200000; i++) {
        size_t n = (size_t)(rand_r(&seed) % (int)sizeof(p));
        rl_check_t c;
        Ratelimit__V1__CheckRequest *pc;

        for (k = 0; k < n; k++)
            p[k] = (uint8_t)(rand_r(&seed) % 4 ? rand_r(&seed) % 0x40
                                               : rand_r(&seed));
        int rc = rl_check_decode(p, n, &c);
        assert_true(rc == RL_OK || rc == RL_EDECODE);
        pc = ratelimit__v1__check_request__unpack(NULL, n, p);
        if (pc == NULL)
            continue;
        assert_int_equal(rc, RL_OK);
        assert_int_equal(c.id, pc->id);
        assert_int_equal(c.cost, pc->cost);
        assert_int_equal(c.limit, pc->limit);
        assert_int_equal(c.window_s, pc->window_seconds);
        assert_true(strlen(pc->key) <= c.key_len);
        assert_memory_equal(c.key ? c.key : "", pc->key, strlen(pc->key));
        ratelimit__v1__check_request__free_unpacked(pc, NULL);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_matches_protobuf_c),
        cmocka_unit_test(test_result_matches_protobuf_c),
        cmocka_unit_test(test_levels_match_protobuf_c),
        cmocka_unit_test(test_result_put_counts_handle),
        cmocka_unit_test(test_goaway_by_notice),
        cmocka_unit_test(test_result_take),
        cmocka_unit_test(test_unknown_fields_skipped),
        cmocka_unit_test(test_last_value_wins),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_nul_in_key_is_visible),
        cmocka_unit_test(test_random_bytes_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
