"""One rule per module: `evaluate(window) -> Finding | None`, thresholds named and cited."""
