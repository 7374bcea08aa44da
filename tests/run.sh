#!/usr/bin/env bash
# The test command (README and .ci/run): install the package with its test and Chinese extras, lint (ruff,
# configured in pyproject.toml), run the whole suite (the end-to-end runs marked slow first), then the tests
# that need a package kept out of the main environment, each in a venv of its own:
# - apache-beam needs protobuf<7 (TEXTRAIN_SKIP_BEAM=1 skips that part);
# - the wheel test from inside a venv, as most users install (TEXTRAIN_SKIP_USER_VENV=1 skips it);
# - tensor2tensor (the SubwordTextEncoder parity oracle) pins TF 1-era packages: installed --no-deps, its
#   text_encoder needs nothing the main environment lacks (TEXTRAIN_SKIP_T2T=1 skips that part).
# Those venvs are made in the background while the main suite runs, at the lowest priority (nice 19: their pip
# installs, about a CPU-minute, take the moments the suite leaves a core idle, not its time); their tests run
# after it.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[test,zh,corpora]"
export TF_CPP_MIN_LOG_LEVEL=2
ok_or_none() { local rc=$?; [ $rc -eq 5 ] || exit $rc; }  # pytest's 5: no test selected
python3 -m ruff check .

# The wheel test from inside a venv: a venv over an interpreter that lacks the packages (the system's Debian
# Python where there is one), so the fresh venv the test makes must see this venv's packages, not its base's.
user_base=/usr/bin/python3
user_venv=0
if [ "${TEXTRAIN_SKIP_USER_VENV:-0}" != 1 ] && "$user_base" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null \
    && "$user_base" -c 'import ensurepip' 2>/dev/null; then
  user_venv=1
fi

side_venvs() {
  set -e
  pip_q=(-m pip install -q --disable-pip-version-check)
  if [ "${TEXTRAIN_SKIP_BEAM:-0}" != 1 ]; then
    [ -x .venv-beam/bin/python ] || python3 -m venv --system-site-packages .venv-beam
    .venv-beam/bin/python "${pip_q[@]}" -e ".[beam]"
  fi
  if [ "$user_venv" = 1 ]; then
    [ -x .venv-user/bin/python ] || "$user_base" -m venv .venv-user
    .venv-user/bin/python "${pip_q[@]}" -e ".[test]"
  fi
  if [ "${TEXTRAIN_SKIP_T2T:-0}" != 1 ]; then
    [ -x .venv-t2t/bin/python ] || python3 -m venv --system-site-packages .venv-t2t
    .venv-t2t/bin/python "${pip_q[@]}" --no-deps "tensor2tensor==1.15.7"
    # Fail here, not skip in the test, when the oracle cannot be imported.
    .venv-t2t/bin/python -c "from tensor2tensor.data_generators import text_encoder"
  fi
}
side_log=$(mktemp)
(renice -n 19 -p "$BASHPID" >/dev/null 2>&1 || true; side_venvs) > "$side_log" 2>&1 &
side_pid=$!
trap 'kill "$side_pid" 2>/dev/null || true; rm -f "$side_log"' EXIT

# Two pytest workers (pytest-xdist): most tests wait on one core (a subprocess importing TensorFlow, Python
# datagen), so on CI's 2 cores two at a time take the suite from ~25 to ~18 minutes. One run for the whole
# suite, the end-to-end tests marked slow first (tests/conftest.py orders them): the minute-long ones start
# early and work stealing fills the end with short tests, where two runs (fast, then slow) left a core idle
# at the end of each and started the workers twice. TEXTRAIN_TEST_WORKERS sets the count (0: one process).
workers=(-n "${TEXTRAIN_TEST_WORKERS:-2}")
[ "${TEXTRAIN_TEST_WORKERS:-2}" = 0 ] || workers+=(--dist worksteal)
python3 -m pytest -q "${workers[@]}" "$@" || ok_or_none

if ! wait "$side_pid"; then
  cat "$side_log"
  echo "tests/run.sh: making the side venvs failed (their pip output above)"
  exit 1
fi
grep -v "^WARNING: Location" "$side_log" || true
if [ "${TEXTRAIN_SKIP_BEAM:-0}" != 1 ]; then
  .venv-beam/bin/python -m pytest -q -p no:cacheprovider tests/test_beam_datagen.py "$@" || ok_or_none
  # The corpus formats through the Beam runner (Parquet in, the plain-text shards out).
  .venv-beam/bin/python -m pytest -q -p no:cacheprovider tests/test_corpus_formats.py -k beam "$@" || ok_or_none
fi
if [ "$user_venv" = 1 ]; then
  .venv-user/bin/python -m pytest -q -p no:cacheprovider -m slow tests/test_wheel.py "$@" || ok_or_none
else
  echo "tests/run.sh: no Python 3.11+ with venv at $user_base: the wheel test from inside a venv is skipped"
fi
if [ "${TEXTRAIN_SKIP_T2T:-0}" != 1 ]; then
  .venv-t2t/bin/python -m pytest -q -p no:cacheprovider tests/test_text_encoders.py -k tensor2tensor "$@" \
    || ok_or_none
fi
