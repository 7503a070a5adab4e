"""Programs that run inside the jail, not imported by r1kit."""
