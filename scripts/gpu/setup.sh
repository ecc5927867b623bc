# Sourced by every GPU script (scripts/gpu/*.sh): the repository root as the
# working directory, this tree's Python package (fijit and its fijit.testing
# helpers) on the path, $OUT_DIR for raw results ($OUT when set), and a private
# cache unless FIJIT_CACHE_DIR names one.
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
OUT_DIR=${OUT:-$(mktemp -d)}
mkdir -p "$OUT_DIR"
export FIJIT_CACHE_DIR=${FIJIT_CACHE_DIR:-$(mktemp -d /tmp/fijit-cache.XXXXXX)}
chmod 700 "$FIJIT_CACHE_DIR"
