"""`pyriver chat`: the interactive terminal chat.
May import: pyriver.api, pyriver.cli, pyriver.speculative."""
