/* zerosim — the `mesh` command: every group of a tensor × data × pipeline
 * mesh of N ranks, in Megatron-LM's rank order (zerosim/mesh.h). No MPI. */
#include "cli/mesh_cmd.h"
#include "zerosim/error.h"
#include "zerosim/mesh.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const zs_mesh_usage =
    "usage: zerosim mesh --world N [--tp T] [--cp C] [--pp P] [--ep E] [--json]\n"
    "\n"
    "Print every tensor-, data- and pipeline-parallel group of N ranks split as\n"
    "T x (N / (T x P)) x P, in Megatron-LM's rank order (tensor-parallel fastest,\n"
    "then data, then pipeline). No MPI. With --ep E, also the expert-parallel\n"
    "groups (E consecutive members of each data-parallel group, which deal the\n"
    "experts among them) and the expert-data-parallel groups (every E-th member,\n"
    "which hold the same experts), as DeepSpeed's groups.py makes them.\n"
    "With --cp C (context parallelism, Megatron-LM's order tp-cp-dp-pp), the\n"
    "context-parallel groups (C ranks that split each sample's sequence and pass\n"
    "its keys and values around a ring), the pure data-parallel groups, and as\n"
    "dp-cp the combined groups that ZeRO partitions and reduces gradients over.\n";

static int zs_mesh_int(const char *opt, const char *s, int *out)
{
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < 1 || v > (1 << 20))
        ZS_FAIL("--%s must be an integer from 1 to %d, got \"%s\"", opt, 1 << 20, s);
    *out = (int)v;
    return 0;
}

/* json: 0 text, 1 JSON; 2 (JSON) and 3 (text) name the axis "dp-cp": the
 * data-parallel axis when context parallelism shares it. */
static void zs_mesh_print_axis(FILE *f, int N, int T, int P, zs_comm_group g, int json)
{
    int n = zs_mesh_ngroups(N, T, P, g), size = zs_mesh_group_size(N, T, P, g);
    int *r = malloc((size_t)size * sizeof(int));
    if (!r)
        return;
    const char *name = json >= 2 ? "dp-cp" : zs_comm_group_name(g);
    if (json == 3)
        json = 0;
    if (!json)
        fprintf(f, "%s groups (%d of %d):", name, n, size);
    else
        fprintf(f, "    \"%s\": [", name);
    for (int i = 0; i < n; i++) {
        zs_mesh_group_ranks(N, T, P, g, i, r);
        fprintf(f, json ? "%s[" : "%s[", json ? (i ? ", " : "") : " ");
        for (int k = 0; k < size; k++)
            fprintf(f, k ? ",%d" : "%d", r[k]);
        fputc(']', f);
    }
    fputs(json ? "]" : "\n", f);
    free(r);
}

/* The expert-parallel (edp 0) or expert-data-parallel (edp 1) groups; with
 * cp, the context-parallel (edp 0) or pure data-parallel (edp 1) groups
 * (the same cut of the combined group, zerosim/mesh.h). */
static void zs_mesh_print_sub(FILE *f, int N, int T, int P, int E, int edp, int cp, int json)
{
    int n = zs_mesh_ep_ngroups(N, T, P, E, edp), size = zs_mesh_ep_group_size(N, T, P, E, edp);
    if (cp) {
        n = zs_mesh_cp_ngroups(N, T, P, E, edp);
        size = zs_mesh_cp_group_size(N, T, P, E, edp);
    }
    int *r = malloc((size_t)size * sizeof(int));
    if (!r)
        return;
    const char *name = cp ? (edp ? "dp" : "cp") : edp ? "edp" : "ep";
    if (!json)
        fprintf(f, "%s groups (%d of %d):", name, n, size);
    else
        fprintf(f, ",\n    \"%s\": [", name);
    for (int i = 0; i < n; i++) {
        if (cp)
            zs_mesh_cp_group_ranks(N, T, P, E, edp, i, r);
        else
            zs_mesh_ep_group_ranks(N, T, P, E, edp, i, r);
        fputs(json ? (i ? ", [" : "[") : " [", f);
        for (int k = 0; k < size; k++)
            fprintf(f, k ? ",%d" : "%d", r[k]);
        fputc(']', f);
    }
    fputs(json ? "]" : "\n", f);
    free(r);
}

/* A mesh with context parallelism: tp, cp, dp (pure), dp-cp (combined, the
 * "dp" axis of zerosim/mesh.h) and pp groups. */
