"""What talks to the world: Redis streams and leases, MQTT events, model providers (Anthropic,
offline, circuit breaker) and the embedded servers. Imports the core only."""
