"""One-line errors for the command-line entry points, on both sides of the robot boundary.

A robot operator who passes a wrong parameter, a corrupt model or a broken parameter file must see
one line naming the problem and a non-zero exit code, not a 20-line traceback from onnxruntime,
rcl or yaml. ``COVEY_DEBUG=1`` re-raises the original exception for developers (the ROS entry points:
:func:`report`; the tools: :func:`run_main`, which :func:`exit_on_user_error` narrows to :class:`UserError` such as
``sim.core.config.ConfigError`` for the simulator's and trainer's scripts; there ``HYDRA_FULL_ERROR=1`` does too).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import re
import sys
import typing
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# "..., at /project/src/parse.c:835" tails that rcl appends to its errors say nothing to a user.
_RCL_TAIL = re.compile(r",? at /\S+:\d+")


def one_line(err: BaseException) -> str:
    """``err`` as one line: its message with newlines folded and rcl source locations dropped;
    the exception's type is prefixed unless it is a plain ValueError/FileNotFoundError (ours)."""
    msg = " ".join(part.strip() for part in str(err).splitlines() if part.strip())
    msg = _RCL_TAIL.sub("", msg).strip() or repr(err)
    if type(err) in (ValueError, FileNotFoundError) or isinstance(err, UserError):  # ours: written for the user
        return msg
    return f"{type(err).__name__}: {msg}"


def report(prog: str, err: BaseException) -> int:
    """Print ``prog: <one line>`` on stderr and return the exit code 1 (re-raise with COVEY_DEBUG=1)."""
    if os.environ.get("COVEY_DEBUG"):
        raise err
    print(f"{prog}: {one_line(err)}", file=sys.stderr)
    return 1


def check_params_files(argv: list[str] | None) -> None:
    """ValueError naming the file when a ``--params-file`` in ``argv`` is missing or not a YAML mapping.

    Checked before ``rclpy.init`` because rcl logs its own multi-line error for an unparsable file.
    """
    import yaml  # a dependency of the robot install (the launcher reads parameter files too)

    args = list(sys.argv if argv is None else argv)
    for flag, path in zip(args, args[1:], strict=False):
        if flag != "--params-file":
            continue
        try:
            with open(path) as f:
                doc = yaml.safe_load(f)
        except FileNotFoundError:
            raise ValueError(f"--params-file {path}: no such file") from None
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ValueError(f"--params-file {path}: not a readable YAML file ({' '.join(str(exc).split())})") from None
        if not isinstance(doc, dict):
            raise ValueError(f"--params-file {path}: a ROS parameter file is a YAML mapping of node names")


class UserError(ValueError):
    """A mistake of the user (an argument, a config value, a file), told in one line without a traceback."""


def exit_on_user_error(prog: str, fn: Callable[[], T], errors: tuple[type[BaseException], ...] = ()) -> T:
    """:func:`run_main` for the simulator's and trainer's scripts: only a :class:`UserError`
    (``sim.core.config.ConfigError`` is one) and the caller's ``errors`` are the user's, anything else keeps its
    traceback."""
    return run_main(prog, fn, errors=(UserError, *errors))


def usage(cls: type) -> list[str]:
    """One line per field of an arguments dataclass: ``key=default  type  help`` (``metadata["help"]``)."""
    hints = typing.get_type_hints(cls)
    lines = []
    for f in dataclasses.fields(cls):
        hint = str(hints[f.name]).replace("<class '", "").replace("'>", "").replace("typing.", "")
        lines.append(f"  {f'{f.name}={f.default}':<24} {hint:<12} {f.metadata.get('help', '')}")
    return lines


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: ``<prog>: error: <message> (--help for usage)``, exit code 2, instead of
    the usage block and the error on separate lines."""

    def error(self, message: str) -> typing.NoReturn:
        print(f"{self.prog}: error: {' '.join(message.split())} (--help for usage)", file=sys.stderr)
        raise SystemExit(2)


# What a command-line tool reports in one line: the user's mistakes (arguments, values, names) and the
# files they named (missing, unreadable, of the wrong kind). Anything else is a bug and keeps its traceback.
USER_FACING_ERRORS: tuple[type[BaseException], ...] = (UserError, ValueError, KeyError, OSError, pickle.UnpicklingError)


def run_main(prog: str, main: Callable[[], T], errors: tuple[type[BaseException], ...] = USER_FACING_ERRORS) -> T:
    """Run a tool's ``main``: ``errors`` (the user's mistakes) print ``<prog>: error: <one line>`` and exit with
    code 2, Ctrl-C prints ``<prog>: interrupted`` and exits with 130; ``COVEY_DEBUG=1`` (or hydra's
    ``HYDRA_FULL_ERROR=1``) re-raises both. The one copy of this behaviour for every entry point."""
    debug = bool(os.environ.get("COVEY_DEBUG")) or os.environ.get("HYDRA_FULL_ERROR") == "1"
    try:
        return main()
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except errors as err:
        if debug:
            raise
        print(f"{prog}: error: {one_line(err)}", file=sys.stderr)
        raise SystemExit(2) from None
