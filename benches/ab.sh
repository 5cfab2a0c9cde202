#!/bin/bash
# A/B of two builds of `tfbench` on the same files, alternated: prints each run's median
# in ms of OPEN_RUNS opens (or runs) of OP.
#
#   BASE=/path/to/old/tfbench NEW=/path/to/new/tfbench benches/ab.sh OP DIR [ROUNDS]
#
# DIR holds the files of OP's suite (the `--dir` of `tfbench`, kept by `compare.sh`).
set -euo pipefail
OP=$1; DIR=$2; R=${3:-4}; OPEN_RUNS=${OPEN_RUNS:-200}
: "${BASE:?set BASE to the old tree's tfbench}" "${NEW:?set NEW to this tree's tfbench}"
for _ in $(seq "$R"); do
  for which in BASE NEW; do
    bin=${!which}
    m=$("$bin" --dir "$DIR" --only "$OP" --runs 1 --open-runs "$OPEN_RUNS" --lib tensorfmt 2>/dev/null |
      python3 -c "import json,sys; print('%.3f' % (json.load(sys.stdin)['results'][0]['median_s']*1000))")
    echo "$OP $which $m"
  done
done
