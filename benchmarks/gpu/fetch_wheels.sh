#!/usr/bin/env bash
# Download, here, the wheels a lent GPU machine lacks, for its Python (3.12), into .whl/ (ignored by git).
#
# The GPU machines of this workplace cannot reach a package registry; their image has torch, numpy, pandas,
# scikit-learn, pytest and most of Ray's own dependencies, but not Ray, Optuna or pydantic. Each package below is
# fetched at the version constraints.txt pins (the set the suite passed with), without its dependencies: the list
# names every one the image lacks. Run from the repository root:
#
#     bash benchmarks/gpu/fetch_wheels.sh            # the engine, its tests and the Optuna front end
#     EXTRA=1 bash benchmarks/gpu/fetch_wheels.sh    # also the optional searchers' packages (more MiB)
#
# The device tool carries at most 64 MiB of working tree per call, so the optional set is left out by default;
# tests that need a missing package skip. benchmarks/gpu/run_checks.sh installs what is here on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/../.."

DEST=.whl
PYVER=3.12
# Packages the GPU image lacks that the engine, its test suite and its benchmarks import.
CORE=(ray optuna optuna-integration pydantic pydantic_core annotated-types typing-inspection alembic SQLAlchemy
      Mako colorlog tensorboardX jsonschema jsonschema-specifications referencing rpds-py typing-extensions)
# The optional searchers' packages (their tests skip without them).
OPTIONAL=(hyperopt zoopt nevergrad cma bayesian-optimization directsearch)

names=("${CORE[@]}")
if [[ "${EXTRA:-0}" == "1" ]]; then
  names+=("${OPTIONAL[@]}")
fi

mkdir -p "$DEST"
grep -qxF "/$DEST/" .gitignore || { echo "$DEST/ must be ignored by git (.gitignore)" >&2; exit 1; }
for name in "${names[@]}"; do
  # constraints.txt lines look like `name==1.2.3 ; python_version == "3.11"`; names compare case-insensitively
  # and with - and _ alike.
  key=$(echo "$name" | tr 'A-Z_' 'a-z-')
  pin=$(awk -F'==' -v k="$key" '{n=tolower($1); gsub("_", "-", n); if (n == k) {split($2, v, " "); print v[1]}}' \
        constraints.txt)
  spec="$name${pin:+==$pin}"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" "$spec"
done
# Ray's wheel (79 MB) alone is over the 64 MiB the device tool carries. Its Java jars (31 MB) and the dashboard's
# web client are never used by fluidsalus (include_dashboard=False, no Java workers): repack it without them, and
# without their lines in RECORD, so that pip installs it as it is.
python3 - "$DEST" <<'PY'
import glob, os, sys, zipfile
DROP = ("ray/jars/", "ray/dashboard/client/build/")
for path in glob.glob(os.path.join(sys.argv[1], "ray-*.whl")):
    tmp = path + ".tmp"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename.startswith(DROP):
                continue
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(line for line in lines if not line.startswith(DROP)).encode()
            dst.writestr(info, data)
    os.replace(tmp, path)
PY
du -sh "$DEST"
