/* fuzz_safetensors — fuzz target for the safetensors reader behind --resume
 * and --init-from DIR (runtime/ckpt/rt_safetensors.c).  Any input must end in a
 * parsed file or an error message: no crash, no hang, no leak, no read
 * outside the buffer.  A file that parses has every tensor converted to
 * fp32 (the loader's next step), which reads each tensor's whole byte range. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ckpt/rt_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    rt_st_file f;
    if (!rt_st_parse(data, size, "fuzz.safetensors", &f, err, sizeof err)) {
        if (!memchr(err, 0, sizeof err) || !err[0]) abort(); /* every failure says why */
        return 0;
    }
    for (int i = 0; i < f.n; i++) {
        const rt_st_tensor *t = &f.t[i];
        if (t->elems > (1 << 20)) continue; /* bounded by the input anyway; keeps runs fast */
        float *out = malloc((size_t)t->elems * 4 + 4);
        rt_st_to_f32(t, data + f.data_off + t->begin, out);
        free(out);
        if (rt_st_find(&f, t->name) != t) abort(); /* names are unique */
    }
    rt_st_free(&f);
    return 0;
}
