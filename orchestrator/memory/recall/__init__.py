"""Recall: the memories and earlier messages put in front of an agent at a turn (``recaller``),
how each is scored (``ranking``), the final fit within entries and characters (``fit``) and the
values it returns (``values``)."""
