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
    "usage: zerosim mesh --world N [--tp T] [--pp P] [--ep E] [--json]\n"
    "\n"
    "Print every tensor-, data- and pipeline-parallel group of N ranks split as\n"
    "T x (N / (T x P)) x P, in Megatron-LM's rank order (tensor-parallel fastest,\n"
    "then data, then pipeline). No MPI. With --ep E, also the expert-parallel\n"
    "groups (E consecutive members of each data-parallel group, which deal the\n"
    "experts among them) and the expert-data-parallel groups (every E-th member,\n"
    "which hold the same experts), as DeepSpeed's groups.py makes them.\n";

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

static void zs_mesh_print_axis(FILE *f, int N, int T, int P, zs_comm_group g, int json)
{
    int n = zs_mesh_ngroups(N, T, P, g), size = zs_mesh_group_size(N, T, P, g);
    int *r = malloc((size_t)size * sizeof(int));
    if (!r)
        return;
    if (!json)
        fprintf(f, "%s groups (%d of %d):", zs_comm_group_name(g), n, size);
    else
        fprintf(f, "    \"%s\": [", zs_comm_group_name(g));
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

/* The expert-parallel (edp 0) or expert-data-parallel (edp 1) groups. */
static void zs_mesh_print_ep(FILE *f, int N, int T, int P, int E, int edp, int json)
{
    int n = zs_mesh_ep_ngroups(N, T, P, E, edp), size = zs_mesh_ep_group_size(N, T, P, E, edp);
    int *r = malloc((size_t)size * sizeof(int));
    if (!r)
        return;
    const char *name = edp ? "edp" : "ep";
    if (!json)
        fprintf(f, "%s groups (%d of %d):", name, n, size);
    else
        fprintf(f, ",\n    \"%s\": [", name);
    for (int i = 0; i < n; i++) {
        zs_mesh_ep_group_ranks(N, T, P, E, edp, i, r);
        fputs(json ? (i ? ", [" : "[") : " [", f);
        for (int k = 0; k < size; k++)
            fprintf(f, k ? ",%d" : "%d", r[k]);
        fputc(']', f);
    }
    fputs(json ? "]" : "\n", f);
    free(r);
}

int zs_cmd_mesh(int argc, char **argv)
{
    static const struct option opts[] = {
        {"world", required_argument, NULL, 'w'}, {"tp", required_argument, NULL, 't'},
        {"pp", required_argument, NULL, 'p'},    {"json", no_argument, NULL, 'j'},
        {"ep", required_argument, NULL, 'e'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    int N = 0, T = 1, P = 1, E = 0, json = 0, ch;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int rc = 0;
        switch (ch) {
        case 'w': rc = zs_mesh_int("world", optarg, &N); break;
        case 't': rc = zs_mesh_int("tp", optarg, &T); break;
        case 'p': rc = zs_mesh_int("pp", optarg, &P); break;
        case 'e': rc = zs_mesh_int("ep", optarg, &E); break;
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
    if (zs_mesh_check(N, T, P) || (E && zs_mesh_check_ep(N, T, P, E))) {
        fprintf(stderr, "zerosim mesh: %s\n", zs_error_msg());
        return 1;
    }
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
            zs_mesh_print_ep(stdout, N, T, P, E, 0, 1);
            zs_mesh_print_ep(stdout, N, T, P, E, 1, 1);
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
        zs_mesh_print_ep(stdout, N, T, P, E, 0, 0);
        zs_mesh_print_ep(stdout, N, T, P, E, 1, 0);
    }
    return 0;
}
