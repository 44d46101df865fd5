"""DDS domains for ROS tests: each caller gets a domain no other process on this machine holds.

Fixed domain ids collide when two test runs share a machine (two CI checkouts, or a run beside a
developer's): nodes of one run then receive the other's states and commands (seen once: a lockstep
SITL flight ended 0.56 m off instead of 0.027 m). A domain is claimed with an exclusive ``flock`` on
a file under the temp folder and held until the process exits, so concurrent pytest workers and runs
each get their own.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

# Domains 1-101: RTPS ports (7400 + 250 * domain + offsets) stay below Linux's ephemeral port range
# (32768-60999); 0 is ROS's default, left to whatever else runs here.
_FIRST, _LAST = 1, 101
_held: dict[str, tuple[int, int]] = {}  # tag -> (domain, file descriptor of its lock)


def _first_try() -> int:
    """Where this process starts looking: spread over the range by pid, so that claims rarely contend."""
    return os.getpid() % (_LAST - _FIRST + 1)


def claim_ros_domain(tag: str) -> int:
    """A DDS domain id held by this process for ``tag`` (the same id for the same tag)."""
    if tag in _held:
        return _held[tag][0]
    folder = Path(tempfile.gettempdir()) / "covey-ros-domains"
    folder.mkdir(exist_ok=True)
    start = _first_try()
    for k in range(_LAST - _FIRST + 1):
        domain = _FIRST + (start + k) % (_LAST - _FIRST + 1)
        fd = os.open(folder / f"{domain}.lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _held[tag] = (domain, fd)
        return domain
    raise RuntimeError(f"every DDS domain {_FIRST}-{_LAST} is held by another process on this machine")


def ros_env(tag: str) -> dict[str, str]:
    """This process's environment for ROS node processes on ``tag``'s domain, discovery on loopback only."""
    return {
        **os.environ,
        "ROS_DOMAIN_ID": str(claim_ros_domain(tag)),
        "ROS_LOCALHOST_ONLY": "1",
        "OMP_NUM_THREADS": "1",
    }
