#!/bin/sh
# Run "mpiexec -n N ARGS..." the way the tests need it: as root when the
# machine runs us as root, more ranks than cores, no core binding, one BLAS
# thread per rank. Usage: tests/mpirun.sh N program args...
n=$1
shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
exec "${MPIEXEC:-mpiexec}" -q -n "$n" --oversubscribe --bind-to none "$@"
