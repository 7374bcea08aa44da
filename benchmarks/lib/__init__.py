"""What the benchmark scripts share (and the tests that run the originals beside ours): the same-run
runner, the step-benchmark pieces, the keras-hub peers, the corpus files of every format."""
