/* fuzz_devfile — fuzz target for device files (baspc --device-file,
 * frontend/devfile.c).  Any input must end in errors or in devices whose
 * every figure is finite and positive (latency, overhead, exponential rate
 * and model error may be 0; model error below 1) and whose name a spec can
 * use: a lookup finds it and it is no built-in preset. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_link(const layout_link *l) {
    if (!l->kind[0] || !isfinite(l->bandwidth) || l->bandwidth <= 0 || !isfinite(l->latency) || l->latency < 0 ||
        !(l->efficiency > 0 && l->efficiency <= 1))
        abort();
}

static void check(const layout_device_preset *d) {
    const double pos[] = {d->mem_bytes, d->peak_flops_bf16, d->peak_flops_fp32, d->mem_bw, d->host_mem_bytes};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (!isfinite(pos[i]) || pos[i] <= 0) abort();
    const double frac[] = {d->compute_fraction, d->attention_fraction, d->mem_bw_fraction, d->op_overhead, d->exp_rate};
    for (size_t i = 0; i < sizeof frac / sizeof frac[0]; i++)
        if (!isfinite(frac[i]) || frac[i] < 0) abort();
    if (!(d->model_error >= 0 && d->model_error < 1)) abort();
    if (!(d->shared_core_efficiency >= 0 && d->shared_core_efficiency <= 1)) abort();
    check_link(&d->intra), check_link(&d->inter), check_link(&d->host);
    int n;
    const layout_device_preset *built = layout_device_presets(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(built[i].name, d->name)) abort();
    if (layout_device_lookup(d->name) != d || strlen(d->name) >= LAYOUT_DEVICE_NAME_MAX) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sup_diag_set_sink(fuzz_null_sink());
    char *text = fuzz_text(data, size);
    bool ok = fe_device_text_load("fuzz.json", text, size);
    int n;
    const layout_device_preset *d = layout_devices_added(&n);
    if (ok && n == 0) abort(); /* a file that loads defines a device */
    for (int i = 0; i < n; i++) check(&d[i]);
    if (ok != (sup_error_count() == 0)) abort();
    layout_devices_reset();
    sup_source_reset();
    sup_diag_reset();
    free(text);
    return 0;
}
