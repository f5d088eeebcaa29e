/* zerosim — the `plan` command's output, shared by src/cli/plan_cmd.c (the
 * options and the plans) and src/cli/plan_print.c (their text and JSON).
 * Private to the two. */
#ifndef ZEROSIM_CLI_PLAN_CMD_IMPL_H
#define ZEROSIM_CLI_PLAN_CMD_IMPL_H

#include "zerosim/plan.h"

#include <stddef.h>
#include <stdio.h>

/* One plan for people: the setup, the memory table, the fit (with
 * want_max, the largest model that fits: max_params, max_layers), the
 * offload tiers, the traffic and the step time. */
void zs_plan_print_text(FILE *f, const zs_plan_input *in, const zs_plan_result *r, int want_max,
                        size_t max_params, int max_layers);

/* A sweep of nplans plans (base: the options they share), one row each. */
void zs_plan_print_sweep(FILE *f, const zs_plan_input *base, int nplans, const zs_plan_input *ins,
                         const zs_plan_result *rs, int want_max, const size_t *max_params);

/* One JSON object and a newline: the plan, or {"plans": [...]} for a sweep.
 * -1 (zs_error_msg) when out of memory. */
int zs_plan_print_json(FILE *f, int nplans, const zs_plan_input *ins, const zs_plan_result *rs,
                       int want_max, const size_t *max_params, const int *max_layers);

/* --weight-format FORMAT (--double-quant): the bytes of the weights an
 * inference holds for a model of psi parameters. -1 (zs_error_msg) for a
 * bad format or a model it cannot count. */
int zs_plan_print_weights(FILE *f, const zs_plan_input *in, const char *format, int double_quant,
                          size_t psi);

#endif
