"""Daily spending caps per agent, per group and for the whole team, in tokens and US dollars.

The pure values and rule (``limits``: caps, breaches, prices, the day) and what ``arena budget``
shows (``report``) do no I/O; the ledger counts in Redis (``ledger``, through
:mod:`orchestrator.adapters.redis_client`); the guard reserves a turn's estimate before its model
call and settles it after (``guard``). Imports the core and the adapters; the runtime, the web
console and the CLI import it."""
