"""matrix.toml, validated, and the registry of runtime kinds and providers."""
