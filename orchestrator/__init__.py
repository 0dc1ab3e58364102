"""Agent Arena: one person and a team of AI role agents working together in group chats."""

__version__ = "0.1.0"
