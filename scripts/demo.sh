#!/bin/sh
# Set everything up, then train the default small GPT on one rank and print
# the loss going down towards the data's known floor.
set -eu
cd "$(dirname "$0")/.."
sh scripts/build.sh
export OPENBLAS_NUM_THREADS=1
./zerosim train --steps 400 --print-every 25 --report demo-report.json
echo "report written to demo-report.json"
