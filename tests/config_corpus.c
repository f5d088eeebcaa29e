/* zerosim — load every DeepSpeed configuration file named on the command
 * line, as `zerosim train --config FILE` would, at 1, 2, 4 and 8 ranks (a
 * file's batch sizes fit the cluster it was written for), and say for each
 * what happened. tests/test_configs.sh runs it over tests/configs/deepspeed.
 *
 * Output, one line per file:
 *   ok N FILE          loads and finalizes at N ranks: it would run
 *   unmodelled FILE    refused, and every problem names a DeepSpeed feature
 *                      zerosim does not model yet (or a key DeepSpeed itself
 *                      does not know, with at least one such feature)
 *   foreign FILE       refused only for keys DeepSpeed itself does not know
 *   FAIL FILE: WHY     anything else
 * and a last line "total T ok O unmodelled U foreign F fail X".
 */
#include "zerosim/config.h"
#include "zerosim/error.h"

#include <stdio.h>
#include <string.h>

/* keys some public files carry that DeepSpeed does not know (it ignores
 * unknown top-level keys; zerosim refuses them as possible typos) */
static const char *const foreign_keys[] = {"unknown key \"cuda_visible_devices\""};

static int is_unmodelled(const char *line)
{
    return strstr(line, "is a DeepSpeed feature zerosim does not model yet") ||
           strstr(line, "is a DeepSpeed optimizer zerosim does not model yet") ||
           strstr(line, "is a DeepSpeed scheduler zerosim does not model yet");
}

static int is_foreign(const char *line)
{
    for (size_t i = 0; i < sizeof foreign_keys / sizeof foreign_keys[0]; i++)
        if (strstr(line, foreign_keys[i]))
            return 1;
    return 0;
}

static int is_batch_split(const char *msg)
{
    return strstr(msg, "divisible by") || strstr(msg, "must equal train_micro_batch") ||
           strstr(msg, "do not divide into");
}

int main(int argc, char **argv)
{
    int counts[4] = {0, 0, 0, 0}; /* ok, unmodelled, foreign, fail */
    for (int a = 1; a < argc; a++) {
        const char *f = argv[a];
        static const int worlds[] = {1, 2, 4, 8};
        char msg[ZS_ERROR_MAX];
        int ok_at = 0;
        for (int w = 0; w < 4 && !ok_at; w++) {
            zs_run_config c;
            zs_run_config_defaults(&c);
            zs_error_clear();
            if (zs_config_load_file(f, &c) == 0 && zs_run_config_finalize(&c, worlds[w]) == 0)
                ok_at = worlds[w];
            snprintf(msg, sizeof msg, "%s", zs_error_msg());
            if (!ok_at && !is_batch_split(msg))
                break;
        }
        if (ok_at) {
            printf("ok %d %s\n", ok_at, f);
            counts[0]++;
            continue;
        }
        /* one line, or "NAME: K problems, one per line:" and a line each */
        char *nl = strchr(msg, '\n');
        if (nl && !strstr(msg, " problems, one per line:\n  ")) {
            printf("FAIL %s: a message of several lines that is not a problem list\n", f);
            counts[3]++;
            continue;
        }
        int unmod = 0, foreign = 0, other = 0;
        char *line = nl ? nl + 1 : msg;
        while (line && *line) {
            char *next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            if (is_unmodelled(line))
                unmod++;
            else if (is_foreign(line))
                foreign++;
            else
                other++;
            line = next;
        }
        if (other || (!unmod && !foreign)) {
            printf("FAIL %s: refused for a reason that is not an unmodelled DeepSpeed feature: "
                   "%s\n", f, msg);
            counts[3]++;
        } else if (unmod) {
            printf("unmodelled %s\n", f);
            counts[1]++;
        } else {
            printf("foreign %s\n", f);
            counts[2]++;
        }
    }
    printf("total %d ok %d unmodelled %d foreign %d fail %d\n", argc - 1, counts[0], counts[1],
           counts[2], counts[3]);
    return counts[3] ? 1 : 0;
}
