"""The web console: the HTTP API, server-sent events and the pages built on them.

Served by ``arena up`` (and ``arena web`` alone). Imports the client, runtime, background,
memory, adapters and core; only the CLI imports it.
"""
