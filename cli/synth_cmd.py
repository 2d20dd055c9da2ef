"""Placeholder until the command lands."""
from caption_debias.errors import UserError



def synth() -> None:
    """Not implemented yet."""
    raise UserError("this command is not implemented yet")
