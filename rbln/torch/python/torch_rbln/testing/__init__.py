"""Small reference models for tests, demos and benchmarks."""
