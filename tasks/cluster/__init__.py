"""Ray: the session, what each arm asks for, arms as remote tasks run stage by stage, Ctrl-C."""
