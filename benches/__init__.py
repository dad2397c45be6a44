"""awa-fast benchmarks (see benches/RESULTS.md for figures and the commands behind them)."""
