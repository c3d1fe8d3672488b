"""`mpirun_kit completion SHELL`: print the shell code that completes mpirun_kit's commands and flags.

Completion itself is argcomplete's: the shell calls ``mpirun_kit`` with argcomplete's environment
(``_ARGCOMPLETE``, ``COMP_LINE``), and cli/main.py hands the parser to ``argcomplete.autocomplete``.
This command only prints argcomplete's hook for one shell, the same text
``register-python-argcomplete mpirun_kit`` prints.
"""
from __future__ import annotations

SHELLS = ("bash", "zsh", "fish", "tcsh", "powershell")


def _completion(args) -> int:
    import argcomplete

    print(argcomplete.shellcode(["mpirun_kit"], shell=args.shell), end="")
    return 0


def register(subparsers) -> None:
    from .main import add_command, exit_codes

    p = add_command(
        subparsers, "completion", help="print the shell code for tab completion (bash, zsh, fish, ...)",
        description="Print the code that makes SHELL complete mpirun_kit's commands, flags and choices "
                    "(argcomplete's hook). Load it in the current shell with eval, or add that line to the "
                    "shell's start-up file (~/.bashrc, ~/.zshrc).",
        examples=['eval "$(mpirun_kit completion bash)"', "mpirun_kit completion zsh"],
        codes=exit_codes())
    p.add_argument("shell", choices=SHELLS, metavar="SHELL", help=f"one of {', '.join(SHELLS)}")
    p.set_defaults(func=_completion)
