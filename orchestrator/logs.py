"""Log set-up: the only place handlers are configured."""

from __future__ import annotations

import logging.config

__all__ = ["configure"]


def configure(level: str = "INFO") -> None:
    """Log to stderr, one line per record, at ``level``; quieten chatty libraries.

    A record does not look up its thread's and its process's names (the lines do not show
    them): the daemon logs a line per message."""
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "plain": {
                    "format": "%(asctime)s %(levelname)-7s %(name)s: %(message)s",
                    "datefmt": "%Y-%m-%d %H:%M:%S",
                }
            },
            "handlers": {
                "stderr": {
                    "class": "logging.StreamHandler",
                    "formatter": "plain",
                    "stream": "ext://sys.stderr",
                }
            },
            "root": {"level": level, "handlers": ["stderr"]},
            "loggers": {
                name: {"level": "WARNING" if level != "DEBUG" else "DEBUG"}
                for name in (
                    "amqtt",
                    "transitions",
                    "httpx",
                    "httpx2",
                    "httpcore",
                    "httpcore2",
                    "anthropic",
                    "rq.worker",
                    "apscheduler",
                    "uvicorn.access",  # a line per request: DEBUG only
                    "uvicorn.error",  # its start and stop lines; `arena up` says where it is
                )
            },
        }
    )
