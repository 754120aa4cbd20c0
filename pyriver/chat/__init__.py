"""`pyriver chat`: the interactive terminal chat.
May import: pyriver.api, pyriver.cli, pyriver.speculative, pyriver.text (the split of thinking from an answer)."""
