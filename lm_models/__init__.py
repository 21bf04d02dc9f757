"""lm_models package."""
