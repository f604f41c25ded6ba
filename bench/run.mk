# bench/run: the one command that reproduces the reference benchmarks and
# writes bench/results/REPORT.md (see bench/README.md).
