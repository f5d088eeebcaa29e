/* zerosim — the subcommands' numeric option values, checked in one place. */
#ifndef ZEROSIM_CLI_NUM_H
#define ZEROSIM_CLI_NUM_H

/* s as a finite number in [lo, hi], or one line naming opt and s. */
int zs_cli_parse_number(const char *opt, const char *s, double lo, double hi, double *out);
/* s as a base-10 integer in [lo, hi], or one line naming opt and s. */
int zs_cli_parse_long(const char *opt, const char *s, long lo, long hi, long *out);

#endif
