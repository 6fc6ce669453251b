"""Pictures (matplotlib, an optional extra: `pip install ubatch[plot]`)."""
