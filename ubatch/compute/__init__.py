"""The compute layer: C kernels (RoPE, attention, ...) and their wrappers, the K/V data and the runner."""
