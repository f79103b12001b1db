/* fuzz_tokens — fuzz target for the llm.c token file reader behind --data
 * (common/cm_tokens.c).  Any input must end in a token array whose ids are
 * inside the vocabulary, or in an error message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    int32_t *tok;
    int64_t n;
    /* The vocabulary comes from the input too, so both widths and the range
     * check are reached: 256 (bytes) or 50257 (GPT-2). */
    int64_t vocab = size && (data[size - 1] & 1) ? 50257 : 256;
    if (!rt_tokens_parse(data, size, "fuzz.bin", vocab, &tok, &n, err, sizeof err)) {
        if (!err[0]) abort();
        return 0;
    }
    for (int64_t i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= vocab) abort();
    free(tok);
    return 0;
}
