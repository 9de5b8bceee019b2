"""rulespec layer."""
