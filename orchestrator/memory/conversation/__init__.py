"""A group's stored conversation: the message store, its full-text index, ``arena import``
and the recent-messages cache."""
