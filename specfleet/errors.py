"""Errors the CLI turns into exit codes (see ``specfleet_cli.errors``)."""


class InputError(ValueError):
    """Bad user input: a config, a prompt file, a flag. Exit code 2.

    The message is one line naming the file, line or field and what was expected.
    """


class StorageFull(OSError):
    """The results store could not write (no space, quota, file size limit). Exit code 1.

    Everything written before stays intact: a file appears only once completely written.
    """
