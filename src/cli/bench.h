/* zerosim bench: calibration of the step-time model (src/cli/bench.c). */
#ifndef ZEROSIM_CLI_BENCH_H
#define ZEROSIM_CLI_BENCH_H

/* argv[0] is "bench". Starts MPI; returns the exit status. */
int zs_cmd_bench(int argc, char **argv);

#endif
