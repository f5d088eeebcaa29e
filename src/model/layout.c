/* zerosim — a parameter layout being built: the entries every model kind
 * adds (see model_impl.h). */
#include "model_impl.h"
#include "zerosim/error.h"

#include <stdlib.h>
#include <string.h>

int zs_layout_add(zs_layout *lay, const char *name, size_t numel, int layer)
{
    /* capacity doubles, at powers of two from 16 (the layout has no field
     * for it): one entry at a time made a 926-layer GPT's layout quadratic
     * (found by fuzz/fuzz_plan_args.c, fuzz/regress/plan_args/) */
    size_t n = (size_t)lay->n_entries;
    if (n == 0 || (n >= 16 && (n & (n - 1)) == 0)) {
        size_t cap = n < 16 ? 16 : 2 * n;
        zs_param_entry *e = realloc(lay->entries, cap * sizeof *e);
        if (!e)
            ZS_FAIL("out of host memory building the parameter layout");
        lay->entries = e;
    }
    zs_param_entry *p = &lay->entries[lay->n_entries++];
    memset(p, 0, sizeof *p);
    strncpy(p->name, name, sizeof p->name - 1);
    p->numel = numel;
    p->layer = layer;
    if (layer + 1 > lay->n_layers)
        lay->n_layers = layer + 1;
    return 0;
}

void zs_layout_free(zs_layout *lay)
{
    free(lay->entries);
    free(lay->layer_offset);
    free(lay->layer_numel);
    memset(lay, 0, sizeof *lay);
}
