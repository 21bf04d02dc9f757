"""rescorer.core package."""
