/* zerosim fuzz target: `zerosim plan`, options to printed plan.
 *
 * The input is an argument vector (argv.h: NUL-separated arguments after
 * "plan"). Inputs that give --csv (any abbreviation: --cs...) are skipped,
 * since the planner would write that file. The plan goes to stdout (run
 * libFuzzer with -close_fd_mask=1 to drop it).
 */
#include "cli/plan_cmd.h"

#include "argv.h"

#include <getopt.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char **argv, *buf;
    int argc = zs_fuzz_argv(data, size, "plan", &argv, &buf);
    int writes = 0;
    for (int i = 1; i < argc; i++)
        writes |= !strncmp(argv[i], "--cs", 4);
    if (argc > 0 && !writes) {
        char *none[] = {"plan", NULL};
        optind = 0; /* glibc's full reset (see fuzz_train_args.c) */
        (void)getopt_long(1, none, "", NULL, NULL);
        (void)zs_cmd_plan(argc, argv);
    }
    free(argv);
    free(buf);
    return 0;
}
