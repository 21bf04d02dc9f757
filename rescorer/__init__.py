"""rescorer package."""
