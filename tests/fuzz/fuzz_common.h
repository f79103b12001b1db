/* fuzz_common.h — what the fuzz targets share: a NUL-terminated copy of the
 * input and a diagnostics sink that discards everything. */
#ifndef BASP_FUZZ_COMMON_H
#define BASP_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline FILE *fuzz_null_sink(void) {
    static FILE *sink;
    if (!sink) sink = fopen("/dev/null", "w");
    return sink;
}

/* malloc'd copy of data with a terminating NUL (the parsers read C strings). */
static inline char *fuzz_text(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    return text;
}

#endif
