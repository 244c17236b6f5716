"""Errors the CLI turns into exit codes (see ``cli.exit_codes``)."""


class InputError(ValueError):
    """Bad user input: a config, a prompt file, a flag. Exit code 2.

    The message is one line naming the file, line or field and what was expected.
    """
