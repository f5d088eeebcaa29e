#!/bin/sh
# Run "mpiexec -n N ARGS..." the way the tests need it: as root when the
# machine runs us as root, more ranks than cores, no core binding, one BLAS
# thread per rank. Usage: tests/mpirun.sh N program args...
# Open MPI needs its root variables and --oversubscribe for that; MPICH's
# mpiexec (hydra) runs as root and oversubscribes without being asked, and
# knows neither -q nor --oversubscribe. ZS_MPI_IMPL (openmpi or mpich, from
# configure, set by make check) says which; without it, mpiexec --version.
n=$1
shift
mpiexec=${MPIEXEC:-mpiexec}
impl=${ZS_MPI_IMPL:-}
if [ -z "$impl" ]; then
    case $("$mpiexec" --version 2>&1) in
        *HYDRA*|*MPICH*|*"Intel(R) MPI"*) impl=mpich ;;
        *) impl=openmpi ;;
    esac
fi
export OPENBLAS_NUM_THREADS=1
if [ "$impl" = mpich ]; then
    exec "$mpiexec" -n "$n" -bind-to none "$@"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec "$mpiexec" -q -n "$n" --oversubscribe --bind-to none "$@"
