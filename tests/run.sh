#!/usr/bin/env bash
# The test command (README and .ci/run): install the package with its test and Chinese extras, run the whole
# suite (fast tests first, then the end-to-end runs marked slow), then the Apache Beam runner's tests in a
# venv of their own: apache-beam needs protobuf<7, which is kept out of the main environment
# (the venv sees the main packages; only Beam and its pins live in it). TEXTRAIN_SKIP_BEAM=1 skips that part.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[test,zh,corpora]"
export TF_CPP_MIN_LOG_LEVEL=2
ok_or_none() { local rc=$?; [ $rc -eq 5 ] || exit $rc; }  # pytest's 5: no test selected
python3 -m pytest -q -m "not slow" "$@" || ok_or_none
python3 -m pytest -q -m slow "$@" || ok_or_none
if [ "${TEXTRAIN_SKIP_BEAM:-0}" != 1 ]; then
  [ -x .venv-beam/bin/python ] || python3 -m venv --system-site-packages .venv-beam
  .venv-beam/bin/python -m pip install -q --disable-pip-version-check -e ".[beam]"
  .venv-beam/bin/python -m pytest -q -p no:cacheprovider tests/test_beam_datagen.py "$@" || ok_or_none
fi
