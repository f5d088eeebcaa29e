/* zerosim — the program's usage text (src/cli/usage.c). */
#ifndef ZEROSIM_CLI_USAGE_H
#define ZEROSIM_CLI_USAGE_H

/* Every command, then train's options: what zerosim --help and
 * zerosim train --help print. */
extern const char *const zs_usage;
/* zerosim export's own usage: what zerosim export --help prints. */
extern const char *const zs_export_usage;

#endif
