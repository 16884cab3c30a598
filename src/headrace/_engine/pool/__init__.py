"""The worker pool of parallel stages, its executors and worker processes."""
