"""What agents remember: reply markers, the memory gate, the session store and personal logs."""
