/* test_ir.h — check macros and diagnostics capture shared by the IR unit
 * tests (test_ir.c, test_ir_verify.c). */
#ifndef BASP_TEST_IR_H
#define BASP_TEST_IR_H

#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

extern int failures, checks;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                                   \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

#define CHECK_STR(a, b)                                                                                                \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (strcmp((a), (b)) != 0) {                                                                                   \
            fprintf(stderr, "%s:%d: check failed: %s == %s\n  got:  %s\n  want: %s\n", __FILE__, __LINE__, #a, #b,     \
                    (a), (b));                                                                                         \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

/* Diagnostics go to a temporary file between diag_begin and diag_end, which
 * returns the captured text (malloc'd). */
void diag_begin(void);
char *diag_end(void);

void test_parser_errors(void);
void test_verifier_rejects(void);
void test_verifier_accepts(void);
void test_verifier_api_rejects(void);

#endif
