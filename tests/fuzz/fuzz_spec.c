/* fuzz_spec — fuzz target for the layout-language frontend.  Any input must
 * end in a checked spec or in located errors: no crash, no hang, no leak.
 * Small specs that pass the checks are also lowered and run through the
 * default pipeline and the schedule report. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/basp_context.h"
#include "frontend/frontend.h"
#include "ir/ir.h"
#include "driver/driver.h"
#include "passes/passes.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_text(data, size);
    sup_diag_set_sink(fuzz_null_sink());
    basp_ctx(); /* the strategies' spec words (a2a two_level) come from the registry */
    fe_spec *spec = fe_parse_string("fuzz.basp", text);
    /* Lowering is linear in layers and ranks; keep each run fast. */
    if (spec && spec->model.layers <= 4 && fe_world(spec) <= 64) {
        ir_module *m = pass_lower(spec);
        if (m) {
            pass_options opt = pass_default_options();
            opt.quiet = true;
            opt.print_out = fuzz_null_sink();
            if (pass_run_pipeline(m, pass_default_pipeline(), &opt)) pass_schedule_print(m, fuzz_null_sink());
            ir_module_free(m);
        }
    }
    if (spec) fe_spec_free(spec);
    free(text);
    sup_source_reset();
    sup_diag_reset();
    return 0;
}
