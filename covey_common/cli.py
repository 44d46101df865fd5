"""One-line errors for the ROS entry points (policy node, sim bridge, launcher).

A robot operator who passes a wrong parameter, a corrupt model or a broken parameter file must see
one line naming the problem and a non-zero exit code, not a 20-line traceback from onnxruntime,
rcl or yaml. ``COVEY_DEBUG=1`` re-raises the original exception for developers.
"""

from __future__ import annotations

import os
import re
import sys

# "..., at /project/src/parse.c:835" tails that rcl appends to its errors say nothing to a user.
_RCL_TAIL = re.compile(r",? at /\S+:\d+")


def one_line(err: BaseException) -> str:
    """``err`` as one line: its message with newlines folded and rcl source locations dropped;
    the exception's type is prefixed unless it is a plain ValueError/FileNotFoundError (ours)."""
    msg = " ".join(part.strip() for part in str(err).splitlines() if part.strip())
    msg = _RCL_TAIL.sub("", msg).strip() or repr(err)
    if type(err) in (ValueError, FileNotFoundError):
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
