"""API keys and roles: hashed storage, authentication dependencies, operator routes."""
