"""ROS parameters read the same way by the robot's policy node and the simulator's bridge.

``-p wait_timeout_s:=20`` reaches a node as an integer; a parameter declared with a float default would
reject it with rcl's type error. Declared with dynamic typing and converted here, any number is accepted
and anything else is one ValueError naming the parameter. rclpy is imported when a node calls this, so the
module stays importable without ROS.
"""

from __future__ import annotations

from typing import Any


def float_parameter(node: Any, name: str, default: float) -> float:
    """Declare ``name`` on ``node`` (an ``rclpy.node.Node``) and return it as a float (ints accepted)."""
    from rcl_interfaces.msg import ParameterDescriptor

    value = node.declare_parameter(name, float(default), ParameterDescriptor(dynamic_typing=True)).value
    if isinstance(value, bool):  # bool is an int to Python, not a number to an operator
        raise ValueError(f"parameter {name!r} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"parameter {name!r} must be a number, got {value!r}") from None
