#!/usr/bin/env bash
# The test command (README and .ci/run): install the package with its test extra, then run the
# whole suite, fast tests first, then the end-to-end runs marked slow.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[test]"
export TF_CPP_MIN_LOG_LEVEL=2
python3 -m pytest -q -m "not slow" "$@"
python3 -m pytest -q -m slow "$@" || { rc=$?; [ $rc -eq 5 ] || exit $rc; }  # 5: no slow test selected
