"""Errors the command line reports as one clear line and exit status 2."""


class UserError(Exception):
    """Bad input from the user (config, CLI argument, file): message names what is wrong."""
