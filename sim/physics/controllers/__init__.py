"""Low-level multirotor controllers (run at the controller rate, produce rotor speed commands)."""

from sim.physics.controllers.indi import INDIController, INDIGains
from sim.physics.controllers.rate_pid import RatePIDController, RatePIDGains

__all__ = ["INDIController", "INDIGains", "RatePIDController", "RatePIDGains"]
