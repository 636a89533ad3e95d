"""The JSON API under `/api/`: bearer-token auth, bodies validated by pydantic models, one
error shape, and the OpenAPI document built from the routes."""
