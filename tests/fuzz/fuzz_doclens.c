/* fuzz_doclens — fuzz target for the planner's document lengths
 * (--doc-lengths: a text list or an llm.c token file, driver/docplan.c) and
 * for the packer that lays them into rows (common/cm_pack.c).  Any input must
 * end in an error or in lengths; every packing of them must tile the rows
 * exactly with pieces of the input documents, each token at most once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "driver/driver.h"
#include "passes/passes.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The slots cover rows 0..B-1 left to right, each exactly full, and lie in
 * the documents (which sit back to back from 0: docs[i].src = their sum). */
static void check(const layout_doc *d, int n, const layout_slot *s, int ns, int64_t B, int64_t S) {
    int64_t row = 0, col = 0, total = d[n - 1].src + d[n - 1].len;
    for (int i = 0; i < ns; i++) {
        if (s[i].row != row || s[i].col != col || s[i].len < 1 || s[i].src < 0 || s[i].src + s[i].len > total) abort();
        col += s[i].len;
        if (col > S) abort();
        if (col == S) row++, col = 0;
    }
    if (row != B || col != 0) abort();
}

static void pack_all(const pass_doc_lengths *dl, int64_t B, int64_t S, int G) {
    layout_doc *d = malloc(sizeof *d * (size_t)(B * S));
    layout_slot *s = malloc(sizeof *s * (size_t)(B * S + B));
    int n = 0;
    int64_t total = 0;
    for (int i = 0; total < B * S; i = (i + 1) % dl->n)
        for (int64_t off = 0; off < dl->len[i] && total < B * S; off += S) {
            int64_t l = dl->len[i] - off < S ? dl->len[i] - off : S;
            if (l > B * S - total) l = B * S - total;
            d[n++] = (layout_doc){total, l};
            total += l;
        }
    for (int how = 0; how < 2; how++) {
        int ns = layout_pack(d, n, B, S, (layout_packing)how, 100, s);
        if (ns <= 0) abort();
        check(d, n, s, ns, B, S);
        if (layout_pack_groups(s, ns, B, G, 100) != 0) abort();
        check(d, n, s, ns, B, S);
        if (layout_pack_imbalance(s, ns, B, G, 100, NULL) < 1 - 1e-9) abort();
    }
    free(d), free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sup_diag_set_sink(fuzz_null_sink());
    fe_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.model.vocab = 256;
    spec.train.documents = true;
    spec.train.eot_token = 0;
    pass_doc_lengths dl;
    if (pass_doc_lengths_parse("fuzz.txt", data, size, &spec, &dl)) {
        /* Shapes from the input too: B in 1..8 rows of S in 1..64, G | B. */
        int64_t B = size ? 1 + data[0] % 8 : 1, S = size > 1 ? 1 + data[1] % 64 : 16;
        int G = (int)(size > 2 ? 1 + data[2] % B : 1);
        while (B % G) G--;
        pack_all(&dl, B, S, G);
        pass_doc_lengths_free(&dl);
    }
    sup_diag_reset();
    return 0;
}
