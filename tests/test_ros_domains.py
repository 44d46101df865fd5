"""The ROS tests' DDS domains: two live processes never share one (see ``ros_domains``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ros_domains
from ros_domains import claim_ros_domain


def test_concurrent_processes_claim_different_domains_and_a_tag_keeps_its_own() -> None:
    mine = claim_ros_domain("domain_test")
    assert claim_ros_domain("domain_test") == mine
    assert claim_ros_domain("domain_test_other") != mine
    # A second process asking for the same tags while this one holds them (starting its search where this
    # one did, so only the locks keep them apart), and holding its own meanwhile.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import ros_domains as r; "
        "r._first_try = lambda: int(sys.argv[2]); c = r.claim_ros_domain; "
        "print(c('domain_test'), c('domain_test_other'), c('third'))"
    )
    cmd = [sys.executable, "-c", code, str(Path(__file__).parent), str(ros_domains._first_try())]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    theirs = [int(x) for x in out.stdout.split()]
    assert len(set(theirs)) == 3 and not set(theirs) & {mine, claim_ros_domain("domain_test_other")}, theirs
    assert all(1 <= d <= 101 for d in [*theirs, mine])