static int zs_mesh_print_cp(int N, int T, int C, int P, int json)
{
    int D = N / (T * C * P);
    if (json) {
        printf("{\n  \"world\": %d, \"tp_size\": %d, \"cp_size\": %d, \"dp_size\": %d, "
               "\"pp_size\": %d,\n  \"groups\": {\n", N, T, C, D, P);
        zs_mesh_print_axis(stdout, N, T, P, ZS_GROUP_TP, 1);
        zs_mesh_print_sub(stdout, N, T, P, C, 0, 1, 1);
        zs_mesh_print_sub(stdout, N, T, P, C, 1, 1, 1);
        fputs(",\n", stdout);
        zs_mesh_print_axis(stdout, N, T, P, ZS_GROUP_DP, 2);
        fputs(",\n", stdout);
        zs_mesh_print_axis(stdout, N, T, P, ZS_GROUP_PP, 1);
        fputs("\n  }\n}\n", stdout);
        return 0;
    }
    printf("mesh: %d ranks = tp %d x cp %d x dp %d x pp %d (rank = tp_rank + %d x (cp_rank + "
           "%d x (dp_rank + %d x pp_rank)))\n", N, T, C, D, P, T, C, D);
    zs_mesh_print_axis(stdout, N, T, P, ZS_GROUP_TP, 0);
    zs_mesh_print_sub(stdout, N, T, P, C, 0, 1, 0);
    zs_mesh_print_sub(stdout, N, T, P, C, 1, 1, 0);
    zs_mesh_print_axis(stdout, N, T, P, ZS_GROUP_DP, 3);
    zs_mesh_print_axis(stdout, N, T, P, ZS_GROUP_PP, 0);
    return 0;
}

int zs_cmd_mesh(int argc, char **argv)
{
    static const struct option opts[] = {
        {"world", required_argument, NULL, 'w'}, {"tp", required_argument, NULL, 't'},
        {"pp", required_argument, NULL, 'p'},    {"json", no_argument, NULL, 'j'},
        {"ep", required_argument, NULL, 'e'},    {"cp", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    int N = 0, T = 1, P = 1, E = 0, C = 1, json = 0, ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int rc = 0;
        switch (ch) {
        case 'w': rc = zs_mesh_int("world", optarg, &N); break;
        case 't': rc = zs_mesh_int("tp", optarg, &T); break;
        case 'p': rc = zs_mesh_int("pp", optarg, &P); break;
        case 'e': rc = zs_mesh_int("ep", optarg, &E); break;
        case 'c': rc = zs_mesh_int("cp", optarg, &C); break;
        case 'j': json = 1; break;
        case 'h': fputs(zs_mesh_usage, stdout); return 0;
        default:
            fprintf(stderr, "zerosim mesh: unknown option or missing value in %s (see zerosim mesh "
                    "--help)\n", argv[optind - 1]);
            return 2;
        }
        if (rc) {
            fprintf(stderr, "zerosim mesh: %s\n", zs_error_msg());
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "zerosim mesh: unexpected argument \"%s\" (see zerosim mesh --help)\n",
                argv[optind]);
        return 2;
    }
    if (!N) {
        fprintf(stderr, "zerosim mesh: give --world N, the number of ranks\n");
        return 2;
    }
    if (zs_mesh_check(N, T, P) || (E && zs_mesh_check_ep(N, T, P, E)) ||
        (C > 1 && zs_mesh_check_cp(N, T, P, C))) {
        fprintf(stderr, "zerosim mesh: %s\n", zs_error_msg());
        return 1;
    }
    if (C > 1 && E) {
        fprintf(stderr, "zerosim mesh: --cp and --ep together are not modelled: drop one\n");
        return 1;
    }
    if (C > 1)
        return zs_mesh_print_cp(N, T, C, P, json);
    int D = N / (T * P);
    if (json) {
        printf("{\n  \"world\": %d, \"tp_size\": %d, \"dp_size\": %d, \"pp_size\": %d,\n"
               "  \"groups\": {\n", N, T, D, P);
        zs_mesh_print_axis(stdout, N, T, P, ZS_GROUP_TP, 1);
        fputs(",\n", stdout);
        zs_mesh_print_axis(stdout, N, T, P, ZS_GROUP_DP, 1);
        fputs(",\n", stdout);
        zs_mesh_print_axis(stdout, N, T, P, ZS_GROUP_PP, 1);
        if (E) {
            zs_mesh_print_sub(stdout, N, T, P, E, 0, 0, 1);
            zs_mesh_print_sub(stdout, N, T, P, E, 1, 0, 1);
        }
        fputs("\n  }\n}\n", stdout);
        return 0;
    }
    printf("mesh: %d ranks = tp %d x dp %d x pp %d (rank = tp_rank + %d x (dp_rank + %d x "
           "pp_rank))\n", N, T, D, P, T, D);
    zs_mesh_print_axis(stdout, N, T, P, ZS_GROUP_TP, 0);
    zs_mesh_print_axis(stdout, N, T, P, ZS_GROUP_DP, 0);
    zs_mesh_print_axis(stdout, N, T, P, ZS_GROUP_PP, 0);
    if (E) {
        zs_mesh_print_sub(stdout, N, T, P, E, 0, 0, 0);
        zs_mesh_print_sub(stdout, N, T, P, E, 1, 0, 0);
    }
    return 0;
}
