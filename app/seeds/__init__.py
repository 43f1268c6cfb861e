"""The deployment's seed epochs: one secret per epoch, proven by every worker before it judges."""
