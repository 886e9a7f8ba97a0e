"""Scripted fakes of the remote services the agent CLIs talk to (used by E2E tests)."""
