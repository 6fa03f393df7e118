"""``python -m benchmarks.service``: the benchmark's command line (:mod:`benchmarks.service.cli`)."""

from benchmarks.service.cli import main

if __name__ == "__main__":
    main()
