/* zerosim — the subcommands' numeric option values (see cli_num.h). */
#include "cli_num.h"
#include "zerosim/error.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int zs_cli_parse_number(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < lo || v > hi)
        ZS_FAIL("%s must be a number in [%g, %g], got \"%s\"", opt, lo, hi, s);
    *out = v;
    return 0;
}

int zs_cli_parse_long(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        ZS_FAIL("%s must be an integer in [%ld, %ld], got \"%s\"", opt, lo, hi, s);
    *out = v;
    return 0;
}
