"""Tools for measuring ubatch, not used on any inference path: `reference` is an independent float64 forward
of the supported architectures (the fidelity instrument: docs/models.md, Fidelity)."""
