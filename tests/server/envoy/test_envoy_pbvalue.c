/* envoy/pbvalue.c: what it builds packs as the Struct it describes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "envoy/pbvalue.h"

typedef Google__Protobuf__Struct gstruct_t;
typedef Google__Protobuf__Value gvalue_t;

/* Packs st and reads it back with protobuf-c's own decoder. */
static gstruct_t *round_trip(const gstruct_t *st)
{
    size_t n = google__protobuf__struct__get_packed_size(st);
    uint8_t *buf = malloc(n ? n : 1);
    gstruct_t *u;

    assert_non_null(buf);
    assert_int_equal(google__protobuf__struct__pack(st, buf), n);
    u = google__protobuf__struct__unpack(NULL, n, buf);
    free(buf);
    assert_non_null(u);
    return u;
}

/* Every kind of value, nested, comes back as built and in order. */
static void test_kinds(void **state)
{
    rls_pbv_t pb;
    gstruct_t *st, *u;
    gvalue_t *inner, *list;
    char key[16];

    (void)state;
    rls_pbv_init(&pb);
    st = rls_pbv_struct_new(&pb);
    inner = rls_pbv_struct(&pb);
    list = rls_pbv_list(&pb);
    assert_non_null(st);
    assert_non_null(inner);
    assert_non_null(list);
    rls_pbv_set(&pb, st, "null", rls_pbv_null(&pb));
    rls_pbv_set(&pb, st, "yes", rls_pbv_bool(&pb, 7));
    rls_pbv_set(&pb, st, "half", rls_pbv_number(&pb, 0.5));
    snprintf(key, sizeof(key), "copied");
    rls_pbv_set(&pb, st, rls_pbv_strdup(&pb, key, 3),
                rls_pbv_string(&pb, rls_pbv_strdup(&pb, "text!", 4)));
    memset(key, 'x', sizeof(key)); /* the pool's copies do not change */
    rls_pbv_set(&pb, inner->struct_value, "deep", rls_pbv_string(&pb, "d"));
    rls_pbv_set(&pb, st, "inner", inner);
    rls_pbv_push(&pb, list->list_value, rls_pbv_number(&pb, 1));
    rls_pbv_push(&pb, list->list_value,
                 rls_pbv_value_of(&pb, rls_pbv_struct_new(&pb)));
    rls_pbv_set(&pb, st, "list", list);
    /* NULL adds nothing */
    rls_pbv_set(&pb, st, "none", NULL);
    rls_pbv_push(&pb, list->list_value, NULL);
    assert_false(pb.nomem);
    assert_int_equal(st->n_fields, 6);
    assert_int_equal(list->list_value->n_values, 2);
    u = round_trip(st);
    assert_int_equal(u->n_fields, 6);
    assert_string_equal(u->fields[0]->key, "null");
    assert_int_equal(u->fields[0]->value->kind_case,
                     GOOGLE__PROTOBUF__VALUE__KIND_NULL_VALUE);
    assert_string_equal(u->fields[1]->key, "yes");
    assert_int_equal(u->fields[1]->value->kind_case,
                     GOOGLE__PROTOBUF__VALUE__KIND_BOOL_VALUE);
    assert_int_equal(u->fields[1]->value->bool_value, 1);
    assert_string_equal(u->fields[2]->key, "half");
    assert_true(u->fields[2]->value->number_value == 0.5);
    assert_string_equal(u->fields[3]->key, "cop");
    assert_string_equal(u->fields[3]->value->string_value, "text");
    assert_string_equal(u->fields[4]->key, "inner");
    assert_int_equal(u->fields[4]->value->kind_case,
                     GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);
    assert_int_equal(u->fields[4]->value->struct_value->n_fields, 1);
    assert_string_equal(u->fields[4]->value->struct_value->fields[0]->key,
                        "deep");
    assert_string_equal(u->fields[5]->key, "list");
    assert_int_equal(u->fields[5]->value->list_value->n_values, 2);
    assert_true(u->fields[5]->value->list_value->values[0]->number_value == 1);
    assert_int_equal(u->fields[5]->value->list_value->values[1]->kind_case,
                     GOOGLE__PROTOBUF__VALUE__KIND_STRUCT_VALUE);
    google__protobuf__struct__free_unpacked(u, NULL);
    rls_pbv_free(&pb);
    assert_int_equal(pb.n, 0);
}

/* Fields and items past every power of two up to 1,000 keep their order
 * (the arrays are regrown from the pool). */
static void test_many(void **state)
{
    rls_pbv_t pb;
    gstruct_t *st, *u;
    gvalue_t *list;
    char key[16];
    size_t i;

    (void)state;
    rls_pbv_init(&pb);
    st = rls_pbv_struct_new(&pb);
    list = rls_pbv_list(&pb);
    for (i = 0; i < 1000; i++) {
        int n = snprintf(key, sizeof(key), "k%zu", i);
        rls_pbv_set(&pb, st, rls_pbv_strdup(&pb, key, (size_t)n),
                    rls_pbv_number(&pb, (double)i));
        rls_pbv_push(&pb, list->list_value, rls_pbv_number(&pb, (double)i));
    }
    rls_pbv_set(&pb, st, "list", list);
    assert_false(pb.nomem);
    u = round_trip(st);
    assert_int_equal(u->n_fields, 1001);
    for (i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "k%zu", i);
        assert_string_equal(u->fields[i]->key, key);
        assert_true(u->fields[i]->value->number_value == (double)i);
        assert_true(u->fields[1000]->value->list_value->values[i]
                        ->number_value == (double)i);
    }
    google__protobuf__struct__free_unpacked(u, NULL);
    rls_pbv_free(&pb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),
        cmocka_unit_test(test_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
