/* zerosim fuzz target: the options of `zerosim train`.
 *
 * The input is an argument vector (argv.h: NUL-separated arguments after
 * "train"). It goes through zs_train_setup, the parsing, --config loading
 * and validation that `zerosim train` runs before it starts training, as
 * rank 1 of a one-rank world: rank 1 prints nothing and creates no --csv
 * directory (rank 0's job), so the target has no side effects.
 */
#include "cli/train_cmd.h"

#include "argv.h"

#include <getopt.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char **argv, *buf;
    int argc = zs_fuzz_argv(data, size, "train", &argv, &buf);
    if (argc > 0) {
        /* glibc's getopt keeps a pointer into the previous argv unless
         * reset with optind = 0; zs_train_setup sets optind = 1, as a
         * program that parses once may */
        char *none[] = {"train", NULL};
        optind = 0;
        (void)getopt_long(1, none, "", NULL, NULL);
        zs_train_options o = {.backend = "cpu", .log = NULL, .print_every = 10};
        zs_run_config cfg;
        const char *report = NULL, *csv = NULL, *trace = NULL;
        int phantom_world = 0, print_program = 0;
        (void)zs_train_setup(argc, argv, 1, 1, &cfg, &o, &report, &csv, &trace, &phantom_world,
                             &print_program);
    }
    free(argv);
    free(buf);
    return 0;
}
