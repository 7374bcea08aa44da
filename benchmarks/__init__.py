"""Side-by-side benchmarks (benchmarks/README.md). A regular package, so that `from benchmarks.lib import same_run`
finds this folder and not a `benchmarks` package some other distribution installs (pysbd ships one)."""
