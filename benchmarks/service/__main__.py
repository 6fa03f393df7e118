"""``python -m benchmarks.service``: the benchmark's command line."""

from benchmarks.service import main

if __name__ == "__main__":
    main()
