/* fuzz_ir — fuzz target for the textual IR parser and the verifier: any input
 * must give a module or located errors; a parsed module must print, re-parse
 * and print identically (the round-trip contract). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_text(data, size);
    sup_diag_set_sink(fuzz_null_sink());
    ir_module *m = ir_parse_string("fuzz.bir", text);
    if (m) {
        ir_verify(m, "fuzz");
        char *a = ir_print_to_string(m);
        ir_module *m2 = ir_parse_string("fuzz-reprint.bir", a);
        if (!m2) {
            fprintf(stderr, "round trip: printed IR does not parse back\n%s\n", a);
            abort();
        }
        char *b = ir_print_to_string(m2);
        if (strcmp(a, b) != 0) {
            fprintf(stderr, "round trip: printed IR differs after re-parse\n");
            abort();
        }
        free(a);
        free(b);
        ir_module_free(m2);
        ir_module_free(m);
    }
    free(text);
    sup_source_reset();
    sup_diag_reset();
    return 0;
}
