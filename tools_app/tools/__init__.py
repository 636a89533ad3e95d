"""Tool registrations: where the tools a run may use come from (Python functions synced
from code today). Imports the engine and the models only."""
