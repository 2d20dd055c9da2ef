"""Placeholder until the command lands."""
from caption_debias.errors import UserError



def urls() -> None:
    """Not implemented yet."""
    raise UserError("this command is not implemented yet")


def export_captions() -> None:
    """Not implemented yet."""
    raise UserError("this command is not implemented yet")
