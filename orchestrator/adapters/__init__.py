"""What talks to the world: Redis streams and leases, MQTT events, model providers (Anthropic,
circuit breaker, and which one a process uses) and the embedded servers. Imports the offline
model and the core only."""
