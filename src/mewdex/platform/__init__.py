"""The platform around the library: users, sessions and API tokens, quotas, usage metering, grants."""
